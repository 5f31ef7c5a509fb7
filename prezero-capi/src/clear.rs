//! Clearing extents: `pz_clear*` and the `PZ_STRATEGY_*` numbers.

use std::ffi::{c_int, c_void};
use std::ops::ControlFlow;

use super::helpers::{bytes_mut, guard, inval, node_ids, write_opt};
use prezero::clear::{Kernel, Strategy, Temperature};
use prezero::Result;

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

/// A kernel's `PZ_STRATEGY_*` number, fixed here and not by its place in
/// `Kernel::ALL`, whose order is free to change.
pub(super) const fn kernel_number(k: Kernel) -> c_int {
    match k {
        Kernel::RepStosb => PZ_STRATEGY_REP_STOSB,
        Kernel::Avx512Stream => PZ_STRATEGY_AVX512_NT,
        Kernel::Avx2Stream => PZ_STRATEGY_AVX2_NT,
        Kernel::Movnti => PZ_STRATEGY_MOVNTI,
        Kernel::Clzero => PZ_STRATEGY_CLZERO,
        Kernel::Avx512 => PZ_STRATEGY_AVX512,
        Kernel::Avx2 => PZ_STRATEGY_AVX2,
        Kernel::DcZva => PZ_STRATEGY_DC_ZVA,
        Kernel::Portable => PZ_STRATEGY_PORTABLE,
    }
}

/// A kernel's bit in `pz_cpu_info.kernels`: bit `n - 3` for `PZ_STRATEGY_*`
/// number `n` (`PZ_STRATEGY_REP_STOSB`, the first kernel, is bit 0).
pub(super) const fn kernel_bit(k: Kernel) -> u32 {
    1 << (kernel_number(k) - PZ_STRATEGY_REP_STOSB)
}

pub(super) fn parse_strategy(s: c_int) -> Result<Strategy> {
    Ok(match s {
        PZ_STRATEGY_AUTO => Strategy::Auto(Temperature::Unknown),
        PZ_STRATEGY_AUTO_HOT => Strategy::Auto(Temperature::Hot),
        PZ_STRATEGY_AUTO_COLD => Strategy::Auto(Temperature::Cold),
        _ => Strategy::Kernel(
            Kernel::ALL
                .into_iter()
                .find(|&k| kernel_number(k) == s)
                .ok_or_else(|| inval("unknown strategy"))?,
        ),
    })
}

/// Zeroes `len` bytes at `ptr` (Auto). `ptr` may be NULL only if `len == 0`.
///
/// # Safety
/// `[ptr, ptr + len)` is writable, and nothing else touches it during the call.
#[no_mangle]
pub unsafe extern "C" fn pz_clear(ptr: *mut c_void, len: usize) -> c_int {
    guard(|| {
        // SAFETY: the caller promises the range.
        prezero::clear(unsafe { bytes_mut(ptr, len)? });
        Ok(())
    })
}

/// Zeroes `len` bytes at `ptr` with a `PZ_STRATEGY_*`. `-ENOTSUP` if the CPU lacks
/// the kernel, `-EINVAL` for an unknown value.
///
/// # Safety
/// As `pz_clear`.
#[no_mangle]
pub unsafe extern "C" fn pz_clear_strategy(ptr: *mut c_void, len: usize, strategy: c_int) -> c_int {
    guard(|| {
        let s = parse_strategy(strategy)?;
        // SAFETY: the caller promises the range.
        prezero::clear_with(unsafe { bytes_mut(ptr, len)? }, s)
    })
}

/// Zeroes in chunks of at most `max_chunk` bytes, calling `on_chunk(done, ctx)`
/// between chunks; a non-zero return stops the clear. `*cleared` (if not NULL)
/// receives the bytes cleared: exactly `[ptr, ptr + *cleared)` is zero.
///
/// # Safety
/// As `pz_clear`; `cleared` is NULL or writable; `on_chunk` may be called with
/// `ctx` and does not touch the range.
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
        let n = prezero::clear_bounded(buf, max_chunk, |done| {
            // SAFETY: a C callback with the caller's own context.
            if unsafe { cb(done, ctx) } == 0 {
                ControlFlow::Continue(())
            } else {
                ControlFlow::Break(())
            }
        })?;
        // SAFETY: the caller passed a writable size_t or NULL.
        unsafe { write_opt(cleared, n) };
        Ok(())
    })
}

/// Zeroes in locality order around offset `hint` (clamped to the last byte):
/// the hint's neighbourhood last, with cache-hot stores.
///
/// # Safety
/// As `pz_clear`.
#[no_mangle]
pub unsafe extern "C" fn pz_clear_near(ptr: *mut c_void, len: usize, hint: usize) -> c_int {
    guard(|| {
        // SAFETY: the caller promises the range.
        prezero::clear_near(unsafe { bytes_mut(ptr, len)? }, hint);
        Ok(())
    })
}

/// Zeroes with `threads` threads (>= 1), split on page boundaries.
///
/// # Safety
/// As `pz_clear`.
#[no_mangle]
pub unsafe extern "C" fn pz_clear_parallel(ptr: *mut c_void, len: usize, threads: usize) -> c_int {
    // SAFETY: the caller promises the range.
    guard(|| prezero::clear_parallel(unsafe { bytes_mut(ptr, len)? }, threads))
}

/// Zeroes `[ptr, ptr+len)` as `n_nodes` parts of about equal size, on page
/// boundaries: part `i` by `threads / n_nodes` threads (at least one)
/// running on NUMA node `nodes[i]`'s CPUs, so pages touched first land on
/// that node. `-EINVAL`: NULL `nodes` or `n_nodes == 0`, `threads == 0`, a
/// node that is not online or has no CPUs, or a bad range.
///
/// # Safety
/// As `pz_clear`; `nodes` is NULL or readable for `n_nodes` ids.
#[no_mangle]
pub unsafe extern "C" fn pz_clear_parallel_nodes(
    ptr: *mut c_void,
    len: usize,
    nodes: *const u32,
    n_nodes: usize,
    threads: usize,
) -> c_int {
    guard(|| {
        // SAFETY: the caller promises the range.
        let buf = unsafe { bytes_mut(ptr, len)? };
        // SAFETY: the caller promises the node array.
        let nodes = unsafe { node_ids(nodes, n_nodes)? };
        prezero::clear_parallel_on_nodes(buf, nodes, threads).map(drop)
    })
}
