//! Pools of pre-zeroed chunks: `pz_pool_*` (an opaque `pz_pool` per pool) and
//! the `PZ_SCRUB_*` numbers.

use std::ffi::{c_int, c_void};
use std::time::Duration;

use super::helpers::{
    free_handle, guard, handle, into_handle, inval, not_null, versioned, write_opt,
};
use super::region::{page_kind, PZ_PAGE_THP};
use prezero::pool::{Chunk, Pool, ScrubPriority};
use prezero::{Error, Result};

/// Scrubber under `SCHED_IDLE` (falls back to nice 19).
pub const PZ_SCRUB_IDLE: c_int = 0;
/// Scrubber at nice 19.
pub const PZ_SCRUB_NICE19: c_int = 1;
/// Scrubber at normal priority.
pub const PZ_SCRUB_NORMAL: c_int = 2;

fn scrub_priority(p: c_int) -> Result<ScrubPriority> {
    match p {
        PZ_SCRUB_IDLE => Ok(ScrubPriority::Idle),
        PZ_SCRUB_NICE19 => Ok(ScrubPriority::Nice19),
        PZ_SCRUB_NORMAL => Ok(ScrubPriority::Normal),
        _ => Err(inval("unknown scrubber priority")),
    }
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
///
/// # Safety
/// `cfg` is NULL (refused) or writable for a `pz_pool_config`.
#[no_mangle]
pub unsafe extern "C" fn pz_pool_config_init(cfg: *mut PzPoolConfig) -> c_int {
    guard(|| {
        not_null(cfg, "config")?;
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
/// must be the last call on the pool (a second one is `-EINVAL`).
pub struct PzPool {
    pool: Pool,
}

/// Creates a pool (`*out` receives it). `-EINVAL` for a bad configuration or a
/// `struct_size` this library does not know.
///
/// # Safety
/// `cfg` is NULL (refused) or readable for its `struct_size`; `out` is NULL
/// (refused) or writable for a pointer.
#[no_mangle]
pub unsafe extern "C" fn pz_pool_new(cfg: *const PzPoolConfig, out: *mut *mut PzPool) -> c_int {
    guard(|| {
        // SAFETY: the caller passes a config (or NULL, refused).
        unsafe { versioned(cfg, "pz_pool_config")? };
        not_null(out, "output pointer")?;
        // SAFETY: the caller's struct has our layout (struct_size matches).
        let c = unsafe { cfg.read() };
        let mut b = Pool::builder()
            .chunk_size(c.chunk_size)
            .backing(page_kind(c.backing)?)
            .capacity(c.capacity)
            .scrubbers(c.scrubbers)
            .scrub_priority(scrub_priority(c.priority)?)
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
        let pool = into_handle(PzPool { pool: b.build()? });
        // SAFETY: checked non-NULL.
        unsafe { out.write(pool) };
        Ok(())
    })
}

/// The pool behind a handle; NULL is an error.
///
/// # Safety
/// No other thread frees `p` during the call (any pointer is checked first).
unsafe fn pool_ref<'a>(p: *const PzPool) -> Result<&'a Pool> {
    // SAFETY: the caller's promise.
    unsafe { handle(p, "pool") }.map(|p| &p.pool)
}

/// The shared body of the three allocation calls: check the arguments, take a
/// chunk with `take`, and hand it to C as a raw pointer in `*out`.
///
/// # Safety
/// As `pz_pool_alloc_zeroed`.
unsafe fn alloc_into(
    pool: *mut PzPool,
    out: *mut *mut c_void,
    take: impl FnOnce(&Pool) -> Result<Chunk>,
) -> c_int {
    guard(|| {
        // SAFETY: see pool_ref.
        let p = unsafe { pool_ref(pool)? };
        not_null(out, "output pointer")?;
        let chunk = take(p)?;
        // SAFETY: checked non-NULL; the caller passed a writable pointer slot.
        unsafe { out.write(chunk.into_raw().as_ptr().cast()) };
        Ok(())
    })
}

/// A chunk (`chunk_size` bytes) every byte of which is zero; `*out` receives it.
/// `-EAGAIN` when the pool is exhausted; `-EIO` if verify mode caught non-zero memory.
///
/// # Safety
/// No other thread frees `pool` during the call (any pointer is checked first);
/// `out` is NULL (refused) or writable for a pointer.
#[no_mangle]
pub unsafe extern "C" fn pz_pool_alloc_zeroed(pool: *mut PzPool, out: *mut *mut c_void) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { alloc_into(pool, out, Pool::try_alloc_zeroed) }
}

/// As `pz_pool_alloc_zeroed`, waiting up to `timeout_ns` for a chunk when exhausted.
///
/// # Safety
/// As `pz_pool_alloc_zeroed`.
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
///
/// # Safety
/// As `pz_pool_alloc_zeroed`.
#[no_mangle]
pub unsafe extern "C" fn pz_pool_alloc(pool: *mut PzPool, out: *mut *mut c_void) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { alloc_into(pool, out, Pool::alloc) }
}

/// Returns a chunk. A pointer that is not an outstanding chunk of this pool
/// (foreign, interior, already freed) is `-EINVAL` and changes nothing.
///
/// # Safety
/// No other thread frees `pool` during the call (any pointer is checked first);
/// nothing touches the chunk after it is returned.
#[no_mangle]
pub unsafe extern "C" fn pz_pool_free(pool: *mut PzPool, chunk: *mut c_void) -> c_int {
    guard(|| {
        // SAFETY: see pool_ref.
        let p = unsafe { pool_ref(pool)? };
        not_null(chunk, "chunk")?;
        p.free_raw(chunk.cast())
    })
}

/// Gives memory above `keep_bytes` back to the kernel; `*released` (if not NULL)
/// receives the bytes given back.
///
/// # Safety
/// No other thread frees `pool` during the call (any pointer is checked first);
/// `released` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn pz_pool_trim(
    pool: *mut PzPool,
    keep_bytes: usize,
    released: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: see pool_ref.
        let n = unsafe { pool_ref(pool)? }.trim(keep_bytes)?;
        // SAFETY: a writable size_t or NULL.
        unsafe { write_opt(released, n) };
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
///
/// # Safety
/// No other thread frees `pool` during the call (any pointer is checked first);
/// `out` is NULL (refused) or writable for its `struct_size`.
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
/// pool stays usable) while chunks are outstanding: free them first.
///
/// # Safety
/// No other call on `pool` runs during this one, nor after it unless it
/// returned `-EBUSY` (any pointer is checked first).
#[no_mangle]
pub unsafe extern "C" fn pz_pool_destroy(pool: *mut PzPool) -> c_int {
    guard(|| {
        // SAFETY: see pool_ref.
        if unsafe { pool_ref(pool)? }.stats().in_use > 0 {
            return Err(Error::Busy);
        }
        // SAFETY: a live pool (checked above), and the caller's last call on it.
        unsafe { free_handle(pool, "pool") }
    })
}
