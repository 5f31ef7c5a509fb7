//! AMD `clzero`: zeroes a whole 64-byte line without reading it. Weakly ordered
//! like a streaming store, so the kernel ends with `sfence`.

use super::{clear_below_64, clear_edges_64, inner_lines};

/// # Safety
/// The CPU has CLZERO, and `ptr` is valid for writes of `len` bytes.
// Every store and pointer step here is an unsafe operation resting on the
// one range argument of the SAFETY comment below; a block for each would
// repeat it at every store of the hot loop.
#[allow(clippy::multiple_unsafe_ops_per_block)]
pub(crate) unsafe fn clear(ptr: *mut u8, len: usize) {
    if len < 64 {
        // SAFETY: len < 64 and the caller vouches for the range.
        unsafe { clear_below_64(ptr, len) };
        return;
    }
    let (mut p, lines) = inner_lines(ptr, len);
    // SAFETY: len >= 64 so the edge stores are in range; each `clzero` zeroes the
    // aligned line containing rax, and every such line lies inside [ptr, ptr+len).
    // The caller guarantees the CPU has the instruction.
    unsafe {
        clear_edges_64(ptr, len);
        for _ in 0..lines {
            core::arch::asm!("clzero", in("rax") p, options(nostack, preserves_flags));
            p = p.add(64);
        }
        core::arch::asm!("sfence", options(nostack, preserves_flags));
    }
}
