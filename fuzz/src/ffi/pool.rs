//! A pool's life through the C ABI: `pz_pool_new` from any configuration
//! (refused with an errno or made), then allocations, frees of chunks and of
//! pointers that are none (interior, foreign, freed: `-EINVAL`, nothing
//! changed), trims, stats and early destroys (`-EBUSY`), and at last the
//! destroy, after which the handle is refused. Zeroed chunks are zero; every
//! live chunk keeps what was written to it; no two overlap; the stats add up.

use std::ffi::c_void;

use arbitrary::Arbitrary;
use prezero_capi::{self as ffi, PzPool, PzPoolConfig, PzPoolStats};

use super::{succeeded, Buffers};

#[derive(Arbitrary, Debug)]
pub struct Life {
    cfg: Cfg,
    ops: Vec<PoolOp>,
}

#[derive(Arbitrary, Debug)]
struct Cfg {
    chunk: Chunk,
    /// Any number: 0-3 are page kinds, the rest refused.
    backing: i8,
    capacity: Capacity,
    low: Option<usize>,
    high: Option<usize>,
    scrubbers: u8,
    priority: i8,
    prefill: u8,
    verify: bool,
    hot_window: Option<usize>,
    /// A `struct_size` this library does not know: refused.
    bad_size: Option<usize>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Chunk {
    Pages(u8),
    Mib(u8),
    Any(usize),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Capacity {
    Chunks(u8),
    Any(usize),
}

#[derive(Arbitrary, Debug)]
enum PoolOp {
    AllocZeroed,
    AllocZeroedTimeout(u16),
    Alloc,
    Free(u8),
    FreeInterior(u8, u32),
    FreeForeign(u32),
    /// The chunk freed last, if it is not handed out again.
    FreeAgain,
    Trim(usize),
    Stats,
    Destroy,
}

/// Chunks live at once at most: what they hold counts against the fuzzer's
/// memory limit.
const LIVE_MAX: usize = 16;
/// The largest chunk tried.
const CHUNK_MAX: usize = 16 << 20;

/// A chunk handed out: where, and the tag written at its ends.
struct Live {
    p: *mut u8,
    tag: u8,
}

impl Cfg {
    fn c(&self) -> PzPoolConfig {
        let chunk = match self.chunk {
            Chunk::Pages(n) => usize::from(n) * 4096,
            Chunk::Mib(n) => usize::from(n % 17) << 20,
            Chunk::Any(n) if n <= CHUNK_MAX => n,
            // Arbitrary, but not so large the prefill maps gigabytes.
            Chunk::Any(n) => n % (CHUNK_MAX + 1),
        };
        // SAFETY: an all-zero config is a valid value (numbers only).
        let mut c: PzPoolConfig = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a writable config.
        assert_eq!(unsafe { ffi::pz_pool_config_init(&mut c) }, 0);
        c = PzPoolConfig {
            chunk_size: chunk,
            backing: self.backing.into(),
            capacity: match self.capacity {
                Capacity::Chunks(n) => chunk.saturating_mul(n.into()),
                Capacity::Any(n) => n,
            },
            low_watermark: self.low.unwrap_or(usize::MAX),
            high_watermark: self.high.unwrap_or(usize::MAX),
            scrubbers: usize::from(self.scrubbers % 4),
            priority: self.priority.into(),
            prefill: usize::from(self.prefill % 9),
            verify: self.verify.into(),
            hot_window: self.hot_window.unwrap_or(usize::MAX),
            ..c
        };
        c.struct_size = self
            .bad_size
            .filter(|&s| s != size_of::<PzPoolConfig>())
            .unwrap_or(size_of::<PzPoolConfig>());
        c
    }
}

fn tag_ok(p: *mut u8, chunk: usize, tag: u8) -> bool {
    // SAFETY: a live chunk of `chunk` bytes.
    unsafe { p.read() == tag && p.add(chunk - 1).read() == tag }
}

impl Life {
    pub fn run(self, b: &mut Buffers) {
        let c = self.cfg.c();
        let mut pool: *mut PzPool = std::ptr::null_mut();
        // SAFETY: `c` readable for its struct_size when that is ours (else
        // refused on reading the first field), `pool` writable.
        let rc = unsafe { ffi::pz_pool_new(&c, &mut pool) };
        if !succeeded(rc, &(&self.cfg, &c)) {
            assert!(pool.is_null(), "refused, yet it wrote the handle");
            return;
        }
        assert!(
            self.cfg
                .bad_size
                .is_none_or(|s| s == size_of::<PzPoolConfig>()),
            "{c:?}: an unknown struct_size taken"
        );
        let chunk = c.chunk_size;
        let mut live: Vec<Live> = Vec::new();
        let mut freed: Option<*mut u8> = None;
        let mut next_tag = 1u8;
        let what = &self.cfg;
        for op in &self.ops {
            // SAFETY (every call): `pool` is live; each out-pointer writable.
            match *op {
                PoolOp::AllocZeroed | PoolOp::AllocZeroedTimeout(_) | PoolOp::Alloc
                    if live.len() < LIVE_MAX =>
                {
                    let mut out: *mut c_void = std::ptr::null_mut();
                    let zeroed = !matches!(op, PoolOp::Alloc);
                    let rc = match *op {
                        PoolOp::AllocZeroed => unsafe { ffi::pz_pool_alloc_zeroed(pool, &mut out) },
                        PoolOp::AllocZeroedTimeout(ns) => unsafe {
                            ffi::pz_pool_alloc_zeroed_timeout(pool, ns.into(), &mut out)
                        },
                        _ => unsafe { ffi::pz_pool_alloc(pool, &mut out) },
                    };
                    if !succeeded(rc, &(what, op)) {
                        assert!(
                            rc == -libc::EAGAIN || rc == -libc::ENOMEM,
                            "{what:?} {op:?}: {rc}"
                        );
                        continue;
                    }
                    let p = out.cast::<u8>();
                    assert!(
                        !p.is_null()
                            && live
                                .iter()
                                .all(|l| (l.p as usize).abs_diff(p as usize) >= chunk),
                        "{what:?}: {p:?} overlaps a live chunk"
                    );
                    if zeroed {
                        // SAFETY: the chunk just handed out, `chunk` bytes.
                        let s = unsafe { std::slice::from_raw_parts(p, chunk) };
                        assert!(
                            prezero::is_zero(s),
                            "{what:?} {op:?}: a zeroed chunk is not zero"
                        );
                    }
                    next_tag = next_tag.wrapping_add(1).max(1);
                    // SAFETY: as above.
                    unsafe {
                        p.write(next_tag);
                        p.add(chunk - 1).write(next_tag);
                    }
                    live.push(Live { p, tag: next_tag });
                    if freed == Some(p) {
                        freed = None;
                    }
                }
                PoolOp::Free(i) if !live.is_empty() => {
                    let l = live.swap_remove(usize::from(i) % live.len());
                    assert!(tag_ok(l.p, chunk, l.tag), "{what:?}: a live chunk changed");
                    assert_eq!(unsafe { ffi::pz_pool_free(pool, l.p.cast()) }, 0);
                    freed = Some(l.p);
                }
                PoolOp::FreeInterior(i, off) if !live.is_empty() && chunk > 1 => {
                    let l = &live[usize::from(i) % live.len()];
                    let inner = l.p.wrapping_add(1 + off as usize % (chunk - 1));
                    assert_eq!(
                        unsafe { ffi::pz_pool_free(pool, inner.cast()) },
                        -libc::EINVAL,
                        "{what:?}: an interior free"
                    );
                }
                PoolOp::FreeForeign(off) => {
                    let p = b.dst.ptr().wrapping_add(off as usize % b.dst.usable());
                    assert_eq!(unsafe { ffi::pz_pool_free(pool, p.cast()) }, -libc::EINVAL);
                    assert_eq!(
                        unsafe { ffi::pz_pool_free(pool, std::ptr::null_mut()) },
                        -libc::EINVAL
                    );
                }
                PoolOp::FreeAgain => {
                    if let Some(p) = freed {
                        assert_eq!(
                            unsafe { ffi::pz_pool_free(pool, p.cast()) },
                            -libc::EINVAL,
                            "{what:?}: a double free"
                        );
                    }
                }
                PoolOp::Trim(keep) => {
                    let mut given = usize::MAX;
                    let rc = unsafe { ffi::pz_pool_trim(pool, keep, &mut given) };
                    assert!(succeeded(rc, &(what, op)), "{what:?} {op:?}: {rc}");
                    assert!(given.is_multiple_of(chunk), "{what:?}: trimmed {given}");
                }
                PoolOp::Stats => {
                    let mut s = PzPoolStats {
                        struct_size: size_of::<PzPoolStats>(),
                        ..Default::default()
                    };
                    assert_eq!(unsafe { ffi::pz_pool_stats(pool, &mut s) }, 0);
                    assert_eq!(s.in_use, live.len(), "{what:?}: {s:?}");
                    assert_eq!(
                        s.zeroed + s.dirty + s.scrubbing + s.in_use,
                        s.mapped,
                        "{what:?}: {s:?}"
                    );
                    assert_eq!(s.chunk_size, chunk);
                }
                PoolOp::Destroy if !live.is_empty() => {
                    assert_eq!(
                        unsafe { ffi::pz_pool_destroy(pool) },
                        -libc::EBUSY,
                        "{what:?}: destroyed in use"
                    );
                }
                _ => {}
            }
            for l in &live {
                assert!(
                    tag_ok(l.p, chunk, l.tag),
                    "{what:?} after {op:?}: a live chunk changed"
                );
            }
        }
        for l in live.drain(..) {
            // SAFETY: a live chunk of the live pool.
            assert_eq!(unsafe { ffi::pz_pool_free(pool, l.p.cast()) }, 0);
        }
        // SAFETY: the pool's last call, then calls on a freed handle, which
        // every call checks before use.
        unsafe {
            assert_eq!(ffi::pz_pool_destroy(pool), 0);
            assert_eq!(ffi::pz_pool_destroy(pool), -libc::EINVAL, "destroyed twice");
            let mut out: *mut c_void = std::ptr::null_mut();
            assert_eq!(
                ffi::pz_pool_alloc(pool, &mut out),
                -libc::EINVAL,
                "a destroyed pool served"
            );
        }
    }
}
