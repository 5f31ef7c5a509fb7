//! The portable copy: ordinary stores, for every target.

/// # Safety
/// `src` is readable and `dst` writable for `len` bytes, and they do not overlap.
pub(super) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { core::ptr::copy_nonoverlapping(src, dst, len) }
}
