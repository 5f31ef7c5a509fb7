//! Test helpers: checks of what a clear wrote in [`Guarded`] memory; and
//! probes for what an emulator (qemu-user) does not do, so only those tests
//! skip there.
#![allow(dead_code)]

use prezero_testkit::Guarded;

pub const DIRTY: u8 = 0xa5;

/// Asserts `buf[range]` is zero and everything else in `buf` still holds DIRTY.
pub fn assert_cleared_exactly(buf: &[u8], start: usize, len: usize, what: &str) {
    let range = &buf[start..start + len];
    if let Some(i) = prezero::first_nonzero(range) {
        panic!("{what}: byte {i} of {len} (start {start}) left non-zero");
    }
    if let Some(i) = buf[..start].iter().rposition(|&b| b != DIRTY) {
        panic!(
            "{what}: wrote {} bytes before the range (len {len}, start {start})",
            start - i
        );
    }
    if let Some(i) = buf[start + len..].iter().position(|&b| b != DIRTY) {
        panic!(
            "{what}: wrote byte {} past the end (len {len}, start {start})",
            i + 1
        );
    }
}

/// LazyFree of this process, in bytes.
pub fn lazy_free() -> u64 {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("LazyFree:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Whether memory marked `MADV_FREE` shows in LazyFree here (qemu-user
/// ignores the advice), tried on a mapping of the probe's own.
pub fn lazy_free_shows_madv_free() -> bool {
    const LEN: usize = 4 << 20;
    let before = lazy_free();
    let mut g = Guarded::new(LEN);
    let bytes = g.bytes_mut();
    bytes.fill(1);
    // SAFETY: the guarded mapping's own bytes, which nothing reads after.
    unsafe { libc::madvise(bytes.as_mut_ptr().cast(), LEN, libc::MADV_FREE) };
    lazy_free() >= before + (LEN as u64) / 2
}
