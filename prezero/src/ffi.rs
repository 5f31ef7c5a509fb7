//! The C ABI (`include/prezero.h`, generated from this file by cbindgen).
//!
//! Every function returns 0 or a negative errno-style code (see `pz_strerror`),
//! checks every pointer for NULL and every size for overflow, and runs behind a
//! panic boundary: no panic ever crosses into C (one that would is reported as
//! `-ENOTRECOVERABLE`).
//!
//! Memory passed in as `(ptr, len)` must be valid for `len` bytes as the
//! function documents: that much C has to promise, as with `memset`.
#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_void};
use std::ops::ControlFlow;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;
use std::time::Duration;

use crate::clear::{Kernel, Strategy, Temperature};
use crate::error::{Error, Result};
use crate::pool::{Pool, ScrubPriority};
use crate::region::{PageKind, Region};
use crate::service::{AllocOptions, Client, ServiceMemory, Source};
use crate::template::Streamer;

/// Auto, temperature unknown.
pub const PZ_STRATEGY_AUTO: c_int = 0;
/// Auto, for memory about to be used (cache-hot).
pub const PZ_STRATEGY_AUTO_HOT: c_int = 1;
/// Auto, for memory not in cache.
pub const PZ_STRATEGY_AUTO_COLD: c_int = 2;
/// `rep stosb` (x86_64).
pub const PZ_STRATEGY_REP_STOSB: c_int = 3;
/// AVX-512 non-temporal stores.
pub const PZ_STRATEGY_AVX512_NT: c_int = 4;
/// AVX2 non-temporal stores.
pub const PZ_STRATEGY_AVX2_NT: c_int = 5;
/// SSE2 `movnti`.
pub const PZ_STRATEGY_MOVNTI: c_int = 6;
/// AMD `clzero`.
pub const PZ_STRATEGY_CLZERO: c_int = 7;
/// Temporal AVX-512 stores.
pub const PZ_STRATEGY_AVX512: c_int = 8;
/// Temporal AVX2 stores.
pub const PZ_STRATEGY_AVX2: c_int = 9;
/// aarch64 `dc zva`.
pub const PZ_STRATEGY_DC_ZVA: c_int = 10;
/// `memset`.
pub const PZ_STRATEGY_PORTABLE: c_int = 11;

/// Base pages (4 KiB on x86_64).
pub const PZ_PAGE_BASE: c_int = 0;
/// Transparent huge pages (`MADV_HUGEPAGE`, PMD-aligned).
pub const PZ_PAGE_THP: c_int = 1;
/// hugetlb 2 MiB pages.
pub const PZ_PAGE_HUGE_2M: c_int = 2;
/// hugetlb 1 GiB pages.
pub const PZ_PAGE_HUGE_1G: c_int = 3;

/// Scrubber under `SCHED_IDLE` (falls back to nice 19).
pub const PZ_SCRUB_IDLE: c_int = 0;
/// Scrubber at nice 19.
pub const PZ_SCRUB_NICE19: c_int = 1;
/// Scrubber at normal priority.
pub const PZ_SCRUB_NORMAL: c_int = 2;

/// Runs `f` behind the panic boundary, turning its `Result` into a return code.
fn guard(f: impl FnOnce() -> Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => -e.errno(),
        Err(_) => -libc::ENOTRECOVERABLE,
    }
}

fn inval(msg: &str) -> Error {
    Error::invalid(msg)
}

/// A writable `(ptr, len)` from C as a slice: NULL is an error unless `len == 0`;
/// a range that wraps the address space or exceeds `isize::MAX` is an error.
unsafe fn bytes_mut<'a>(ptr: *mut c_void, len: usize) -> Result<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(inval("NULL pointer"));
    }
    if len > isize::MAX as usize || (ptr as usize).checked_add(len).is_none() {
        return Err(inval("size overflows the address space"));
    }
    // SAFETY: the caller promises [ptr, ptr+len) is valid and unaliased (documented).
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr.cast(), len) })
}

unsafe fn bytes<'a>(ptr: *const c_void, len: usize) -> Result<&'a [u8]> {
    // SAFETY: as bytes_mut; only read.
    unsafe { bytes_mut(ptr as *mut c_void, len).map(|b| &*b) }
}

/// A caller's versioned struct (its first field is `size_t struct_size`): not
/// NULL, and of the size this library was built with.
unsafe fn versioned<T>(p: *const T, name: &str) -> Result<()> {
    if p.is_null() {
        return Err(inval("NULL argument"));
    }
    // SAFETY: not NULL, and every versioned struct begins with its size as a size_t.
    if unsafe { p.cast::<usize>().read() } != std::mem::size_of::<T>() {
        return Err(Error::invalid(format!(
            "unknown {name}.struct_size (set it to sizeof({name}))"
        )));
    }
    Ok(())
}

/// `count` records of `elem_size` bytes at `dst`, as one slice: a zero record
/// size or a total that overflows is an error.
/// `count * elem_size`, checked: a record has at least one byte and the
/// total fits in the address space.
fn record_bytes(count: usize, elem_size: usize) -> Result<usize> {
    if elem_size == 0 {
        return Err(inval("elem_size is 0"));
    }
    count
        .checked_mul(elem_size)
        .ok_or_else(|| inval("count * elem_size overflows"))
}

unsafe fn records<'a>(dst: *mut c_void, count: usize, elem_size: usize) -> Result<&'a mut [u8]> {
    let total = record_bytes(count, elem_size)?;
    // SAFETY: the caller promises the range (see the module docs).
    unsafe { bytes_mut(dst, total) }
}

/// Refuses `what` (`len` bytes at `p`) if it overlaps the destination: the
/// fill would read what it has just written, and Rust may not hold a `&mut`
/// and a `&` over the same bytes. Checked on the raw ranges, before any slice
/// exists.
fn apart(
    dst: *const c_void,
    dst_len: usize,
    p: *const c_void,
    len: usize,
    what: &str,
) -> Result<()> {
    let (d, q) = (dst as usize, p as usize);
    if dst_len > 0 && len > 0 && d < q.saturating_add(len) && q < d.saturating_add(dst_len) {
        return Err(inval(&format!("{what} overlaps the destination")));
    }
    Ok(())
}

/// The destination and the head and tail templates of a grouped fill as
/// slices, once neither template overlaps the destination.
///
/// # Safety
/// `dst` is writable for `count * elem_size` bytes, `head` and `tail` readable
/// for `elem_size` (NULL is an error), as the C caller promises.
unsafe fn head_and_tail<'a>(
    dst: *mut c_void,
    count: usize,
    elem_size: usize,
    head: *const c_void,
    tail: *const c_void,
) -> Result<(&'a mut [u8], &'a [u8], &'a [u8])> {
    let total = record_bytes(count, elem_size)?;
    apart(dst, total, head, elem_size, "the head template")?;
    apart(dst, total, tail, elem_size, "the tail template")?;
    // SAFETY: the caller's promise; no template overlaps the destination.
    unsafe {
        Ok((
            records(dst, count, elem_size)?,
            bytes(head, elem_size)?,
            bytes(tail, elem_size)?,
        ))
    }
}

fn strategy(s: c_int) -> Result<Strategy> {
    Ok(match s {
        PZ_STRATEGY_AUTO => Strategy::Auto(Temperature::Unknown),
        PZ_STRATEGY_AUTO_HOT => Strategy::Auto(Temperature::Hot),
        PZ_STRATEGY_AUTO_COLD => Strategy::Auto(Temperature::Cold),
        3..=11 => Strategy::Kernel(Kernel::ALL[(s - 3) as usize]),
        _ => return Err(inval("unknown strategy")),
    })
}

fn page_kind(k: c_int) -> Result<PageKind> {
    match k {
        PZ_PAGE_BASE => Ok(PageKind::Base),
        PZ_PAGE_THP => Ok(PageKind::Thp),
        PZ_PAGE_HUGE_2M => Ok(PageKind::Huge2M),
        PZ_PAGE_HUGE_1G => Ok(PageKind::Huge1G),
        _ => Err(inval("unknown page kind")),
    }
}

/// A static, NUL-terminated description of a return code of this library.
#[no_mangle]
pub extern "C" fn pz_strerror(code: c_int) -> *const c_char {
    let s: &'static [u8] = match -code {
        0 => b"success\0",
        libc::EINVAL => b"invalid argument (NULL pointer, bad size, unknown value, or not ours)\0",
        libc::ENOTSUP => b"not supported by this CPU or kernel\0",
        libc::ENOMEM => b"out of memory (or too few free hugetlb pages)\0",
        libc::EAGAIN => b"pool exhausted\0",
        libc::EBUSY => b"pool still has chunks outstanding\0",
        libc::EIO => b"verify mode found non-zero memory about to be handed out\0",
        libc::ETIMEDOUT => b"timed out\0",
        libc::ENOTRECOVERABLE => b"internal error (a panic was stopped at the C boundary)\0",
        libc::EPERM | libc::EACCES => b"not permitted\0",
        libc::EFAULT => b"bad address\0",
        libc::ENOENT => b"no such file (no prezero serve socket at that path)\0",
        libc::ECONNREFUSED => b"connection refused (a stale prezero serve socket)\0",
        libc::ENOTCONN => b"not connected to prezero serve\0",
        libc::EDQUOT => b"over this uid's cap at prezero serve\0",
        libc::EPROTO => b"protocol error talking to prezero serve\0",
        _ => b"system error (see errno for this value)\0",
    };
    s.as_ptr().cast()
}

/// The library version, e.g. "0.1.0". Static; never free it.
#[no_mangle]
pub extern "C" fn pz_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Zeroes `len` bytes at `ptr` (Auto). `ptr` may be NULL only if `len == 0`.
#[no_mangle]
pub unsafe extern "C" fn pz_clear(ptr: *mut c_void, len: usize) -> c_int {
    // SAFETY: the caller promises the range (see the module docs).
    guard(|| {
        crate::clear(unsafe { bytes_mut(ptr, len)? });
        Ok(())
    })
}

/// Zeroes `len` bytes at `ptr` with a `PZ_STRATEGY_*`. `-ENOTSUP` if the CPU lacks
/// the kernel, `-EINVAL` for an unknown value.
#[no_mangle]
pub unsafe extern "C" fn pz_clear_strategy(
    ptr: *mut c_void,
    len: usize,
    strategy_: c_int,
) -> c_int {
    guard(|| {
        let s = strategy(strategy_)?;
        // SAFETY: the caller promises the range.
        crate::clear_with(unsafe { bytes_mut(ptr, len)? }, s)
    })
}

/// Zeroes in chunks of at most `max_chunk` bytes, calling `on_chunk(done, ctx)`
/// between chunks; a non-zero return stops the clear. `*cleared` (if not NULL)
/// receives the bytes cleared: exactly `[ptr, ptr + *cleared)` is zero.
#[no_mangle]
pub unsafe extern "C" fn pz_clear_bounded(
    ptr: *mut c_void,
    len: usize,
    max_chunk: usize,
    on_chunk: Option<unsafe extern "C" fn(done: usize, ctx: *mut c_void) -> c_int>,
    ctx: *mut c_void,
    cleared: *mut usize,
) -> c_int {
    guard(|| {
        let cb = on_chunk.ok_or_else(|| inval("on_chunk is NULL"))?;
        // SAFETY: the caller promises the range.
        let buf = unsafe { bytes_mut(ptr, len)? };
        let n = crate::clear_bounded(buf, max_chunk, |done| {
            // SAFETY: a C callback with the caller's own context.
            if unsafe { cb(done, ctx) } == 0 {
                ControlFlow::Continue(())
            } else {
                ControlFlow::Break(())
            }
        })?;
        if !cleared.is_null() {
            // SAFETY: the caller passed a writable size_t or NULL.
            unsafe { cleared.write(n) };
        }
        Ok(())
    })
}

/// Zeroes in locality order around offset `hint` (clamped to the last byte):
/// the hint's neighbourhood last, with cache-hot stores.
#[no_mangle]
pub unsafe extern "C" fn pz_clear_near(ptr: *mut c_void, len: usize, hint: usize) -> c_int {
    // SAFETY: the caller promises the range.
    guard(|| {
        crate::clear_near(unsafe { bytes_mut(ptr, len)? }, hint);
        Ok(())
    })
}

/// Zeroes with `threads` threads (>= 1), split on page boundaries.
#[no_mangle]
pub unsafe extern "C" fn pz_clear_parallel(ptr: *mut c_void, len: usize, threads: usize) -> c_int {
    // SAFETY: the caller promises the range.
    guard(|| crate::clear_parallel(unsafe { bytes_mut(ptr, len)? }, threads))
}

/// Copies `len` bytes with streaming stores, then drains. No overlap allowed.
#[no_mangle]
pub unsafe extern "C" fn pz_stream_copy(dst: *mut c_void, src: *const c_void, len: usize) -> c_int {
    guard(|| {
        apart(dst, len, src, len, "the source")?;
        // SAFETY: the caller promises both ranges; they do not overlap.
        let (d, s) = unsafe { (bytes_mut(dst, len)?, bytes(src, len)?) };
        crate::stream_copy(d, s)
    })
}

/// Orders all streaming stores issued so far before later stores.
#[no_mangle]
pub extern "C" fn pz_drain() {
    crate::template::drain();
}

/// Fills `count` records of `elem_size` bytes at `dst` from `tmpl`: for each index
/// in order `update(i, work, ctx)` may change the working copy `work` (it starts
/// as `tmpl` and keeps its changes), which is then streamed into record `i`. One
/// drain at the end. `update` may be NULL (plain replication).
#[no_mangle]
pub unsafe extern "C" fn pz_template_fill(
    dst: *mut c_void,
    count: usize,
    elem_size: usize,
    tmpl: *const c_void,
    update: Option<unsafe extern "C" fn(i: usize, work: *mut c_void, ctx: *mut c_void)>,
    ctx: *mut c_void,
) -> c_int {
    guard(|| {
        apart(
            dst,
            record_bytes(count, elem_size)?,
            tmpl,
            elem_size,
            "the template",
        )?;
        // SAFETY: the caller promises both ranges; they do not overlap.
        let (d, t) = unsafe { (records(dst, count, elem_size)?, bytes(tmpl, elem_size)?) };
        Streamer::for_bytes(d.len()).fill_grouped_bytes(d, 1, t, t, |i, _, w| {
            if let Some(f) = update {
                // SAFETY: a C callback with the caller's own context; `w` is elem_size bytes.
                unsafe { f(i, w.as_mut_ptr().cast(), ctx) }
            }
        })
    })
}

/// Seed 004's compound groups: the first record of every `group_len` from `head`,
/// the others from `tail`, each refreshed by `update(i, is_head, work, ctx)`.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn pz_template_fill_grouped(
    dst: *mut c_void,
    count: usize,
    elem_size: usize,
    group_len: usize,
    head: *const c_void,
    tail: *const c_void,
    update: Option<
        unsafe extern "C" fn(i: usize, is_head: c_int, work: *mut c_void, ctx: *mut c_void),
    >,
    ctx: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: the caller promises the ranges.
        let (d, h, t) = unsafe { head_and_tail(dst, count, elem_size, head, tail)? };
        Streamer::for_bytes(d.len()).fill_grouped_bytes(d, group_len, h, t, |i, is_head, w| {
            if let Some(f) = update {
                // SAFETY: a C callback with the caller's own context.
                unsafe { f(i, c_int::from(is_head), w.as_mut_ptr().cast(), ctx) }
            }
        })
    })
}

/// The most varying words `pz_template_fill_words` takes per record.
pub const PZ_TEMPLATE_MAX_WORDS: usize = 8;

/// The register form of the template fill: `count` records of `elem_size`
/// bytes at `dst`, the first of every `group_len` from `head`, the others from
/// `tail` (NULL: `head` again), with `nwords` 64-bit words (at most
/// `PZ_TEMPLATE_MAX_WORDS`) at byte `offsets[k]` of each record set to what
/// `produce(i, is_head, words, ctx)` writes to `words[0..nwords]`. For one
/// template pass `group_len = SIZE_MAX` (or any) and `tail = NULL`. `produce`
/// may be NULL only when `nwords` is 0, and must not touch `dst`, `head`,
/// `tail` or `offsets`. A template or `offsets` overlapping `dst` is
/// `-EINVAL`. Streams (then drains) or stores through the caches by size, as
/// the profile or the built-in choice says.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn pz_template_fill_words(
    dst: *mut c_void,
    count: usize,
    elem_size: usize,
    group_len: usize,
    head: *const c_void,
    tail: *const c_void,
    offsets: *const usize,
    nwords: usize,
    produce: Option<
        unsafe extern "C" fn(i: usize, is_head: c_int, words: *mut u64, ctx: *mut c_void),
    >,
    ctx: *mut c_void,
) -> c_int {
    guard(|| {
        if nwords > PZ_TEMPLATE_MAX_WORDS {
            return Err(inval("more than PZ_TEMPLATE_MAX_WORDS words"));
        }
        if nwords > 0 && (offsets.is_null() || produce.is_none()) {
            return Err(inval("NULL offsets or produce with words to produce"));
        }
        let tail = if tail.is_null() { head } else { tail };
        let offsets_len = nwords * std::mem::size_of::<usize>();
        let total = record_bytes(count, elem_size)?;
        apart(dst, total, offsets.cast(), offsets_len, "the offsets")?;
        // SAFETY: the caller promises the ranges; `offsets` holds nwords
        // entries and does not overlap the destination (checked above).
        let (d, h, t) = unsafe { head_and_tail(dst, count, elem_size, head, tail)? };
        // SAFETY: as above.
        let offs = unsafe {
            if nwords == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(offsets, nwords)
            }
        };
        let s = Streamer::for_bytes(d.len());
        // One instantiation per word count: the register form needs K at compile time.
        macro_rules! with_k {
            ($($k:literal)*) => {
                match nwords {
                    $($k => {
                        let o: [usize; $k] = offs.try_into().expect("nwords entries");
                        s.fill_words_grouped_bytes(d, group_len, h, t, o, |i, is_head| {
                            let mut w = [0u64; $k];
                            if let Some(f) = produce {
                                // SAFETY: a C callback with the caller's own
                                // context; `w` holds nwords words.
                                unsafe { f(i, c_int::from(is_head), w.as_mut_ptr(), ctx) };
                            }
                            w
                        })
                    })*
                    _ => unreachable!("nwords was checked"),
                }
            };
        }
        with_k!(0 1 2 3 4 5 6 7 8)
    })
}

/// Populates `[ptr, ptr+len)` for writing with `threads` threads (>= 1); the
/// contents are not changed. An unmapped or read-only range is an error.
#[no_mangle]
pub unsafe extern "C" fn pz_prefault(ptr: *mut c_void, len: usize, threads: usize) -> c_int {
    guard(|| {
        if ptr.is_null() {
            return Err(inval("NULL pointer"));
        }
        // SAFETY: the kernel validates the range; contents are not changed.
        unsafe { crate::prefault::prefault_raw(ptr.cast(), len, threads) }.map(drop)
    })
}

/// Regions mapped through the C ABI, by start address.
static REGIONS: Mutex<Vec<Region>> = Mutex::new(Vec::new());

/// Maps `size` bytes (rounded up to the page size) of a `PZ_PAGE_*` kind.
/// `*ptr_out` and `*len_out` receive the mapping; release it with
/// `pz_region_unmap(*ptr_out)`. Fresh memory reads zero.
#[no_mangle]
pub unsafe extern "C" fn pz_region_map(
    size: usize,
    kind: c_int,
    ptr_out: *mut *mut c_void,
    len_out: *mut usize,
) -> c_int {
    guard(|| {
        if ptr_out.is_null() || len_out.is_null() {
            return Err(inval("NULL output pointer"));
        }
        let r = Region::new(size, page_kind(kind)?)?;
        // SAFETY: both outputs were checked non-NULL; the caller gave writable slots.
        unsafe {
            ptr_out.write(r.as_ptr().cast());
            len_out.write(r.len());
        }
        REGIONS.lock().unwrap_or_else(|e| e.into_inner()).push(r);
        Ok(())
    })
}

/// Unmaps a region from `pz_region_map`. Any other pointer (or a second unmap)
/// is `-EINVAL` and changes nothing.
#[no_mangle]
pub unsafe extern "C" fn pz_region_unmap(ptr: *mut c_void) -> c_int {
    guard(|| {
        let mut regions = REGIONS.lock().unwrap_or_else(|e| e.into_inner());
        let i = regions
            .iter()
            .position(|r| r.as_ptr() == ptr.cast())
            .ok_or_else(|| inval("not a region mapped by pz_region_map"))?;
        drop(regions.swap_remove(i));
        Ok(())
    })
}

/// Pool settings. Initialise with `pz_pool_config_init` (which sets
/// `struct_size`), then change what you need: later versions append fields and
/// use `struct_size` to tell which ones the caller knows.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PzPoolConfig {
    /// `sizeof(pz_pool_config)` as the caller compiled it.
    pub struct_size: usize,
    /// Bytes per chunk (default 2 MiB).
    pub chunk_size: usize,
    /// A `PZ_PAGE_*` kind (default `PZ_PAGE_THP`).
    pub backing: c_int,
    /// Most bytes the pool maps (default 1 GiB).
    pub capacity: usize,
    /// Zeroed chunks below which scrubbing starts; `SIZE_MAX` = the high watermark.
    pub low_watermark: usize,
    /// Zeroed chunks at which scrubbing stops; `SIZE_MAX` = all of capacity.
    pub high_watermark: usize,
    /// Scrubber threads (default 1; 0 = none).
    pub scrubbers: usize,
    /// A `PZ_SCRUB_*` priority (default `PZ_SCRUB_IDLE`).
    pub priority: c_int,
    /// Chunks to map and prefault at creation (default 0).
    pub prefill: usize,
    /// Non-zero: check every zeroed hand-out (failure: `-EIO`).
    pub verify: c_int,
    /// Bytes of recent hand-outs counted as cache-hot; `SIZE_MAX` = the default.
    pub hot_window: usize,
}

/// Fills `cfg` with the defaults and sets `struct_size`.
#[no_mangle]
pub unsafe extern "C" fn pz_pool_config_init(cfg: *mut PzPoolConfig) -> c_int {
    guard(|| {
        if cfg.is_null() {
            return Err(inval("NULL config"));
        }
        let c = PzPoolConfig {
            struct_size: std::mem::size_of::<PzPoolConfig>(),
            chunk_size: 2 << 20,
            backing: PZ_PAGE_THP,
            capacity: 1 << 30,
            low_watermark: usize::MAX,
            high_watermark: usize::MAX,
            scrubbers: 1,
            priority: PZ_SCRUB_IDLE,
            prefill: 0,
            verify: 0,
            hot_window: usize::MAX,
        };
        // SAFETY: checked non-NULL; the caller passed a writable config.
        unsafe { cfg.write(c) };
        Ok(())
    })
}

/// A pool of pre-zeroed chunks (opaque). Thread-safe: every `pz_pool_*` call may
/// be made from any thread at the same time, except `pz_pool_destroy`, which
/// must be the last call on the pool and made at most once.
pub struct PzPool {
    pool: Pool,
}

/// Creates a pool (`*out` receives it). `-EINVAL` for a bad configuration or a
/// `struct_size` this library does not know.
#[no_mangle]
pub unsafe extern "C" fn pz_pool_new(cfg: *const PzPoolConfig, out: *mut *mut PzPool) -> c_int {
    guard(|| {
        // SAFETY: the caller passes a config (or NULL, refused).
        unsafe { versioned(cfg, "pz_pool_config")? };
        if out.is_null() {
            return Err(inval("NULL output pointer"));
        }
        // SAFETY: the caller's struct has our layout (struct_size matches).
        let c = unsafe { cfg.read() };
        let mut b = Pool::builder()
            .chunk_size(c.chunk_size)
            .backing(page_kind(c.backing)?)
            .capacity(c.capacity)
            .scrubbers(c.scrubbers)
            .scrub_priority(match c.priority {
                PZ_SCRUB_IDLE => ScrubPriority::Idle,
                PZ_SCRUB_NICE19 => ScrubPriority::Nice19,
                PZ_SCRUB_NORMAL => ScrubPriority::Normal,
                _ => return Err(inval("unknown scrubber priority")),
            })
            .prefill(c.prefill)
            .verify(c.verify != 0);
        if c.low_watermark != usize::MAX {
            b = b.low_watermark(c.low_watermark);
        }
        if c.high_watermark != usize::MAX {
            b = b.high_watermark(c.high_watermark);
        }
        if c.hot_window != usize::MAX {
            b = b.hot_window(c.hot_window);
        }
        let pool = Box::new(PzPool { pool: b.build()? });
        // SAFETY: checked non-NULL.
        unsafe { out.write(Box::into_raw(pool)) };
        Ok(())
    })
}

unsafe fn pool_ref<'a>(p: *const PzPool) -> Result<&'a Pool> {
    // SAFETY: the caller passes a live pool from pz_pool_new (or NULL, refused).
    unsafe { p.as_ref() }
        .map(|p| &p.pool)
        .ok_or_else(|| inval("NULL pool"))
}

/// The shared body of the three allocation calls: check the arguments, take a
/// chunk with `take`, and hand it to C as a raw pointer in `*out`.
unsafe fn alloc_into(
    pool: *mut PzPool,
    out: *mut *mut c_void,
    take: impl FnOnce(&Pool) -> Result<crate::pool::Chunk>,
) -> c_int {
    guard(|| {
        // SAFETY: see pool_ref.
        let p = unsafe { pool_ref(pool)? };
        if out.is_null() {
            return Err(inval("NULL output pointer"));
        }
        let chunk = take(p)?;
        // SAFETY: checked non-NULL; the caller passed a writable pointer slot.
        unsafe { out.write(chunk.into_raw().as_ptr().cast()) };
        Ok(())
    })
}

/// A chunk (`chunk_size` bytes) every byte of which is zero; `*out` receives it.
/// `-EAGAIN` when the pool is exhausted; `-EIO` if verify mode caught non-zero memory.
#[no_mangle]
pub unsafe extern "C" fn pz_pool_alloc_zeroed(pool: *mut PzPool, out: *mut *mut c_void) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { alloc_into(pool, out, Pool::try_alloc_zeroed) }
}

/// As `pz_pool_alloc_zeroed`, waiting up to `timeout_ns` for a chunk when exhausted.
#[no_mangle]
pub unsafe extern "C" fn pz_pool_alloc_zeroed_timeout(
    pool: *mut PzPool,
    timeout_ns: u64,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe {
        alloc_into(pool, out, |p| {
            p.try_alloc_zeroed_timeout(Duration::from_nanos(timeout_ns))
        })
    }
}

/// A chunk with unspecified contents (whatever this process last wrote there),
/// for callers that overwrite it whole.
#[no_mangle]
pub unsafe extern "C" fn pz_pool_alloc(pool: *mut PzPool, out: *mut *mut c_void) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { alloc_into(pool, out, Pool::alloc) }
}

/// Returns a chunk. A pointer that is not an outstanding chunk of this pool
/// (foreign, interior, already freed) is `-EINVAL` and changes nothing.
#[no_mangle]
pub unsafe extern "C" fn pz_pool_free(pool: *mut PzPool, chunk: *mut c_void) -> c_int {
    guard(|| {
        // SAFETY: see pool_ref.
        let p = unsafe { pool_ref(pool)? };
        if chunk.is_null() {
            return Err(inval("NULL chunk"));
        }
        p.free_raw(chunk.cast())
    })
}

/// Gives memory above `keep_bytes` back to the kernel; `*released` (if not NULL)
/// receives the bytes given back.
#[no_mangle]
pub unsafe extern "C" fn pz_pool_trim(
    pool: *mut PzPool,
    keep_bytes: usize,
    released: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: see pool_ref.
        let n = unsafe { pool_ref(pool)? }.trim(keep_bytes)?;
        if !released.is_null() {
            // SAFETY: a writable size_t or NULL.
            unsafe { released.write(n) };
        }
        Ok(())
    })
}

/// A snapshot of a pool (`zeroed + dirty + scrubbing + in_use == mapped`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PzPoolStats {
    /// Set by the caller to `sizeof(pz_pool_stats)`.
    pub struct_size: usize,
    /// Bytes per chunk.
    pub chunk_size: usize,
    /// Chunks mapped.
    pub mapped: usize,
    /// Chunks ready zeroed (includes `released`).
    pub zeroed: usize,
    /// Of `zeroed`: trimmed chunks.
    pub released: usize,
    /// Chunks freed, not yet cleared.
    pub dirty: usize,
    /// Chunks being scrubbed now.
    pub scrubbing: usize,
    /// Chunks handed out.
    pub in_use: usize,
    /// Bytes cleared in the background.
    pub bytes_scrubbed: u64,
    /// Bytes cleared on allocating threads.
    pub bytes_cleared_sync: u64,
    /// Bytes mapped fresh from the kernel.
    pub bytes_fresh: u64,
    /// Zeroed hand-outs served from prezeroed chunks.
    pub served_zeroed: u64,
    /// Zeroed hand-outs cleared on the spot.
    pub served_sync: u64,
    /// Hand-outs of fresh chunks.
    pub served_fresh: u64,
    /// Hand-out latency percentiles and maximum, in ns.
    pub latency_p50_ns: u64,
    /// 99th percentile.
    pub latency_p99_ns: u64,
    /// Maximum.
    pub latency_max_ns: u64,
    /// 1 if the scrubbers run under `SCHED_IDLE`.
    pub scrubber_sched_idle: c_int,
}

/// Fills `*out`, whose `struct_size` the caller sets to `sizeof(pz_pool_stats)`.
#[no_mangle]
pub unsafe extern "C" fn pz_pool_stats(pool: *const PzPool, out: *mut PzPoolStats) -> c_int {
    guard(|| {
        // SAFETY: see pool_ref.
        let p = unsafe { pool_ref(pool)? };
        // SAFETY: the caller passes a stats struct (or NULL, refused).
        unsafe { versioned(out.cast_const(), "pz_pool_stats")? };
        let s = p.stats();
        let st = PzPoolStats {
            struct_size: std::mem::size_of::<PzPoolStats>(),
            chunk_size: s.chunk_size,
            mapped: s.mapped,
            zeroed: s.zeroed,
            released: s.released,
            dirty: s.dirty,
            scrubbing: s.scrubbing,
            in_use: s.in_use,
            bytes_scrubbed: s.bytes_scrubbed,
            bytes_cleared_sync: s.bytes_cleared_hot + s.bytes_cleared_cold,
            bytes_fresh: s.bytes_fresh,
            served_zeroed: s.served_zeroed + s.served_released,
            served_sync: s.served_hot + s.served_cold,
            served_fresh: s.served_fresh,
            latency_p50_ns: s.latency_p50_ns,
            latency_p99_ns: s.latency_p99_ns,
            latency_max_ns: s.latency_max_ns,
            scrubber_sched_idle: c_int::from(s.scrubber_priority == "SCHED_IDLE"),
        };
        // SAFETY: checked non-NULL, size agreed.
        unsafe { out.write(st) };
        Ok(())
    })
}

/// Destroys a pool: joins its scrubbers and unmaps its memory. `-EBUSY` (and the
/// pool stays usable) while chunks are outstanding: free them first. Call at
/// most once, and make no other call on the pool during or after it.
#[no_mangle]
pub unsafe extern "C" fn pz_pool_destroy(pool: *mut PzPool) -> c_int {
    guard(|| {
        // SAFETY: see pool_ref.
        let p = unsafe { pool_ref(pool)? };
        if p.stats().in_use > 0 {
            return Err(Error::Busy);
        }
        // SAFETY: from Box::into_raw in pz_pool_new; the caller's last call.
        drop(unsafe { Box::from_raw(pool) });
        Ok(())
    })
}

/// What the library detected about this machine.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PzCpuInfo {
    /// Set by the caller to `sizeof(pz_cpu_info)`.
    pub struct_size: usize,
    /// NUL-terminated vendor, e.g. "GenuineIntel".
    pub vendor: [c_char; 16],
    /// NUL-terminated model name (truncated to 63 bytes).
    pub model_name: [c_char; 64],
    /// Display family and model.
    pub family: u32,
    /// Display model.
    pub model: u32,
    /// Bit i set: kernel `PZ_STRATEGY_*` value i + 3 is available.
    pub kernels: u32,
    /// Logical CPUs usable.
    pub logical_cpus: usize,
    /// Base page size.
    pub page_size: usize,
    /// L1 data, L2 and last-level cache sizes in bytes.
    pub l1d: usize,
    /// L2 size.
    pub l2: usize,
    /// Last-level cache size.
    pub llc: usize,
}

/// Fills `*out`, whose `struct_size` the caller sets to `sizeof(pz_cpu_info)`.
#[no_mangle]
pub unsafe extern "C" fn pz_cpu_info(out: *mut PzCpuInfo) -> c_int {
    guard(|| {
        // SAFETY: the caller passes an info struct (or NULL, refused).
        unsafe { versioned(out.cast_const(), "pz_cpu_info")? };
        let c = crate::cpu();
        let mut info = PzCpuInfo {
            struct_size: std::mem::size_of::<PzCpuInfo>(),
            vendor: [0; 16],
            model_name: [0; 64],
            family: c.family,
            model: c.model,
            kernels: Kernel::ALL
                .iter()
                .enumerate()
                .filter(|(_, k)| k.is_available())
                .fold(0, |m, (i, _)| m | 1 << i),
            logical_cpus: c.logical_cpus,
            page_size: c.page_size,
            l1d: c.l1d(),
            l2: c.l2(),
            llc: c.llc(),
        };
        for (d, s) in info.vendor[..15].iter_mut().zip(c.vendor.bytes()) {
            *d = s as c_char;
        }
        for (d, s) in info.model_name[..63].iter_mut().zip(c.model_name.bytes()) {
            *d = s as c_char;
        }
        // SAFETY: checked non-NULL, size agreed.
        unsafe { out.write(info) };
        Ok(())
    })
}

/// `pz_cpu_features` bit: enhanced `rep stosb` (x86_64).
pub const PZ_FEATURE_ERMS: u32 = 1 << 0;
/// `pz_cpu_features` bit: fast short `rep mov` (x86_64).
pub const PZ_FEATURE_FSRM: u32 = 1 << 1;
/// `pz_cpu_features` bit: SSE2 (x86_64).
pub const PZ_FEATURE_SSE2: u32 = 1 << 2;
/// `pz_cpu_features` bit: AVX2 (x86_64).
pub const PZ_FEATURE_AVX2: u32 = 1 << 3;
/// `pz_cpu_features` bit: AVX-512F (x86_64).
pub const PZ_FEATURE_AVX512F: u32 = 1 << 4;
/// `pz_cpu_features` bit: AVX-512BW (x86_64).
pub const PZ_FEATURE_AVX512BW: u32 = 1 << 5;
/// `pz_cpu_features` bit: AMD `clzero` (x86_64).
pub const PZ_FEATURE_CLZERO: u32 = 1 << 6;
/// `pz_cpu_features` bit: `dc zva` permitted (aarch64).
pub const PZ_FEATURE_DC_ZVA: u32 = 1 << 7;
/// `pz_cpu_features` bit: FEAT_MOPS (aarch64).
pub const PZ_FEATURE_MOPS: u32 = 1 << 8;

fn feature_bits(f: &crate::cpu::Features) -> u32 {
    [
        (f.erms, PZ_FEATURE_ERMS),
        (f.fsrm, PZ_FEATURE_FSRM),
        (f.sse2, PZ_FEATURE_SSE2),
        (f.avx2, PZ_FEATURE_AVX2),
        (f.avx512f, PZ_FEATURE_AVX512F),
        (f.avx512bw, PZ_FEATURE_AVX512BW),
        (f.clzero, PZ_FEATURE_CLZERO),
        (f.dc_zva, PZ_FEATURE_DC_ZVA),
        (f.mops, PZ_FEATURE_MOPS),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .fold(0, |m, (_, bit)| m | bit)
}

/// The CPU features the library uses (`PZ_FEATURE_*` bits), after
/// `PREZERO_CPU`, into `*features`, and those detection found into `*detected`;
/// either pointer may be NULL. Returns 0, or `-EINVAL` when `PREZERO_CPU` could
/// not be honoured (it names a level this CPU does not reach, or something
/// unknown): the library then uses no optional feature, and said why on stderr.
#[no_mangle]
pub unsafe extern "C" fn pz_cpu_features(features: *mut u32, detected: *mut u32) -> c_int {
    guard(|| {
        let c = crate::cpu();
        // SAFETY: each pointer is NULL (skipped) or, as documented, writable.
        unsafe {
            if !features.is_null() {
                features.write(feature_bits(&c.features));
            }
            if !detected.is_null() {
                detected.write(feature_bits(&c.detected));
            }
        }
        match &c.mask_error {
            Some(e) => Err(Error::invalid(format!("PREZERO_CPU: {e}"))),
            None => Ok(()),
        }
    })
}

/// `pz_service_alloc` flag: fail rather than map local memory when the service
/// cannot serve.
pub const PZ_SERVICE_NO_FALLBACK: u32 = 1;
/// `pz_service_alloc` result: the memory came from `prezero serve`.
pub const PZ_SOURCE_SERVICE: c_int = 0;
/// `pz_service_alloc` result: local memory, mapped and populated here.
pub const PZ_SOURCE_LOCAL: c_int = 1;

/// A connection to `prezero serve` (opaque). Thread-safe: calls may be made from
/// any thread at once, except `pz_service_disconnect`, the last call on it.
pub struct PzService {
    client: Client,
}

/// Memory from `pz_service_alloc`, by address, until `pz_service_free`.
static SERVICE_MEMORY: Mutex<Vec<ServiceMemory>> = Mutex::new(Vec::new());

/// Connects to `prezero serve` at `path` (NULL: `$PREZERO_SOCKET`, else
/// `/run/prezero/prezero.sock`). On success `*out` is the connection; when no
/// service answers, `*out` is NULL and the return is connect(2)'s error
/// (`-ENOENT`, `-ECONNREFUSED`, `-EACCES`): `pz_service_alloc` with a NULL
/// connection still serves, locally.
#[no_mangle]
pub unsafe extern "C" fn pz_service_connect(
    path: *const c_char,
    out: *mut *mut PzService,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(inval("NULL output pointer"));
        }
        // SAFETY: out is not NULL; the caller gave a writable slot.
        unsafe { out.write(std::ptr::null_mut()) };
        let client = if path.is_null() {
            Client::connect_default()?
        } else {
            // SAFETY: the caller passes a NUL-terminated string.
            let p = unsafe { std::ffi::CStr::from_ptr(path) };
            use std::os::unix::ffi::OsStrExt;
            Client::connect(std::ffi::OsStr::from_bytes(p.to_bytes()))?
        };
        if let Some(errno) = client.connect_errno() {
            return Err(Error::Service {
                errno,
                reason: "no service".into(),
            });
        }
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(Box::new(PzService { client }))) };
        Ok(())
    })
}

/// `bytes` of zeroed, populated memory on `page` pages (`PZ_PAGE_HUGE_2M` or
/// `PZ_PAGE_HUGE_1G`) into `*ptr_out`, `*len_out` (bytes rounded up to the
/// page size). Returns `PZ_SOURCE_SERVICE` or `PZ_SOURCE_LOCAL` (the service
/// is absent (`svc` NULL), refused, or had too little ready; local memory falls
/// to THP if hugetlb pages run short), or a negative code: with
/// `PZ_SERVICE_NO_FALLBACK`, the service's refusal (`-ENOMEM`: too little
/// ready, `-EDQUOT`: over the uid's cap, `-EACCES`: uid not allowed,
/// `-ENOTCONN`: `svc` NULL). Free with `pz_service_free`.
#[no_mangle]
pub unsafe extern "C" fn pz_service_alloc(
    svc: *const PzService,
    bytes: usize,
    page: c_int,
    flags: u32,
    ptr_out: *mut *mut c_void,
    len_out: *mut usize,
) -> c_int {
    let mut source = PZ_SOURCE_SERVICE;
    let rc = guard(|| {
        if ptr_out.is_null() || len_out.is_null() {
            return Err(inval("NULL output pointer"));
        }
        if flags & !PZ_SERVICE_NO_FALLBACK != 0 {
            return Err(inval("unknown flags"));
        }
        let opts = AllocOptions {
            fallback: flags & PZ_SERVICE_NO_FALLBACK == 0,
            ..AllocOptions::default()
        };
        let kind = page_kind(page)?;
        let local;
        let client = if svc.is_null() {
            local = Client::local("no connection (pz_service_alloc was given NULL)");
            &local
        } else {
            // SAFETY: a non-NULL svc comes from pz_service_connect and is alive
            // (the caller's contract); only shared access is taken.
            unsafe { &(*svc).client }
        };
        let m = client.alloc_with(bytes, kind, opts)?;
        if let Source::Local { .. } = m.source() {
            source = PZ_SOURCE_LOCAL;
        }
        // SAFETY: both outputs were checked non-NULL.
        unsafe {
            ptr_out.write(m.as_ptr().cast());
            len_out.write(m.len());
        }
        SERVICE_MEMORY
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(m);
        Ok(())
    });
    if rc == 0 {
        source
    } else {
        rc
    }
}

/// The `index`th segment of service memory at `ptr` (from `pz_service_alloc`):
/// its memfd (owned by the library until `pz_service_free`; `dup` it to keep
/// it), its offset in the memory and its mapped length, e.g. for a vhost-user
/// memory table. `-ENOENT` past the last segment (local memory has none);
/// `-EINVAL` for a pointer not from `pz_service_alloc`.
#[no_mangle]
pub unsafe extern "C" fn pz_service_segment(
    ptr: *const c_void,
    index: usize,
    fd_out: *mut c_int,
    offset_out: *mut usize,
    len_out: *mut usize,
) -> c_int {
    guard(|| {
        if fd_out.is_null() || offset_out.is_null() || len_out.is_null() {
            return Err(inval("NULL output pointer"));
        }
        let mem = SERVICE_MEMORY.lock().unwrap_or_else(|e| e.into_inner());
        let m = mem
            .iter()
            .find(|m| m.as_ptr() as *const c_void == ptr)
            .ok_or_else(|| inval("not memory from pz_service_alloc"))?;
        let segs = m.segments();
        let s = segs.get(index).ok_or(Error::Os {
            call: "pz_service_segment",
            source: std::io::Error::from_raw_os_error(libc::ENOENT),
        })?;
        use std::os::fd::AsRawFd;
        // SAFETY: all three outputs were checked non-NULL.
        unsafe {
            fd_out.write(s.fd.as_raw_fd());
            offset_out.write(s.offset);
            len_out.write(s.len);
        }
        Ok(())
    })
}

/// Unmaps memory from `pz_service_alloc` and gives service segments back.
/// Any other pointer (or a second free) is `-EINVAL` and changes nothing.
/// Works after `pz_service_disconnect` too.
#[no_mangle]
pub unsafe extern "C" fn pz_service_free(ptr: *mut c_void) -> c_int {
    guard(|| {
        let mut mem = SERVICE_MEMORY.lock().unwrap_or_else(|e| e.into_inner());
        let i = mem
            .iter()
            .position(|m| m.as_ptr() == ptr.cast())
            .ok_or_else(|| inval("not memory from pz_service_alloc"))?;
        let m = mem.swap_remove(i);
        drop(mem);
        drop(m);
        Ok(())
    })
}

/// Closes the connection. Memory already allocated stays valid until
/// `pz_service_free`. NULL is `-EINVAL`.
#[no_mangle]
pub unsafe extern "C" fn pz_service_disconnect(svc: *mut PzService) -> c_int {
    guard(|| {
        if svc.is_null() {
            return Err(inval("NULL connection"));
        }
        // SAFETY: from Box::into_raw in pz_service_connect; the caller's last call.
        drop(unsafe { Box::from_raw(svc) });
        Ok(())
    })
}
