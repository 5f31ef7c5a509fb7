//! Bounded, locality-ordered and parallel clears, and the errors of the clear API.

mod common;

use std::cell::Cell;
use std::ops::ControlFlow;

use common::{assert_cleared_exactly, DIRTY};
use prezero::{Error, Kernel, Strategy, Temperature};
use prezero_testkit::Guarded;

#[test]
fn bounded_clears_everything_at_any_chunk_size() {
    let mut g = Guarded::new(3 * 4096 + 1000);
    let buf = g.bytes_mut();
    for len in [0, 1, 63, 64, 65, 4095, 4096, 4097, 3 * 4096 + 777] {
        for off in [0, 1, 63] {
            for chunk in [1, 2, 63, 64, 100, 4095, 4096, 8192, 1 << 20, usize::MAX] {
                let w = &mut buf[..off + len + 64];
                w.fill(DIRTY);
                let calls = Cell::new(0usize);
                let mut last = 0;
                let n = prezero::clear_bounded(&mut w[off..off + len], chunk, |done| {
                    assert!(done > last && done - last <= chunk, "chunk over max_chunk");
                    assert!(done < len, "callback after the last chunk");
                    last = done;
                    calls.set(calls.get() + 1);
                    ControlFlow::Continue(())
                })
                .unwrap();
                assert_eq!(n, len);
                assert!(len - last <= chunk, "last chunk over max_chunk");
                assert_cleared_exactly(w, off, len, &format!("bounded chunk {chunk}"));
                if chunk >= len {
                    assert_eq!(calls.get(), 0);
                }
            }
        }
    }
}

#[test]
fn bounded_early_stop_clears_exactly_the_reported_prefix() {
    let len = 10 * 4096 + 123;
    let mut g = Guarded::new(len + 64);
    let buf = g.bytes_mut();
    for chunk in [1000, 4096, 5000] {
        for stop_after in 1..4 {
            let w = &mut buf[..7 + len + 64];
            w.fill(DIRTY);
            let mut calls = 0;
            let mut reported = 0;
            let n = prezero::clear_bounded(&mut w[7..7 + len], chunk, |done| {
                calls += 1;
                reported = done;
                if calls == stop_after {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
            .unwrap();
            assert_eq!(n, reported);
            assert!(n < len);
            assert_cleared_exactly(w, 7, n, "bounded early stop");
        }
    }
}

#[test]
fn bounded_chunks_end_on_page_boundaries() {
    let mut g = Guarded::new(64 * 4096);
    let buf = g.bytes_mut();
    let base = buf.as_ptr() as usize + 100;
    prezero::clear_bounded(&mut buf[100..], 3 * 4096 + 5, |done| {
        assert_eq!((base + done) % 4096, 0);
        ControlFlow::Continue(())
    })
    .unwrap();
}

#[test]
fn bounded_with_zero_chunk_is_an_error() {
    let mut b = [DIRTY; 16];
    let e = prezero::clear_bounded(&mut b, 0, |_| ControlFlow::Continue(())).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)));
    assert_eq!(b, [DIRTY; 16]);
}

#[test]
fn near_clears_everything_for_every_hint() {
    let mut g = Guarded::new(40 * 4096);
    let buf = g.bytes_mut();
    for len in [
        0usize,
        1,
        4095,
        4096,
        5 * 4096,
        5 * 4096 + 1,
        13 * 4096 + 77,
        39 * 4096,
    ] {
        for off in [0, 1, 2048] {
            let mut hints = vec![
                0,
                len / 2,
                len.saturating_sub(1),
                len,
                len + 12345,
                usize::MAX,
            ];
            hints.extend((0..len).step_by(4093));
            for hint in hints {
                let w = &mut buf[..off + len + 64];
                w.fill(DIRTY);
                prezero::clear_near(&mut w[off..off + len], hint);
                assert_cleared_exactly(w, off, len, &format!("near hint {hint}"));
            }
        }
    }
}

#[test]
fn parallel_clears_everything_with_any_thread_count() {
    let len = 37 * 4096 + 555;
    let mut g = Guarded::new(len + 4096 + 64);
    let buf = g.bytes_mut();
    for threads in 1..=8 {
        for (off, n) in [
            (0, len),
            (13, len),
            (4000, 3 * 4096 + 1),
            (1, 1),
            (5, 0),
            (0, 7 * 4096),
        ] {
            let w = &mut buf[..off + n + 64];
            w.fill(DIRTY);
            prezero::clear_parallel(&mut w[off..off + n], threads).unwrap();
            assert_cleared_exactly(w, off, n, &format!("parallel {threads} threads"));
        }
    }
}

#[test]
fn parallel_with_zero_threads_is_an_error() {
    let mut b = [DIRTY; 16];
    assert!(matches!(
        prezero::clear_parallel(&mut b, 0),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(b, [DIRTY; 16]);
}

#[test]
fn raw_forms_match_the_slice_forms() {
    let mut v = vec![DIRTY; 10_000];
    // SAFETY: the vector is valid for its whole length.
    unsafe { prezero::clear_raw(v[10..].as_mut_ptr(), 9000) };
    assert_cleared_exactly(&v, 10, 9000, "clear_raw");
    v.fill(DIRTY);
    // SAFETY: as above.
    unsafe { prezero::clear_raw_with(v[3..].as_mut_ptr(), 5000, Temperature::Cold) }.unwrap();
    assert_cleared_exactly(&v, 3, 5000, "clear_raw_with");
}

#[test]
fn unavailable_kernels_are_errors_everywhere() {
    let Some(k) = Kernel::ALL.into_iter().find(|k| !k.is_available()) else {
        prezero_testkit::skip("cpu", "this CPU has every kernel, none to refuse");
        return;
    };
    let mut b = vec![DIRTY; 8192];
    let unsupported = |r: prezero::Result<()>| matches!(r, Err(Error::Unsupported { .. }));
    assert!(unsupported(prezero::clear_with(&mut b, k)));
    assert!(unsupported(prezero::clear_parallel_with(&mut b, k, 2)));
    assert!(matches!(
        prezero::clear_bounded_with(&mut b, k, 4096, |_| ControlFlow::Continue(())),
        Err(Error::Unsupported { .. })
    ));
    // SAFETY: the vector is valid for its whole length.
    assert!(unsupported(unsafe {
        prezero::clear_raw_with(b.as_mut_ptr(), b.len(), Strategy::Kernel(k))
    }));
    assert!(b.iter().all(|&x| x == DIRTY));
}

#[test]
fn auto_picks_available_kernels_for_every_size() {
    for t in Temperature::ALL {
        for shift in 0..40 {
            assert!(prezero::auto_kernel(1 << shift, t).is_available());
        }
    }
}
