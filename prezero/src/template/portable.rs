//! The portable copy: ordinary stores, for every target.

/// # Safety
/// `src` is readable and `dst` writable for `len` bytes, and they do not overlap.
pub(super) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { core::ptr::copy_nonoverlapping(src, dst, len) }
}

/// An 8-byte word in a general register: the register form's unit on any
/// target, and on x86_64 `movnti`'s (for records whose size is a multiple of
/// 8 but not of 16, or destinations only 8-aligned). A lane is an all-ones mask.
#[derive(Clone, Copy)]
pub(super) struct Word(u64);

impl super::words::Unit for Word {
    const BYTES: usize = 8;
    const PICK: bool = true;
    type Lane = u64;

    #[inline(always)]
    unsafe fn lane(_lane: usize) -> u64 {
        !0
    }
    #[inline(always)]
    unsafe fn no_lane() -> u64 {
        0
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: the caller's pointer, readable for 8 bytes.
        Word(unsafe { p.cast::<u64>().read_unaligned() })
    }
    #[inline(always)]
    unsafe fn clear(self, lane: u64) -> Self {
        Word(self.0 & !lane)
    }
    #[inline(always)]
    unsafe fn insert(self, lane: u64, word: u64) -> Self {
        Word(self.0 | (word & lane))
    }
    #[inline(always)]
    unsafe fn or_words(self, lo: u64, hi: u64) -> Self {
        let _ = hi;
        Word(self.0 | lo)
    }
    #[inline(always)]
    unsafe fn stream(self, p: *mut u8) {
        // SAFETY: the caller's 8-byte aligned pointer; SSE2 (`movnti`) is
        // part of x86_64. Elsewhere no streaming kernel uses this unit.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            core::arch::x86_64::_mm_stream_si64(p.cast(), self.0 as i64)
        }
        // SAFETY: as for store.
        #[cfg(not(target_arch = "x86_64"))]
        unsafe {
            self.store(p)
        }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: the caller's pointer, writable for 8 bytes.
        unsafe { p.cast::<u64>().write_unaligned(self.0) }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::super::words::{fill, fits, Job, Unit};
    use super::{copy, Word};

    const GUARD: usize = 16;

    /// Every source and destination alignment within a word, every length up
    /// to a few lines: the bytes arrive, and the guards around them stay.
    #[test]
    fn copy_writes_exactly_the_range() {
        let longest = crate::clear::portable::tests::lengths().max().unwrap();
        let src: Vec<u8> = (0..longest + 8).map(|b| b as u8).collect();
        for len in crate::clear::portable::tests::lengths() {
            let mut dst = vec![0xa5u8; GUARD + 8 + len + GUARD];
            for (from, to) in (0..8).map(|a| (a, GUARD + (a * 5) % 8)) {
                dst.fill(0xa5);
                let at = dst[to..].as_mut_ptr();
                // SAFETY: both ranges lie in their own vectors.
                unsafe { copy(at, src[from..].as_ptr(), len) };
                assert_eq!(&dst[to..to + len], &src[from..from + len], "len {len}");
                let guards = dst[..to].iter().chain(&dst[to + len..]).all(|&b| b == 0xa5);
                assert!(guards, "from {from} to {to} len {len}");
            }
        }
    }

    /// The word the fill puts at `offsets[k]` of record `i`.
    fn word(i: usize, k: usize, is_head: bool) -> u64 {
        (i as u64) << 16 | (k as u64) << 8 | u64::from(is_head) | 0xf0f0 << 32
    }

    /// Record `i` as the fill must leave it: its template with the words laid
    /// in, in order (of two at one offset the later wins).
    fn expected<const K: usize>(job: &Job<'_, K>, t: (&[u8], &[u8]), i: usize) -> Vec<u8> {
        let is_head = i.is_multiple_of(job.group_len);
        let mut r = if is_head { t.0 } else { t.1 }.to_vec();
        for (k, &o) in job.offsets.iter().enumerate() {
            r[o..o + 8].copy_from_slice(&word(i, k, is_head).to_ne_bytes());
        }
        r
    }

    /// The register form over 8-byte units, streaming or not, through each
    /// of its record shapes (picked: 1-4 and 8 units; loaded: 5 and 9; held:
    /// 8 produced words), from destinations at every word of a line (under
    /// Miri, one word past a line: partial lines at both ends all the same).
    fn fill_words<U: Unit, const STREAM: bool, const K: usize>(offsets: [usize; K]) {
        let sizes: &[usize] = if cfg!(miri) {
            &[8, 24, 40, 64, 72]
        } else {
            &[8, 16, 24, 32, 40, 64, 72, 128]
        };
        for &size in sizes {
            if offsets.iter().any(|&o| o + 8 > size) {
                continue;
            }
            let head: Vec<u8> = (0..size).map(|b| b as u8).collect();
            let tail: Vec<u8> = (0..size).map(|b| !(b as u8)).collect();
            let n = 12;
            let (skews, groups) = if cfg!(miri) {
                (8..16, &[3][..])
            } else {
                (0..64, &[1, 3, usize::MAX][..])
            };
            for skew in skews.step_by(8) {
                for &group_len in groups {
                    // 8-aligned words: the alignment a streaming word needs.
                    let mut words = vec![!0u64; (GUARD + skew + n * size + GUARD) / 8 + 8];
                    let base = words.as_mut_ptr().cast::<u8>();
                    let lead = (base as usize).next_multiple_of(64) - base as usize;
                    let start = lead + GUARD + skew;
                    let job = Job {
                        dst: base.wrapping_add(start),
                        n,
                        size,
                        head: head.as_ptr(),
                        tail: tail.as_ptr(),
                        group_len,
                        offsets: &offsets,
                    };
                    assert!(fits(&job, U::BYTES, STREAM));
                    let dst = job.dst as usize;
                    FILLING.set(dst..dst + n * size);
                    let mut calls = 0;
                    let mut produce = |i: usize, is_head: bool| {
                        assert_eq!(i, calls, "records in order");
                        calls += 1;
                        core::array::from_fn(|k| word(i, k, is_head))
                    };
                    // SAFETY: `fits` holds; U's stores need nothing of the CPU
                    // (movnti is part of x86_64's baseline); dst has n records after
                    // `start` in `words`; the templates are `size` bytes; every
                    // offset + 8 <= size (checked above); group_len >= 1.
                    unsafe { fill::<U, STREAM, K>(&job, &mut produce) };
                    assert_eq!(calls, n);
                    // SAFETY: `words` is alive, initialised, and no longer written.
                    let bytes = unsafe { core::slice::from_raw_parts(base, words.len() * 8) };
                    for i in 0..n {
                        let at = start + i * size;
                        let want = expected(&job, (&head, &tail), i);
                        assert_eq!(
                            &bytes[at..at + size],
                            &want[..],
                            "size {size} skew {skew} record {i}"
                        );
                    }
                    let guards = bytes[..start].iter().chain(&bytes[start + n * size..]);
                    assert!(
                        guards.into_iter().all(|&b| b == 0xff),
                        "size {size} skew {skew}"
                    );
                }
            }
        }
    }

    thread_local! {
        /// The destination of the fill in progress on this thread.
        static FILLING: Cell<core::ops::Range<usize>> = const { Cell::new(0..0) };
    }

    /// An 8-byte word whose streaming store is an ordinary one that checks
    /// what `words.rs` promises of it: aligned, and in a line the destination
    /// covers whole. Miri runs it, where `movnti` (inline asm) cannot run.
    #[derive(Clone, Copy)]
    struct Checked(Word);

    impl Unit for Checked {
        const BYTES: usize = 8;
        const PICK: bool = true;
        type Lane = u64;

        unsafe fn lane(lane: usize) -> u64 {
            // SAFETY: forwarded from the caller.
            unsafe { Word::lane(lane) }
        }
        unsafe fn no_lane() -> u64 {
            // SAFETY: forwarded from the caller.
            unsafe { Word::no_lane() }
        }
        unsafe fn load(p: *const u8) -> Self {
            // SAFETY: forwarded from the caller.
            Checked(unsafe { Word::load(p) })
        }
        unsafe fn clear(self, lane: u64) -> Self {
            // SAFETY: forwarded from the caller.
            Checked(unsafe { self.0.clear(lane) })
        }
        unsafe fn insert(self, lane: u64, word: u64) -> Self {
            // SAFETY: forwarded from the caller.
            Checked(unsafe { self.0.insert(lane, word) })
        }
        unsafe fn or_words(self, lo: u64, hi: u64) -> Self {
            // SAFETY: forwarded from the caller.
            Checked(unsafe { self.0.or_words(lo, hi) })
        }
        unsafe fn stream(self, p: *mut u8) {
            let (at, dst) = (p as usize, FILLING.take());
            assert!(at.is_multiple_of(8), "streamed to {at:#x}, not 8-aligned");
            let line = at & !63;
            assert!(
                dst.start <= line && line + 64 <= dst.end,
                "streamed into a partial line"
            );
            FILLING.set(dst);
            // SAFETY: forwarded from the caller.
            unsafe { self.store(p) }
        }
        unsafe fn store(self, p: *mut u8) {
            // SAFETY: forwarded from the caller.
            unsafe { self.0.store(p) }
        }
    }

    #[test]
    fn word_fill_stores_every_record() {
        fill_words::<Word, false, 1>([0]);
        fill_words::<Word, false, 2>([16, 0]);
        fill_words::<Word, false, 3>([8, 8, 32]);
    }

    #[test]
    fn word_fill_streams_whole_lines_only() {
        fill_words::<Checked, true, 1>([0]);
        fill_words::<Checked, true, 2>([56, 8]);
        fill_words::<Checked, true, 8>([0, 8, 16, 0, 24, 32, 40, 48]);
    }

    #[test]
    #[cfg_attr(miri, ignore = "movnti is inline asm, which Miri cannot run")]
    fn word_fill_streams_every_record() {
        fill_words::<Word, true, 1>([0]);
        fill_words::<Word, true, 2>([56, 8]);
        fill_words::<Word, true, 8>([0, 8, 16, 0, 24, 32, 40, 48]);
    }
}
