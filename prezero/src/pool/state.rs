//! The pool's bookkeeping: which chunk is in which state, and the transitions
//! between states. Pure data, no system calls and no locking (the pool holds its
//! mutex around every call), so it can be checked exhaustively in tests.
//!
//! Every chunk is in exactly one of these places:
//!
//! | place      | phase     | meaning                                                   |
//! |------------|-----------|-----------------------------------------------------------|
//! | `zeroed`   | Zeroed    | all zero, backed by memory (scrubbed, or prefilled)        |
//! | `released` | Zeroed    | all zero because MADV_DONTNEED dropped its pages (trim)    |
//! | `hot`      | Dirty     | freed, handed out recently enough to be in cache           |
//! | `dirty`    | Dirty     | freed and cold, oldest first: the scrubber's queue         |
//! | (counted)  | Scrubbing | being cleared by a scrubber, outside the lock              |
//! | (counted)  | InUse     | owned by a caller (a `Chunk`, or raw after `into_raw`)     |
//!
//! Invariant (checked by [`State::check`] after every change in debug builds):
//! `zeroed + released + hot + dirty + scrubbing + in_use == slots`, and each
//! slot's phase is the one of the place it is in.
//!
//! NUMA: a chunk with pages records their node (`None` where one node is all
//! there is, or nobody said), and a taker that names its node is given only
//! chunks of that node, or released ones (no pages: they land where the taker
//! touches them); [`State::take_foreign`] is the last resort, a chunk of another
//! node whose pages the caller drops before handing it out.

use std::collections::{HashMap, VecDeque};

/// What a chunk is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(test, derive(Hash))]
pub(crate) enum Phase {
    Zeroed,
    Dirty,
    Scrubbing,
    InUse,
}

/// One chunk's record.
#[derive(Debug)]
#[cfg_attr(test, derive(Clone, PartialEq, Eq, Hash))]
pub(crate) struct Slot {
    pub(crate) addr: usize,
    pub(crate) phase: Phase,
    /// Allocation sequence number when it was last handed out (its "last touch").
    pub(crate) handed_at: u64,
    /// Handed out through `Chunk::into_raw`: only `free_raw` may return it.
    pub(crate) raw: bool,
    /// The NUMA node of its pages (`None`: unknown, or no pages).
    pub(crate) node: Option<u32>,
}

/// Where a chunk handed out by [`State::take_zeroed`] or [`State::take_any`]
/// came from, which decides what the caller must still do to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// Already zero and backed: hand out as is.
    Zeroed,
    /// Zero because trimmed: hand out as is (the kernel faults pages back in).
    Released,
    /// Dirty and recently used: clear with ordinary stores (it is in cache).
    Hot,
    /// Dirty and cold: clear with streaming stores.
    Cold,
    /// Another node's: drop its pages (then it reads zero, and the taker's
    /// touches fault them in on its own node).
    Foreign,
}

/// A transition that is not allowed from the chunk's current phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// No chunk starts at this address.
    Unknown,
    /// The chunk is not handed out (a double free).
    NotInUse,
    /// Raw chunks come back through `free_raw`, others through `Chunk`'s drop.
    WrongOwner,
}

// Copied and compared in the tests, which keep a state per sequence explored.
#[derive(Debug, Default)]
#[cfg_attr(test, derive(Clone, PartialEq, Eq))]
pub(crate) struct State {
    pub(crate) slots: Vec<Slot>,
    by_addr: HashMap<usize, usize>,
    zeroed: Vec<usize>,
    released: Vec<usize>,
    hot: Vec<usize>,
    dirty: VecDeque<usize>,
    scrubbing: usize,
    in_use: usize,
    /// Chunks being mapped outside the lock (counted against capacity).
    pub(crate) growing: usize,
    /// Hand-outs so far: the clock by which hotness is judged.
    handouts: u64,
    /// Between the low and the high watermark the scrubber keeps going once started.
    pub(crate) scrub_active: bool,
    pub(crate) shutdown: bool,
}

/// Counts per place, for stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(test, derive(Hash))]
pub(crate) struct Counts {
    pub(crate) zeroed: usize,
    pub(crate) released: usize,
    pub(crate) hot: usize,
    pub(crate) dirty: usize,
    pub(crate) scrubbing: usize,
    pub(crate) in_use: usize,
    pub(crate) mapped: usize,
    pub(crate) raw: usize,
}

impl State {
    pub(crate) fn counts(&self) -> Counts {
        Counts {
            zeroed: self.zeroed.len(),
            released: self.released.len(),
            hot: self.hot.len(),
            dirty: self.dirty.len(),
            scrubbing: self.scrubbing,
            in_use: self.in_use,
            mapped: self.slots.len(),
            raw: self.slots.iter().filter(|s| s.raw).count(),
        }
    }

    /// Adds a freshly mapped chunk, either handed out at once or kept zeroed
    /// (prefill), its pages on `node` (or where its taker touches them).
    pub(crate) fn add(&mut self, addr: usize, in_use: bool, node: Option<u32>) -> usize {
        let id = self.slots.len();
        let phase = if in_use { Phase::InUse } else { Phase::Zeroed };
        self.slots.push(Slot {
            addr,
            phase,
            handed_at: 0,
            raw: false,
            node,
        });
        self.by_addr.insert(addr, id);
        if in_use {
            self.hand_out(id);
        } else {
            self.zeroed.push(id);
        }
        id
    }

    fn hand_out(&mut self, id: usize) {
        self.handouts += 1;
        let s = &mut self.slots[id];
        s.phase = Phase::InUse;
        s.handed_at = self.handouts;
        s.raw = false;
        self.in_use += 1;
    }

    /// Moves hot chunks handed out more than `hot_chunks` hand-outs ago to the
    /// cold queue: their lines have been evicted by what came since.
    fn age(&mut self, hot_chunks: u64) {
        let now = self.handouts;
        let (keep, cold): (Vec<usize>, Vec<usize>) = self
            .hot
            .iter()
            .partition(|&&id| now - self.slots[id].handed_at < hot_chunks);
        self.hot = keep;
        self.dirty.extend(cold);
    }

    /// A chunk for `alloc_zeroed` on `node` (any with `None`): a hot dirty
    /// chunk (cleared in cache beats a cold zero chunk: memory about
    /// to be touched is best zeroed hot), then a
    /// zeroed one, then a cold dirty one, then a released one. `None`: the
    /// caller must grow the pool, take a foreign chunk, or give up.
    pub(crate) fn take_zeroed(
        &mut self,
        hot_chunks: u64,
        node: Option<u32>,
    ) -> Option<(usize, Source)> {
        self.take(
            hot_chunks,
            [Source::Hot, Source::Zeroed, Source::Cold, Source::Released],
            node,
        )
    }

    /// A chunk for `alloc` (contents not needed): dirty first, so that zeroed
    /// chunks stay for `alloc_zeroed`.
    pub(crate) fn take_any(
        &mut self,
        hot_chunks: u64,
        node: Option<u32>,
    ) -> Option<(usize, Source)> {
        self.take(
            hot_chunks,
            [Source::Hot, Source::Cold, Source::Zeroed, Source::Released],
            node,
        )
    }

    /// For a taker on `node` that found nothing of its own and may not grow:
    /// another node's chunk not in use (cold dirty first, then hot, then
    /// zeroed), handed out as [`Source::Foreign`]: the caller drops its pages.
    pub(crate) fn take_foreign(&mut self, hot_chunks: u64, node: u32) -> Option<(usize, Source)> {
        self.age(hot_chunks);
        let (id, _) = self.take_from([Source::Cold, Source::Hot, Source::Zeroed], |_| true)?;
        self.slots[id].node = Some(node);
        self.hand_out(id);
        Some((id, Source::Foreign))
    }

    /// Hands out the first chunk of `node` (or of none: released ones have no
    /// pages) found in the places of `order`, newest first in each.
    fn take(
        &mut self,
        hot_chunks: u64,
        order: [Source; 4],
        node: Option<u32>,
    ) -> Option<(usize, Source)> {
        self.age(hot_chunks);
        let mine = |s: &Slot| node.is_none() || s.node.is_none() || s.node == node;
        let (id, src) = self.take_from(order, mine)?;
        if node.is_some() {
            self.slots[id].node = node;
        }
        self.hand_out(id);
        Some((id, src))
    }

    /// Takes out of its place the newest chunk `fits` accepts, of the first
    /// place in `order` that has one.
    fn take_from<const N: usize>(
        &mut self,
        order: [Source; N],
        fits: impl Fn(&Slot) -> bool,
    ) -> Option<(usize, Source)> {
        let slots = &self.slots;
        let fits = |&id: &usize| fits(&slots[id]);
        order.into_iter().find_map(|src| {
            let id = match src {
                Source::Hot => self.hot.iter().rposition(fits).map(|i| self.hot.remove(i)),
                Source::Zeroed => self
                    .zeroed
                    .iter()
                    .rposition(fits)
                    .map(|i| self.zeroed.remove(i)),
                // The newest cold chunk: the scrubber works from the oldest end.
                Source::Cold => self
                    .dirty
                    .iter()
                    .rposition(fits)
                    .and_then(|i| self.dirty.remove(i)),
                Source::Released => self
                    .released
                    .iter()
                    .rposition(fits)
                    .map(|i| self.released.remove(i)),
                Source::Foreign => None,
            };
            id.map(|id| (id, src))
        })
    }

    /// The chunk starting at `addr`, if it is one of ours.
    pub(crate) fn id_of(&self, addr: usize) -> Option<usize> {
        self.by_addr.get(&addr).copied()
    }

    /// Marks an in-use chunk as owned through a raw pointer.
    pub(crate) fn make_raw(&mut self, id: usize) {
        debug_assert_eq!(self.slots[id].phase, Phase::InUse);
        self.slots[id].raw = true;
    }

    /// Returns a chunk to the pool as dirty; `raw` says which door it came through.
    pub(crate) fn free(&mut self, id: usize, raw: bool, hot_chunks: u64) -> Result<(), Refused> {
        let slot = self.slots.get_mut(id).ok_or(Refused::Unknown)?;
        if slot.phase != Phase::InUse {
            return Err(Refused::NotInUse);
        }
        if slot.raw != raw {
            return Err(Refused::WrongOwner);
        }
        slot.phase = Phase::Dirty;
        slot.raw = false;
        self.in_use -= 1;
        if self.handouts - slot.handed_at < hot_chunks {
            self.hot.push(id);
        } else {
            self.dirty.push_back(id);
        }
        Ok(())
    }

    /// The oldest cold dirty chunk, now owned by a scrubber.
    pub(crate) fn scrub_start(&mut self) -> Option<usize> {
        let id = self.dirty.pop_front()?;
        self.slots[id].phase = Phase::Scrubbing;
        self.scrubbing += 1;
        Some(id)
    }

    /// A scrubber is done with `id`: zero if `cleared`, else (stopped early) dirty again.
    pub(crate) fn scrub_finish(&mut self, id: usize, cleared: bool) {
        debug_assert_eq!(self.slots[id].phase, Phase::Scrubbing);
        self.scrubbing -= 1;
        if cleared {
            self.slots[id].phase = Phase::Zeroed;
            self.zeroed.push(id);
        } else {
            self.slots[id].phase = Phase::Dirty;
            self.dirty.push_front(id);
        }
    }

    /// A backed chunk not in use to give back to the kernel: cold dirty first,
    /// then hot dirty, then zeroed (oldest first). The caller drops its pages and
    /// then calls [`State::released`].
    pub(crate) fn trim_victim(&mut self) -> Option<usize> {
        let id = if let Some(id) = self.dirty.pop_front() {
            id
        } else if !self.hot.is_empty() {
            self.hot.remove(0)
        } else if !self.zeroed.is_empty() {
            self.zeroed.remove(0)
        } else {
            return None;
        };
        // In transit: counted as scrubbing until `released` (the lock is held throughout).
        self.slots[id].phase = Phase::Scrubbing;
        self.scrubbing += 1;
        Some(id)
    }

    /// A trim victim whose pages are gone: it now reads zero.
    pub(crate) fn released(&mut self, id: usize) {
        debug_assert_eq!(self.slots[id].phase, Phase::Scrubbing);
        self.scrubbing -= 1;
        self.slots[id].phase = Phase::Zeroed;
        // No pages: they land where the next taker touches them.
        self.slots[id].node = None;
        self.released.push(id);
    }

    /// Whether a scrubber has work, between watermarks (as
    /// Linux's "Prezeroing V2" scrubd): start when fewer
    /// than `low` chunks are zeroed, keep going until `high` are or nothing is dirty.
    pub(crate) fn wants_scrub(&mut self, low: usize, high: usize) -> bool {
        let zeroed = self.zeroed.len();
        if self.dirty.is_empty() || zeroed >= high {
            self.scrub_active = false;
        } else if zeroed < low {
            self.scrub_active = true;
        }
        self.scrub_active && !self.dirty.is_empty()
    }

    /// Whether another chunk may be mapped under a capacity of `max_chunks`
    /// (the ones being mapped count).
    pub(crate) fn has_room(&self, max_chunks: usize) -> bool {
        self.slots.len() + self.growing < max_chunks
    }

    /// Whether a taker, of any node, would find nothing: no chunk out of use
    /// (zeroed, released, hot or dirty) and no room to map one.
    pub(crate) fn exhausted(&self, max_chunks: usize) -> bool {
        self.zeroed.is_empty()
            && self.released.is_empty()
            && self.hot.is_empty()
            && self.dirty.is_empty()
            && !self.has_room(max_chunks)
    }

    /// Bytes backed by memory: everything but the released chunks.
    pub(crate) fn backed_chunks(&self) -> usize {
        self.slots.len() - self.released.len()
    }

    /// The invariant of the module docs.
    pub(crate) fn check(&self) -> bool {
        let c = self.counts();
        let sum = c.zeroed + c.released + c.hot + c.dirty + c.scrubbing + c.in_use;
        let all_in = |ids: &[usize], p: Phase| ids.iter().all(|&i| self.slots[i].phase == p);
        let (front, back) = self.dirty.as_slices();
        sum == c.mapped
            && all_in(&self.zeroed, Phase::Zeroed)
            && all_in(&self.released, Phase::Zeroed)
            && all_in(&self.hot, Phase::Dirty)
            && all_in(front, Phase::Dirty)
            && all_in(back, Phase::Dirty)
            && self
                .slots
                .iter()
                .filter(|s| s.phase == Phase::InUse)
                .count()
                == c.in_use
            && self
                .slots
                .iter()
                .filter(|s| s.phase == Phase::Scrubbing)
                .count()
                == c.scrubbing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event the pool can apply to its state.
    #[derive(Debug, Clone, Copy)]
    enum Event {
        Grow,
        TakeZeroed,
        TakeAny,
        MakeRaw(usize),
        Free(usize),
        FreeRaw(usize),
        ScrubStart,
        ScrubFinish(usize, bool),
        Trim,
        /// A prefilled chunk with pages on this node.
        GrowOn(u32),
        TakeZeroedOn(u32),
        TakeForeign(u32),
    }

    fn events(n: usize) -> Vec<Event> {
        let mut v = vec![
            Event::Grow,
            Event::TakeZeroed,
            Event::TakeAny,
            Event::ScrubStart,
            Event::Trim,
        ];
        for i in 0..n {
            v.extend([
                Event::MakeRaw(i),
                Event::Free(i),
                Event::FreeRaw(i),
                Event::ScrubFinish(i, true),
                Event::ScrubFinish(i, false),
            ]);
        }
        v
    }

    /// Applies `e` the way the pool would, refusing what the pool refuses;
    /// returns false if the event does not apply in this state.
    fn apply(s: &mut State, e: Event, hot: u64, zero_known: &mut Vec<bool>) -> bool {
        match e {
            Event::Grow => {
                if s.slots.len() >= 3 {
                    return false;
                }
                s.add(0x1000 * (s.slots.len() + 1), false, None);
                zero_known.push(true);
            }
            Event::TakeZeroed => match s.take_zeroed(hot, None) {
                // Whatever the source, the pool makes it zero before handing it out
                // (Hot/Cold are cleared); Zeroed/Released must already be zero.
                Some((id, src)) => {
                    if matches!(src, Source::Zeroed | Source::Released) {
                        assert!(zero_known[id], "handed out a non-zero chunk as zero");
                    }
                    zero_known[id] = false; // the caller writes to it
                }
                None => return false,
            },
            Event::TakeAny => match s.take_any(hot, None) {
                Some((id, _)) => zero_known[id] = false,
                None => return false,
            },
            Event::MakeRaw(id) => {
                if s.slots
                    .get(id)
                    .is_none_or(|x| x.phase != Phase::InUse || x.raw)
                {
                    return false;
                }
                s.make_raw(id);
            }
            Event::Free(id) | Event::FreeRaw(id) => {
                let raw = matches!(e, Event::FreeRaw(_));
                let expect_ok = s
                    .slots
                    .get(id)
                    .is_some_and(|x| x.phase == Phase::InUse && x.raw == raw);
                let r = s.free(id, raw, hot);
                assert_eq!(r.is_ok(), expect_ok, "{e:?}: {r:?}");
                if !expect_ok {
                    return false;
                }
            }
            Event::ScrubStart => {
                if s.scrub_start().is_none() {
                    return false;
                }
            }
            Event::ScrubFinish(id, ok) => {
                if s.slots.get(id).is_none_or(|x| x.phase != Phase::Scrubbing) {
                    return false;
                }
                s.scrub_finish(id, ok);
                if ok {
                    zero_known[id] = true;
                }
            }
            Event::Trim => match s.trim_victim() {
                Some(id) => {
                    s.released(id);
                    zero_known[id] = true;
                }
                None => return false,
            },
            Event::GrowOn(n) => {
                if s.slots.len() >= 3 {
                    return false;
                }
                s.add(0x1000 * (s.slots.len() + 1), false, Some(n));
                zero_known.push(true);
            }
            Event::TakeZeroedOn(n) => {
                let before: Vec<Option<u32>> = s.slots.iter().map(|x| x.node).collect();
                let Some((id, src)) = s.take_zeroed(hot, Some(n)) else {
                    return false;
                };
                // Pages of another node never go to this taker.
                assert!(
                    before[id].is_none_or(|b| b == n),
                    "a chunk of node {:?} went to node {n}",
                    before[id]
                );
                if matches!(src, Source::Zeroed | Source::Released) {
                    assert!(zero_known[id], "handed out a non-zero chunk as zero");
                }
                assert_eq!(s.slots[id].node, Some(n));
                zero_known[id] = false;
            }
            Event::TakeForeign(n) => match s.take_foreign(hot, n) {
                // The pool drops its pages: zero, then the caller writes.
                Some((id, Source::Foreign)) => zero_known[id] = false,
                Some(other) => panic!("a foreign take gave {other:?}"),
                None => return false,
            },
        }
        true
    }

    fn explore(
        s: &mut State,
        depth: usize,
        hot: u64,
        zero: &[bool],
        evs: &[Event],
        visited: &mut usize,
    ) {
        assert!(s.check(), "invariant broken: {:?}", s.counts());
        if depth == 0 {
            return;
        }
        for &e in evs {
            let mut copy = s.clone();
            let mut z = zero.to_vec();
            if apply(&mut copy, e, hot, &mut z) {
                *visited += 1;
                explore(&mut copy, depth - 1, hot, &z, evs, visited);
            }
        }
    }

    /// How deep the explorations go, and how many sequences that must reach:
    /// Miri (scripts/miri.sh) is some thousand times slower than a native run,
    /// so it explores shorter sequences.
    const DEPTH: usize = if cfg!(miri) { 4 } else { 10 };
    const AT_LEAST: usize = if cfg!(miri) { 50 } else { 500_000 };
    const NODES_DEPTH: usize = if cfg!(miri) { 3 } else { 8 };
    const NODES_AT_LEAST: usize = if cfg!(miri) { 40 } else { 100_000 };

    #[test]
    fn every_sequence_of_transitions_keeps_the_invariant() {
        let evs = events(3);
        for hot in [0, 1, 2] {
            let mut visited = 0;
            explore(&mut State::default(), DEPTH, hot, &[], &evs, &mut visited);
            eprintln!("hot window {hot}: {visited} sequences of up to {DEPTH} transitions");
            assert!(visited > AT_LEAST, "explored only {visited} sequences");
        }
    }

    /// With nodes: a taker naming its node gets chunks of that node or none
    /// (released ones), and a foreign take only when asked; checked in
    /// `apply` at every step, over every sequence of up to 8 transitions.
    #[test]
    fn every_sequence_with_nodes_keeps_chunks_on_their_node() {
        let mut evs = vec![
            Event::GrowOn(0),
            Event::GrowOn(1),
            Event::TakeZeroedOn(0),
            Event::TakeZeroedOn(1),
            Event::TakeForeign(0),
            Event::ScrubStart,
            Event::Trim,
        ];
        for i in 0..3 {
            evs.extend([Event::Free(i), Event::ScrubFinish(i, true)]);
        }
        let mut visited = 0;
        explore(
            &mut State::default(),
            NODES_DEPTH,
            1,
            &[],
            &evs,
            &mut visited,
        );
        eprintln!("{visited} sequences of up to {NODES_DEPTH} transitions with nodes");
        assert!(
            visited > NODES_AT_LEAST,
            "explored only {visited} sequences"
        );
    }

    #[test]
    fn double_and_foreign_frees_are_refused() {
        let mut s = State::default();
        let a = s.add(0x1000, true, None);
        assert_eq!(s.free(a, false, 1), Ok(()));
        assert_eq!(s.free(a, false, 1), Err(Refused::NotInUse));
        assert_eq!(s.free(7, false, 1), Err(Refused::Unknown));
        let (b, _) = s.take_any(1, None).unwrap();
        assert_eq!(s.free(b, true, 1), Err(Refused::WrongOwner));
        s.make_raw(b);
        assert_eq!(s.free(b, false, 1), Err(Refused::WrongOwner));
        assert_eq!(s.free(b, true, 1), Ok(()));
        assert!(s.check());
    }

    #[test]
    fn hot_reuse_beats_zeroed_and_ages_out() {
        let mut s = State::default();
        let a = s.add(0x1000, false, None);
        let b = s.add(0x2000, true, None);
        s.free(b, false, 1).unwrap();
        // b was just used: clearing it in cache beats the cold zeroed chunk a.
        assert_eq!(s.take_zeroed(1, None), Some((b, Source::Hot)));
        assert_eq!(s.take_zeroed(1, None), Some((a, Source::Zeroed)));
        // a was handed out after b: b is no longer hot when it comes back.
        s.free(b, false, 1).unwrap();
        assert_eq!((s.counts().hot, s.counts().dirty), (0, 1));
        assert_eq!(s.scrub_start(), Some(b));
        assert!(s.check());
    }

    #[test]
    fn watermarks_have_hysteresis() {
        let mut s = State::default();
        for i in 0..4 {
            s.add(0x1000 * (i + 1), true, None);
        }
        for i in 0..4 {
            s.free(i, false, 0).unwrap();
        }
        // low 1, high 3: nothing zeroed, so scrubbing starts...
        assert!(s.wants_scrub(1, 3));
        let id = s.scrub_start().unwrap();
        s.scrub_finish(id, true);
        // ...and goes on above low until high.
        assert!(s.wants_scrub(1, 3));
        for _ in 0..2 {
            let id = s.scrub_start().unwrap();
            s.scrub_finish(id, true);
        }
        assert!(!s.wants_scrub(1, 3));
        assert!(s.check());
    }
}
