//! The portable kernel: `ptr::write_bytes`, available on every target.

use core::ptr;

/// # Safety
/// `ptr` is valid for writes of `len` bytes.
pub(crate) unsafe fn clear(ptr: *mut u8, len: usize) {
    // SAFETY: the caller guarantees `ptr` is valid for `len` bytes of writes.
    unsafe { ptr::write_bytes(ptr, 0, len) }
}
