//! What the benches do to the memory they measure: touch it, the way a
//! program would, and check that what was to be zero is.

use anyhow::{anyhow, Result};

/// Writes `byte` to the first byte of every `stride` bytes: one demand fault
/// per page when `stride` is the page size.
pub fn touch_pages(buf: &mut [u8], stride: usize, byte: u8) {
    for i in (0..buf.len()).step_by(stride) {
        // SAFETY: i < len.
        let p = unsafe { buf.as_mut_ptr().add(i) };
        // SAFETY: a byte of `buf`; volatile so the compiler keeps every
        // fault-raising store.
        unsafe { std::ptr::write_volatile(p, byte) };
    }
}

/// Writes the first `lines` cache lines of every 4 KiB.
pub fn touch_lines(buf: &mut [u8], lines: usize) {
    for page in buf.chunks_mut(4096) {
        for l in 0..lines.min(page.len().div_ceil(64)) {
            // SAFETY: l * 64 < page.len().
            let p = unsafe { page.as_mut_ptr().add(l * 64) };
            // SAFETY: a byte of the page; volatile keeps every store.
            unsafe { std::ptr::write_volatile(p, 1) };
        }
    }
}

/// Fails loudly if `buf` is not all zero: a benchmark figure only counts if the
/// memory it claims to have cleared is clear.
pub fn verify_zero(buf: &[u8], what: &str) -> Result<()> {
    if prezero::is_zero(buf) {
        return Ok(());
    }
    let at = prezero::first_nonzero(buf).unwrap_or(0);
    Err(anyhow!(
        "VERIFY FAILED: {what} left byte {at} of {} non-zero ({:#04x})",
        buf.len(),
        buf[at]
    ))
}
