//! `rep stosb`: the extent clear Linux uses for huge pages. Given the whole extent at once, the
//! CPU's microcode picks its own store width and, on AMD Zen above ~LLC size,
//! skips the read-for-ownership of each line (cacheline-allocation elision).

/// # Safety
/// `ptr` is valid for writes of `len` bytes.
pub(crate) unsafe fn clear(ptr: *mut u8, len: usize) {
    // SAFETY: rep stosb writes exactly rcx bytes from rdi upwards (the ABI keeps
    // the direction flag clear on function entry); the caller vouches for them.
    unsafe {
        core::arch::asm!(
            "rep stosb",
            inout("rcx") len => _,
            inout("rdi") ptr => _,
            in("al") 0u8,
            options(nostack, preserves_flags),
        );
    }
}
