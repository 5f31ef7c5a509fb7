//! `dc zva`: zero a whole block (DCZID_EL0, usually 64 bytes) per instruction,
//! without reading it. Head and tail are cleared with plain stores.

use crate::clear::portable;
use crate::cpu::cpu;

/// A block size outside 16..=2048 bytes would be a broken DCZID: refuse it.
pub(crate) fn block_size_ok() -> bool {
    (16..=2048).contains(&cpu().dc_zva_block)
}

/// # Safety
/// `dc zva` is permitted (DCZID_EL0.DZP clear), and `ptr` is valid for writes of `len` bytes.
// Every store and pointer step here is an unsafe operation resting on the
// one range argument of the SAFETY comment below; a block for each would
// repeat it at every store of the hot loop.
#[allow(clippy::multiple_unsafe_ops_per_block)]
pub(crate) unsafe fn clear(ptr: *mut u8, len: usize) {
    let bs = cpu().dc_zva_block;
    let start = (ptr as usize).next_multiple_of(bs);
    let end = (ptr as usize + len) & !(bs - 1);
    if end <= start {
        // SAFETY: the caller vouches for the range.
        unsafe { portable::clear(ptr, len) };
        return;
    }
    // SAFETY: [ptr, start) and [end, ptr+len) are inside the range; every block
    // zeroed by `dc zva` starts at an aligned address in [start, end) and so lies
    // inside the range too. The caller guarantees the instruction is permitted.
    unsafe {
        portable::clear(ptr, start - ptr as usize);
        let mut p = start;
        while p < end {
            core::arch::asm!("dc zva, {}", in(reg) p, options(nostack, preserves_flags));
            p += bs;
        }
        portable::clear(end as *mut u8, ptr as usize + len - end);
    }
}
