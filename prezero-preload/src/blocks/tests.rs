//! The block model under requests, frees and the background work: the
//! transitions one by one, and random traffic against a page-level model of
//! which bytes are zero.

use super::*;

const M: usize = 1 << 20;

fn blocks(len: usize, cap: usize) -> Blocks {
    let list = Box::leak(vec![EMPTY; cap].into_boxed_slice());
    Blocks::new(1 << 40, (1 << 40) + len, list)
}

fn granted(a: Alloc) -> (usize, usize, Vec<Piece>) {
    match a {
        Alloc::Granted {
            start,
            len,
            pieces,
            n,
        } => (start, len, pieces[..n].to_vec()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_freed_block_comes_back_and_a_half_scrubbed_one_serves_calloc_whole() {
    let mut b = blocks(64 * M, 64);
    let (a, len, p) = granted(b.alloc(8 * M, 1, true, usize::MAX));
    assert_eq!((len, p.len(), p[0].2), (8 * M, 1, Kind::Fresh));
    assert_eq!(b.free(a, 1), Some(8 * M));
    assert_eq!(b.free(a, 1), None, "a double free is refused");
    // The scrubber does the first half.
    let (s, l) = b.scrub_take(4 * M).unwrap();
    assert_eq!((s, l), (a, 4 * M));
    assert_eq!(b.alloc(8 * M, 1, true, 0), Alloc::Wait, "busy in the way");
    b.busy_done(s, Kind::Clean);
    let (a2, _, p) = granted(b.alloc(8 * M, 1, true, 0));
    assert_eq!(a2, a, "the same memory, not fresh pages");
    assert_eq!(
        p,
        vec![(a, 4 * M, Kind::Clean), (a + 4 * M, 4 * M, Kind::Dirty)]
    );
    assert!(b.check());
}

#[test]
fn a_spare_is_populated_from_memory_without_pages_and_serves_calloc_first() {
    let mut b = blocks(64 * M, 64);
    let (a, ..) = granted(b.alloc(8 * M, 1, true, usize::MAX));
    assert_eq!(b.fresh_take(4 * M, 0, 1), None, "no Fresh block, no room");
    // Beyond top, in chunks, dated when populated (idle counts from then).
    let (s, l) = b.fresh_take(4 * M, usize::MAX, 7).unwrap();
    assert_eq!((s, l), (a + 8 * M, 4 * M));
    b.busy_done(s, Kind::Clean);
    let (s2, l2) = b.fresh_take(16 * M, 2 * M + 100, 9).unwrap();
    assert_eq!((s2, l2), (a + 12 * M, 2 * M), "room bounds the chunk");
    b.busy_done(s2, Kind::Clean);
    assert_eq!(
        b.blocks()[1],
        Block {
            start: s,
            len: 6 * M,
            kind: Kind::Clean,
            since: 9
        }
    );
    // calloc takes the spare, not the Dirty block; malloc the Dirty one.
    b.free(a, 10).unwrap();
    let (z, _, p) = granted(b.alloc(6 * M, 1, true, 0));
    assert_eq!(
        (z, p.iter().map(|x| x.2).collect::<Vec<_>>()),
        (s, vec![Kind::Clean])
    );
    let (m, _, p) = granted(b.alloc(4 * M, 1, false, 0));
    assert_eq!((m, p[0].2), (a, Kind::Dirty));
    // A Fresh last block (given back) is populated from its head, before
    // the range beyond top.
    b.free(z, 11).unwrap();
    let (r, rl) = b.release_take(11, usize::MAX).unwrap();
    assert_eq!((r, rl), (a + 4 * M, 10 * M));
    b.busy_done(r, Kind::Fresh);
    assert_eq!(b.largest_clean(), 0);
    assert_eq!(b.fresh_take(M, usize::MAX, 12), Some((r, M)));
    b.busy_done(r, Kind::Clean);
    assert_eq!(b.largest_clean(), M);
    assert!(b.check());
    // A Fresh hole below a block in use is left for requests of its size:
    // the spare grows at the end, in one run.
    let mut b = blocks(64 * M, 64);
    let (x, ..) = granted(b.alloc(4 * M, 1, true, usize::MAX));
    let (y, ..) = granted(b.alloc(4 * M, 1, true, usize::MAX));
    b.free(x, 1).unwrap();
    let (h, _) = b.release_take(1, usize::MAX).unwrap();
    b.busy_done(h, Kind::Fresh);
    assert_eq!(b.fresh_take(M, usize::MAX, 2), Some((y + 4 * M, M)));
    // Work that failed: Dirty, dated now (not idle again at once).
    b.busy_failed(y + 4 * M, 3);
    let last = *b.blocks().last().unwrap();
    assert_eq!((last.kind, last.since), (Kind::Dirty, 3));
    assert!(b.check());
}

#[test]
fn a_request_that_waited_goes_around_busy_blocks() {
    let mut b = blocks(64 * M, 64);
    let (a, ..) = granted(b.alloc(8 * M, 1, true, usize::MAX));
    b.free(a, 1);
    let (s, _) = b.scrub_take(4 * M).unwrap();
    assert_eq!(b.alloc(8 * M, 1, true, usize::MAX), Alloc::Wait);
    let (c, _, p) = granted(b.alloc_around_busy(8 * M, 1, true, usize::MAX));
    assert_eq!(c, a + 4 * M, "beside the busy block, on past top");
    assert_eq!(
        p,
        vec![
            (a + 4 * M, 4 * M, Kind::Dirty),
            (a + 8 * M, 4 * M, Kind::Fresh)
        ]
    );
    assert_eq!(
        b.alloc_around_busy(M, 1, true, 0),
        Alloc::Full,
        "only the busy block is free"
    );
    b.busy_done(s, Kind::Clean);
    assert_eq!(granted(b.alloc_around_busy(M, 1, true, 0)).0, a);
    assert!(b.check());
}

#[test]
fn malloc_prefers_dirty_and_calloc_clean() {
    let mut b = blocks(64 * M, 64);
    let (x, ..) = granted(b.alloc(4 * M, 1, false, usize::MAX));
    let (_sep, ..) = granted(b.alloc(M, 1, false, usize::MAX));
    let (y, ..) = granted(b.alloc(4 * M, 1, false, usize::MAX));
    let (_sep2, ..) = granted(b.alloc(M, 1, false, usize::MAX));
    b.free(x, 1);
    b.free(y, 2);
    let (s, _) = b.scrub_take(usize::MAX).unwrap();
    assert_eq!(s, x, "oldest first");
    b.busy_done(s, Kind::Clean);
    assert_eq!(granted(b.alloc(4 * M, 1, true, 0)).0, x);
    b.free(x, 3);
    // y (freed at 2) is the oldest Dirty: scrubbed; x stays Dirty.
    let (s, _) = b.scrub_take(usize::MAX).unwrap();
    assert_eq!(s, y);
    b.busy_done(y, Kind::Clean);
    assert_eq!(
        granted(b.alloc(4 * M, 1, false, 0)).0,
        x,
        "malloc spares clean"
    );
    assert_eq!(
        granted(b.alloc(4 * M, 1, true, 0)).0,
        y,
        "calloc takes clean"
    );
    assert!(b.check());
}

#[test]
fn alignment_growth_shrink_and_limits() {
    let mut b = blocks(64 * M, 64);
    let (a, ..) = granted(b.alloc(3 * M, 2 * M, false, usize::MAX));
    assert!(a.is_multiple_of(2 * M));
    let (c, ..) = granted(b.alloc(M + 1, 1 << 21, false, usize::MAX));
    assert!(c.is_multiple_of(2 * M) && b.check());
    assert!(
        b.grow(c, 8 * M, usize::MAX),
        "the last block grows past top"
    );
    assert_eq!(b.in_use_len(c), Some(8 * M));
    assert!(!b.grow(a, 8 * M, usize::MAX), "a block in use in the way");
    assert!(b.shrink(c, M, 5));
    assert_eq!(b.in_use_len(c), Some(M));
    assert!(b.grow(c, 2 * M, 0), "into its own freed tail");
    assert_eq!(
        b.alloc(128 * M, 1, false, usize::MAX),
        Alloc::Full,
        "past the range"
    );
    assert_eq!(b.alloc(8 * M, 1, false, M), Alloc::Full, "past the room");
    assert_eq!(b.alloc(usize::MAX, 1, false, usize::MAX), Alloc::Full);
    assert_eq!(
        b.alloc(M, 3 * M, false, usize::MAX),
        Alloc::Full,
        "not a power of two"
    );
    assert!(b.check());
}

/// Random traffic against a page-level model of which bytes are zero: a
/// zeroed grant, once its Dirty pieces are cleared, is zero everywhere.
#[test]
fn random_traffic_keeps_the_invariant_and_zeroed_grants_zero() {
    // Miri (scripts/miri.sh) is some thousand times slower than a native run:
    // a smaller range (every step checks its pages) and fewer steps.
    let (len, steps) = if cfg!(miri) {
        (32 * M, 100)
    } else {
        (256 * M, 200_000)
    };
    let mut b = blocks(len, 48);
    let base = 1usize << 40;
    let mut zero = vec![true; len / PAGE];
    let mut live: Vec<usize> = Vec::new();
    // What a Busy block is for: scrubbing, giving back, populating a spare.
    #[derive(PartialEq)]
    enum Work {
        Scrub,
        Release,
        Populate,
    }
    let mut busy: Vec<(usize, usize, Work)> = Vec::new();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let pages = |s: usize, l: usize| (s - base) / PAGE..(s - base + l) / PAGE;
    for step in 0..steps {
        match next() % 9 {
            0 | 1 => {
                let size = (1 + next() as usize % 24) * M / 2 + next() as usize % PAGE;
                let align = [1, PAGE, 2 * M][next() as usize % 3];
                let zeroed = next() % 2 == 0;
                if let Alloc::Granted {
                    start,
                    len,
                    pieces,
                    n,
                } = b.alloc(size, align, zeroed, 64 * M)
                {
                    assert!(len >= size && start.is_multiple_of(align.max(PAGE)));
                    if zeroed {
                        for &(s, l, k) in &pieces[..n] {
                            if k == Kind::Dirty {
                                zero[pages(s, l)].fill(true);
                            }
                        }
                        assert!(zero[pages(start, len)].iter().all(|&z| z), "step {step}");
                    }
                    zero[pages(start, len)].fill(false); // the program writes
                    live.push(start);
                }
            }
            2 | 3 if !live.is_empty() => {
                let a = live.swap_remove(next() as usize % live.len());
                b.free(a, step).unwrap();
            }
            4 => {
                let chunk = [M, 8 * M, usize::MAX][next() as usize % 3];
                if let Some((s, l)) = b.scrub_take(chunk) {
                    busy.push((s, l, Work::Scrub));
                }
            }
            5 => {
                if let Some((s, l)) = b.release_take(step, 4 * M) {
                    busy.push((s, l, Work::Release));
                }
            }
            6 if !busy.is_empty() && next() % 16 == 0 => {
                // The work failed (the kernel kept the pages), or a fork
                // left every Busy block to a child without a scrubber.
                if next() % 2 == 0 {
                    let (s, ..) = busy.swap_remove(next() as usize % busy.len());
                    b.busy_failed(s, step);
                } else {
                    b.abandon_busy();
                    busy.clear();
                }
            }
            6 if !busy.is_empty() => {
                let (s, l, work) = busy.swap_remove(next() as usize % busy.len());
                if work == Work::Populate {
                    // Populating zeroes nothing: only pages no one wrote.
                    assert!(zero[pages(s, l)].iter().all(|&z| z), "step {step}");
                }
                zero[pages(s, l)].fill(true);
                let to = if work == Work::Release {
                    Kind::Fresh
                } else {
                    Kind::Clean
                };
                b.busy_done(s, to);
            }
            8 => {
                let chunk = [M, 8 * M][next() as usize % 2];
                if let Some((s, l)) =
                    b.fresh_take(chunk, [0, 4 * M, 64 * M][next() as usize % 3], step)
                {
                    assert!(l <= chunk && s.is_multiple_of(PAGE), "step {step}");
                    busy.push((s, l, Work::Populate));
                }
            }
            7 if !live.is_empty() => {
                let a = live[next() as usize % live.len()];
                let len = b.in_use_len(a).unwrap();
                if next() % 2 == 0 {
                    b.shrink(a, len / 2, step);
                } else if b.grow(a, len + 2 * M, 8 * M) {
                    // The program writes what it grew into.
                    let grown = b.in_use_len(a).unwrap();
                    zero[pages(a, grown)].fill(false);
                }
            }
            _ => {}
        }
        assert!(b.check(), "step {step}: {:?}", b.blocks());
        for blk in b.blocks() {
            if matches!(blk.kind, Kind::Clean | Kind::Fresh) {
                assert!(zero[pages(blk.start, blk.len)].iter().all(|&z| z));
            }
        }
    }
}
