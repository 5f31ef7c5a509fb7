//! The same suite for every clearing kernel and every Auto temperature:
//! every length 0..=1024 at every start offset 0..64, large odd lengths between
//! PROT_NONE guard pages, guard bytes checked untouched. A kernel this CPU lacks
//! is skipped with a printed reason (and must refuse to run, not crash).

mod common;

use common::{assert_cleared_exactly, DIRTY};
use prezero::{Kernel, Strategy, Temperature};
use prezero_testkit::Guarded;

/// Guard bytes checked on each side of small clears.
const GUARD: usize = 64;
const LARGE: [usize; 3] = [64 * 1024 + 1, 2 * 1024 * 1024 - 1, 4 * 1024 * 1024 + 63];

fn available(s: Strategy) -> bool {
    match s {
        Strategy::Kernel(k) if !k.is_available() => {
            let why = match &prezero::cpu().mask {
                Some(m) => format!("which this CPU lacks or PREZERO_CPU={m} removed"),
                None => "which this CPU lacks".to_string(),
            };
            prezero_testkit::skip(
                "cpu",
                format!("kernel {} needs {}, {why}", k.name(), k.needs()),
            );
            let mut b = [DIRTY; 8];
            let e = prezero::clear_with(&mut b, k).expect_err("an unavailable kernel must refuse");
            assert!(e.to_string().contains(k.name()));
            assert_eq!(b, [DIRTY; 8], "a refused kernel touched memory");
            false
        }
        _ => true,
    }
}

fn small_lengths_every_offset(s: Strategy) {
    if !available(s) {
        return;
    }
    let mut g = Guarded::new(1024 + 64 + 2 * GUARD);
    let buf = g.bytes_mut();
    for len in 0..=1024 {
        for off in 0..64 {
            let window = &mut buf[..GUARD + off + len + GUARD];
            window.fill(DIRTY);
            prezero::clear_with(&mut window[GUARD + off..][..len], s).unwrap();
            assert_cleared_exactly(window, GUARD + off, len, s.name());
        }
    }
}

fn large_lengths_against_guard_pages(s: Strategy) {
    if !available(s) {
        return;
    }
    let max = LARGE.iter().max().unwrap() + 64;
    let mut g = Guarded::new(max);
    let buf = g.bytes_mut();
    let end = buf.len();
    for len in LARGE {
        for off in 0..64 {
            // Starting `off` bytes after the leading guard page...
            buf[..off + len + GUARD].fill(DIRTY);
            prezero::clear_with(&mut buf[off..off + len], s).unwrap();
            assert_cleared_exactly(&buf[..off + len + GUARD], off, len, s.name());
            // ...and ending `off` bytes before the trailing one.
            let start = end - off - len;
            buf[start - GUARD..].fill(DIRTY);
            prezero::clear_with(&mut buf[start..start + len], s).unwrap();
            assert_cleared_exactly(&buf[start - GUARD..], GUARD, len, s.name());
        }
    }
}

fn exact_fit_between_guard_pages(s: Strategy) {
    if !available(s) {
        return;
    }
    // The whole accessible span: the first and the last byte border a guard page.
    for pages in [1, 2, 17, 513] {
        let mut g = Guarded::new(pages * 4096);
        let buf = g.bytes_mut();
        buf.fill(DIRTY);
        prezero::clear_with(buf, s).unwrap();
        assert!(
            prezero::is_zero(buf),
            "{}: {pages} pages not all zero",
            s.name()
        );
    }
}

macro_rules! kernel_suite {
    ($($module:ident => $strategy:expr),* $(,)?) => {
        /// Every strategy the suite runs.
        fn suite() -> Vec<Strategy> {
            vec![$(Strategy::from($strategy)),*]
        }
        $(mod $module {
            use super::*;

            #[test]
            fn small_lengths_every_offset() {
                super::small_lengths_every_offset($strategy.into());
            }

            #[test]
            fn large_lengths_against_guard_pages() {
                super::large_lengths_against_guard_pages($strategy.into());
            }

            #[test]
            fn exact_fit_between_guard_pages() {
                super::exact_fit_between_guard_pages($strategy.into());
            }
        })*
    };
}

kernel_suite! {
    rep_stosb => Kernel::RepStosb,
    avx512_stream => Kernel::Avx512Stream,
    avx2_stream => Kernel::Avx2Stream,
    movnti => Kernel::Movnti,
    clzero => Kernel::Clzero,
    avx512 => Kernel::Avx512,
    avx2 => Kernel::Avx2,
    dc_zva => Kernel::DcZva,
    portable => Kernel::Portable,
    auto_unknown => Temperature::Unknown,
    auto_hot => Temperature::Hot,
    auto_cold => Temperature::Cold,
}

#[test]
fn every_kernel_is_in_the_suite() {
    let suite = suite();
    for k in Kernel::ALL {
        assert!(
            suite.contains(&Strategy::Kernel(k)),
            "kernel {} has no suite: add it to the kernel_suite! call above",
            k.name()
        );
    }
    for t in Temperature::ALL {
        let s = Strategy::Auto(t);
        assert!(suite.contains(&s), "{} has no suite", s.name());
    }
}

#[test]
fn names_round_trip() {
    for k in Kernel::ALL {
        assert_eq!(k.name().parse::<Kernel>().unwrap(), k);
        assert_eq!(k.name().parse::<Strategy>().unwrap(), Strategy::Kernel(k));
    }
    for t in Temperature::ALL {
        let s = Strategy::Auto(t);
        assert_eq!(s.name().parse::<Strategy>().unwrap(), s);
    }
    assert!("nonsense".parse::<Strategy>().is_err());
}

/// Under `PREZERO_CPU` a kernel the mask removed is unavailable, as on a CPU
/// without it, and neither Auto nor the template streamer ever picks one.
#[test]
fn kernels_follow_the_features_in_force() {
    let c = prezero::cpu();
    assert!(c.mask_error.is_none(), "PREZERO_CPU: {:?}", c.mask_error);
    for k in Kernel::ALL {
        if k.is_available() {
            assert!(
                k.is_available_with(&c.features),
                "{k} runs without its feature"
            );
        }
        if !k.is_available_with(&c.features) {
            assert!(!k.is_available(), "{k} survived PREZERO_CPU={:?}", c.mask);
        }
    }
    for temp in Temperature::ALL {
        for len in [0, 100, 4096, 64 << 10, 4 << 20, 1 << 30] {
            let k = prezero::auto_kernel(len, temp);
            assert!(k.is_available(), "Auto picked {k} at {len} {temp:?}");
        }
    }
    assert!(prezero::Streamer::auto().kernel().is_available());
}
