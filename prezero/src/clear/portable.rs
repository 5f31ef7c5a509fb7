//! The portable kernel: `ptr::write_bytes`, available on every target.

use core::ptr;

/// # Safety
/// `ptr` is valid for writes of `len` bytes.
pub(crate) unsafe fn clear(ptr: *mut u8, len: usize) {
    // SAFETY: the caller guarantees `ptr` is valid for `len` bytes of writes.
    unsafe { ptr::write_bytes(ptr, 0, len) }
}

#[cfg(test)]
pub(crate) mod tests {
    /// Lengths: every one up to a few lines (under Miri, up to two words and
    /// around a line).
    pub(crate) fn lengths() -> impl Iterator<Item = usize> {
        let (short, long): (_, &[usize]) = if cfg!(miri) {
            (0..=17, &[63, 64, 65])
        } else {
            (0..=80, &[127, 128, 129, 4095, 4097])
        };
        short.chain(long.iter().copied())
    }

    /// Every start within a word and every length of [`lengths`], between
    /// guard bytes: exactly the range reads zero afterwards. (Under Miri too:
    /// `write_bytes` there is checked for bounds and provenance.)
    #[test]
    fn clears_exactly_the_range_at_any_alignment() {
        const GUARD: usize = 16;
        for len in lengths() {
            let mut buf = vec![0u8; GUARD + 8 + len + GUARD];
            for start in GUARD..GUARD + 8 {
                buf.fill(0xa5);
                let at = buf[start..].as_mut_ptr();
                // SAFETY: `start + len` stays inside `buf`, which nothing else borrows.
                unsafe { super::clear(at, len) };
                let (before, rest) = buf.split_at(start);
                let (cleared, after) = rest.split_at(len);
                assert!(cleared.iter().all(|&b| b == 0), "start {start} len {len}");
                let guards = before.iter().chain(after).all(|&b| b == 0xa5);
                assert!(guards, "start {start} len {len}");
            }
        }
    }
}
