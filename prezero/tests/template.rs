//! Streaming copy and template fill, over every copy kernel the CPU has.

use std::panic::{catch_unwind, AssertUnwindSafe};

use prezero::{CopyKernel, Error, Streamer};

const GUARD: usize = 64;
const G: u8 = 0xee;

/// The record the slow path would produce for index `i` of `N` bytes.
fn expected<const N: usize>(i: usize) -> [u8; N] {
    let mut r = template::<N>();
    stamp(&mut r, i);
    r
}

fn template<const N: usize>() -> [u8; N] {
    std::array::from_fn(|j| (j as u8).wrapping_mul(7).wrapping_add(1))
}

/// The per-record update: the first (up to) 8 bytes and the last byte carry `i`.
fn stamp<const N: usize>(r: &mut [u8; N], i: usize) {
    let b = (i as u64).to_le_bytes();
    let n = N.min(8);
    r[..n].copy_from_slice(&b[..n]);
    r[N - 1] = (i as u8) ^ 0x5a;
}

/// `count` records of `N` bytes at byte offset `off` of a guarded buffer.
fn check_fill<const N: usize>(s: Streamer, count: usize, off: usize) {
    let mut buf = vec![G; GUARD + off + count * N + GUARD];
    let start = GUARD + off;
    // SAFETY: [u8; N] has alignment 1; the range lies inside `buf`.
    let dst: &mut [[u8; N]] =
        unsafe { std::slice::from_raw_parts_mut(buf[start..].as_mut_ptr().cast(), count) };
    let mut seen = 0;
    s.fill(dst, &template::<N>(), |i, r| {
        assert_eq!(i, seen, "indices out of order");
        seen += 1;
        stamp(r, i);
    });
    assert_eq!(seen, count);
    for i in 0..count {
        assert_eq!(
            &buf[start + i * N..][..N],
            &expected::<N>(i)[..],
            "{}: record {i} of {count} ({N} B, off {off})",
            s.kernel().name()
        );
    }
    assert!(buf[..start].iter().all(|&b| b == G), "wrote before dst");
    assert!(
        buf[start + count * N..].iter().all(|&b| b == G),
        "wrote after dst"
    );
}

fn every_size_and_count(s: Streamer) {
    for count in [0, 1, 2, 63, 64, 65, 1000] {
        for off in [0, 1, 8, 63] {
            check_fill::<1>(s, count, off);
            check_fill::<3>(s, count, off);
            check_fill::<8>(s, count, off);
            check_fill::<24>(s, count, off);
            check_fill::<56>(s, count, off);
            check_fill::<64>(s, count, off);
            check_fill::<72>(s, count, off);
            check_fill::<96>(s, count, off);
            if count <= 65 {
                check_fill::<4096>(s, count, off);
            }
        }
    }
}

fn copies(s: Streamer) {
    let src: Vec<u8> = (0..5008u32).map(|i| (i * 31 + 7) as u8).collect();
    for len in (0..300).chain([1000, 4096, 4097, 4999]) {
        for off in [0, 1, 31, 63] {
            let mut buf = vec![G; GUARD + off + len + GUARD];
            s.copy(&mut buf[GUARD + off..][..len], &src[3..3 + len])
                .unwrap();
            assert_eq!(&buf[GUARD + off..][..len], &src[3..3 + len]);
            assert!(buf[..GUARD + off]
                .iter()
                .chain(&buf[GUARD + off + len..])
                .all(|&b| b == G));
        }
    }
    let mut d = [0u8; 4];
    assert!(matches!(
        s.copy(&mut d, &[1, 2, 3]),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(d, [0; 4]);
}

#[repr(C, align(64))]
#[derive(Clone, Copy, PartialEq, Debug)]
struct Rec64([u64; 8]);

// SAFETY: eight u64s, no padding, any bit pattern valid.
unsafe impl prezero::Record for Rec64 {}

#[repr(C, align(64))]
#[derive(Clone, Copy, PartialEq, Debug)]
struct Rec128([u64; 16]);

// SAFETY: sixteen u64s, no padding, any bit pattern valid.
unsafe impl prezero::Record for Rec128 {}

fn words(s: Streamer) {
    let t64 = Rec64(std::array::from_fn(|j| 0x1111 * (j as u64 + 1)));
    let t128 = Rec128(std::array::from_fn(|j| 0x2222 * (j as u64 + 1)));
    let head = Rec64([0xaa; 8]);
    for count in [0usize, 1, 2, 63, 64, 65, 1000] {
        // Aligned (the register path on AVX-512) and misaligned (the general path).
        for misalign in [0usize, 8] {
            let mut v = vec![Rec64([0; 8]); count + 1];
            let base = v.as_mut_ptr() as usize + misalign;
            // SAFETY: v holds count + 1 records, so count of them from 8 bytes in
            // stay inside it; [u64; 8] needs only the 8-byte alignment the shift
            // keeps; v is not touched while dst lives.
            let dst: &mut [[u64; 8]] =
                unsafe { std::slice::from_raw_parts_mut(base as *mut [u64; 8], count) };
            s.fill_words(dst, &t64.0, [0, 24, 56], |i| {
                [i as u64, !(i as u64), i as u64 * 3]
            })
            .unwrap();
            for (i, r) in dst.iter().enumerate() {
                let mut e = t64.0;
                e[0] = i as u64;
                e[3] = !(i as u64);
                e[7] = i as u64 * 3;
                assert_eq!(
                    r,
                    &e,
                    "{} rec64 {i}/{count} misalign {misalign}",
                    s.kernel().name()
                );
            }
        }
        let mut v = vec![Rec128([0; 16]); count];
        s.fill_words(&mut v, &t128, [8, 72, 120], |i| [i as u64, 7, i as u64 + 1])
            .unwrap();
        for (i, r) in v.iter().enumerate() {
            let mut e = t128.0;
            e[1] = i as u64;
            e[9] = 7;
            e[15] = i as u64 + 1;
            assert_eq!(r.0, e);
        }
        // Grouped, with the head template for the first of every 5.
        let mut v = vec![Rec64([0; 8]); count];
        s.fill_words_grouped(&mut v, 5, &head, &t64, [16], |i, is_head| {
            assert_eq!(is_head, i % 5 == 0);
            [i as u64]
        })
        .unwrap();
        for (i, r) in v.iter().enumerate() {
            let mut e = if i % 5 == 0 { head.0 } else { t64.0 };
            e[2] = i as u64;
            assert_eq!(r.0, e);
        }
    }
    let mut v = vec![Rec64([0; 8]); 2];
    assert!(
        s.fill_words(&mut v, &t64, [57], |_| [0]).is_err(),
        "a word past the end"
    );
    assert!(s.fill_words(&mut v, &t64, [usize::MAX], |_| [0]).is_err());
    assert!(s
        .fill_words_grouped(&mut v, 0, &t64, &t64, [0], |_, _| [0])
        .is_err());
    assert_eq!(v, vec![Rec64([0; 8]); 2], "a refused fill wrote");
}

/// The register form over records of `W` words (8 to 264 bytes) at every
/// 8-byte alignment against a 64-byte line, grouped and not: every record
/// exact, nothing outside the destination touched.
fn words_of<const W: usize>(s: Streamer) {
    let head: [u64; W] = std::array::from_fn(|j| 0xa000 + j as u64);
    let tail: [u64; W] = std::array::from_fn(|j| 0xb000 + j as u64);
    let last = (W - 1) * 8;
    let offsets = [0, W / 2 * 8, last];
    for count in [0usize, 1, 2, 3, 7, 8, 9, 33, 100] {
        for line_off in (0..64).step_by(8) {
            for group in [1usize, 3, usize::MAX] {
                // A 64-byte aligned start inside a guarded buffer of words.
                let mut buf = vec![0xeeee_eeee_eeee_eeee_u64; 16 + count * W + 24];
                let base = buf.as_ptr() as usize;
                let start = ((base + 64).next_multiple_of(64) + line_off - base) / 8;
                let end = start + count * W;
                // SAFETY: [u64; W] has u64's alignment; the records lie inside buf.
                let dst: &mut [[u64; W]] = unsafe {
                    std::slice::from_raw_parts_mut(buf[start..].as_mut_ptr().cast(), count)
                };
                // Through `dyn`: a closure here is a new type for every W, and each
                // would compile the whole register-form engine again (minutes).
                let produce: &mut dyn FnMut(usize, bool) -> [u64; 3] = &mut |i, is_head| {
                    assert_eq!(is_head, i % group == 0);
                    [i as u64, !(i as u64), i as u64 * 7]
                };
                s.fill_words_grouped(dst, group, &head, &tail, offsets, produce)
                    .unwrap();
                for i in 0..count {
                    let mut e = if i % group == 0 { head } else { tail };
                    e[0] = i as u64;
                    e[W / 2] = !(i as u64);
                    e[W - 1] = i as u64 * 7;
                    if W == 1 {
                        e[0] = i as u64 * 7; // all three words at offset 0: the last wins
                    }
                    assert_eq!(
                        &buf[start + i * W..][..W],
                        &e[..],
                        "{} {W}-word record {i}/{count}, line offset {line_off}, group {group}",
                        s.kernel().name()
                    );
                }
                assert!(
                    buf[..start]
                        .iter()
                        .chain(&buf[end..])
                        .all(|&w| w == 0xeeee_eeee_eeee_eeee),
                    "{} {W} words x {count}: wrote outside the destination",
                    s.kernel().name()
                );
            }
        }
    }
    // No varying word: plain replication.
    let mut v = vec![[0u64; W]; 10];
    let nothing: &mut dyn FnMut(usize, bool) -> [u64; 0] = &mut |_, _| [];
    s.fill_words_grouped(&mut v, usize::MAX, &tail, &tail, [], nothing)
        .unwrap();
    assert!(v.iter().all(|r| *r == tail));
}

fn every_record_size(s: Streamer) {
    words_of::<1>(s);
    words_of::<2>(s);
    words_of::<3>(s);
    words_of::<4>(s);
    words_of::<5>(s);
    words_of::<6>(s);
    words_of::<7>(s);
    words_of::<8>(s);
    words_of::<9>(s);
    words_of::<10>(s);
    words_of::<12>(s);
    words_of::<14>(s);
    words_of::<16>(s);
    words_of::<20>(s);
    words_of::<24>(s);
    words_of::<31>(s);
    words_of::<32>(s);
    words_of::<33>(s);
}

fn grouped(s: Streamer) {
    let head = [1u8; 24];
    let tail = [2u8; 24];
    for group in [1usize, 2, 512] {
        for count in [0usize, 1, 2, 511, 512, 513, 1000, 1300] {
            let mut v = vec![[0u8; 24]; count];
            let mut seen = 0;
            s.fill_grouped(&mut v, group, &head, &tail, |i, is_head, r| {
                assert_eq!(i, seen);
                seen += 1;
                assert_eq!(is_head, i % group == 0);
                r[0] = i as u8;
                r[23] = (i / group) as u8;
            })
            .unwrap();
            for (i, r) in v.iter().enumerate() {
                let mut e = if i % group == 0 { head } else { tail };
                e[0] = i as u8;
                e[23] = (i / group) as u8;
                assert_eq!(r, &e, "group {group} count {count} record {i}");
            }
        }
    }
    let mut v = vec![[0u8; 24]; 3];
    assert!(matches!(
        s.fill_grouped(&mut v, 0, &head, &tail, |_, _, _| ()),
        Err(Error::InvalidArgument(_))
    ));
}

fn panicking_update_tears_nothing(s: Streamer) {
    let mut recs: Vec<[u8; 64]> = vec![[G; 64]; 10];
    let r = catch_unwind(AssertUnwindSafe(|| {
        s.fill(&mut recs, &[0u8; 64], |i, r| {
            if i == 5 {
                panic!("update failed at 5");
            }
            r.fill(i as u8 + 1);
        })
    }));
    assert!(r.is_err());
    for (i, r) in recs.iter().enumerate() {
        let want = if i < 5 { [i as u8 + 1; 64] } else { [G; 64] };
        assert_eq!(r, &want, "record {i} after a panic at 5");
    }
    let mut recs = vec![Rec64([0; 8]); 10];
    let r = catch_unwind(AssertUnwindSafe(|| {
        s.fill_words(&mut recs, &Rec64([9; 8]), [0], |i| {
            assert!(i < 5, "produce failed");
            [i as u64]
        })
    }));
    assert!(r.is_err());
    for (i, r) in recs.iter().enumerate() {
        let want = if i < 5 {
            let mut e = [9; 8];
            e[0] = i as u64;
            e
        } else {
            [0; 8]
        };
        assert_eq!(r.0, want, "record {i} after a panic in produce at 5");
    }
}

macro_rules! copy_kernel_suite {
    ($($module:ident => $kernel:expr),* $(,)?) => {$(
        mod $module {
            use super::*;

            fn streamer() -> Option<Streamer> {
                match Streamer::new($kernel) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        prezero_testkit::skip("cpu", e);
                        None
                    }
                }
            }

            #[test]
            fn every_size_and_count() {
                if let Some(s) = streamer() { super::every_size_and_count(s) }
            }

            #[test]
            fn copies() {
                if let Some(s) = streamer() { super::copies(s) }
            }

            #[test]
            fn words() {
                if let Some(s) = streamer() { super::words(s) }
            }

            #[test]
            fn every_record_size() {
                if let Some(s) = streamer() { super::every_record_size(s) }
            }

            #[test]
            fn grouped() {
                if let Some(s) = streamer() { super::grouped(s) }
            }

            #[test]
            fn panicking_update_tears_nothing() {
                if let Some(s) = streamer() { super::panicking_update_tears_nothing(s) }
            }
        }
    )*};
}

copy_kernel_suite! {
    avx512_stream => CopyKernel::Avx512Stream,
    avx2_stream => CopyKernel::Avx2Stream,
    sse2_stream => CopyKernel::Sse2Stream,
    movnti => CopyKernel::Movnti,
    neon_stream => CopyKernel::NeonStream,
    avx512 => CopyKernel::Avx512,
    avx2 => CopyKernel::Avx2,
    sse2 => CopyKernel::Sse2,
    neon => CopyKernel::Neon,
    portable => CopyKernel::Portable,
}

#[test]
fn free_functions_use_the_best_kernel() {
    let mut v = vec![[0u8; 16]; 100];
    prezero::template_fill(&mut v, &[3u8; 16], |i, r| r[0] = i as u8);
    assert!(v
        .iter()
        .enumerate()
        .all(|(i, r)| r[0] == i as u8 && r[1..] == [3; 15]));
    let mut d = vec![0u8; 1000];
    prezero::stream_copy(&mut d, &[7u8; 1000]).unwrap();
    assert!(d.iter().all(|&b| b == 7));
    prezero::stream_copy_nodrain(&mut d, &[8u8; 1000]).unwrap();
    prezero::drain();
    assert!(d.iter().all(|&b| b == 8));
    assert!(CopyKernel::Portable.is_available());
}
