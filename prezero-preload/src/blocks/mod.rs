//! The large-block cache's bookkeeping: which part of the reserved range is
//! which block, and in which state. Pure data, no system calls and no heap
//! (the crate's no-malloc contract: `lib.rs`): the block list lives in a slice the caller
//! provides, kept sorted by address.
//!
//! The blocks tile `[base, top)` exactly: every byte of it is in one block.
//! Beyond `top`, up to `limit`, the range is reserved and untouched.
//!
//! | kind  | meaning                                                      |
//! |-------|--------------------------------------------------------------|
//! | InUse | handed out                                                   |
//! | Dirty | free, pages present, contents unknown                        |
//! | Clean | free, pages present, all zero (scrubbed or prefilled)        |
//! | Fresh | free, no pages present, all zero (never touched, given back) |
//! | Busy  | free, being scrubbed or given back outside the lock          |
//!
//! Invariant ([`Blocks::check`]): the blocks are sorted, non-empty, page
//! multiples and tile `[base, top)`; no two neighbours are both Dirty, both
//! Clean or both Fresh (they are merged); the byte counters match the list.
//!
//! This file holds the model (the kinds, the list, the counters, the
//! invariant); the changes to it live beside it:
//!
//! * `run.rs`: which run of blocks a request takes (the cost of each kind);
//! * `split.rs`: splitting and merging, and the program's changes (a run
//!   taken, a block freed, shrunk or grown);
//! * `busy.rs`: the background work's changes (blocks made Busy to scrub,
//!   give back or populate, and what they are after).

/// Blocks are multiples of this, and start on it.
pub const PAGE: usize = 4096;

/// Most blocks one request may span.
const MAX_RUN: usize = 16;

mod busy;
mod run;
mod split;
#[cfg(test)]
mod tests;

/// What a block is (the table above).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(test, derive(Hash))]
pub enum Kind {
    /// Handed out.
    InUse,
    /// Free, pages present, contents unknown.
    Dirty,
    /// Free, pages present, all zero.
    Clean,
    /// Free, no pages present, all zero.
    Fresh,
    /// Free, being scrubbed or given back outside the lock.
    Busy,
}

impl Kind {
    fn free(self) -> bool {
        self != Kind::InUse
    }
    /// Neighbours of these kinds merge.
    fn merges(self) -> bool {
        matches!(self, Kind::Dirty | Kind::Clean | Kind::Fresh)
    }
}

/// One block of the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(test, derive(Hash))]
pub struct Block {
    /// Its address.
    pub start: usize,
    /// Its length (a page multiple).
    pub len: usize,
    /// What it is.
    pub kind: Kind,
    /// When it was freed (the caller's clock): the scrubber takes the oldest,
    /// and idle memory goes back to the kernel.
    pub since: u64,
}

const EMPTY: Block = Block {
    start: 0,
    len: 0,
    kind: Kind::Fresh,
    since: 0,
};

/// A part of a grant and the kind it was: the caller clears the Dirty parts
/// of a zeroed request.
pub type Piece = (usize, usize, Kind);

/// What [`Blocks::alloc`] gives.
// Returned by value once per large request; boxing would allocate inside malloc.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alloc {
    /// `[start, start + len)` is the caller's; `pieces[..n]` say what it was.
    Granted {
        start: usize,
        len: usize,
        pieces: [Piece; MAX_RUN + 1],
        n: usize,
    },
    /// The best place is being scrubbed: wait for the scrubber, then ask again.
    Wait,
    /// No room (the range, the block list or the cap): use the next allocator.
    Full,
}

/// Bytes per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bytes {
    /// In InUse blocks.
    pub in_use: usize,
    /// In Dirty blocks.
    pub dirty: usize,
    /// In Clean blocks.
    pub clean: usize,
    /// In Fresh blocks.
    pub fresh: usize,
    /// In Busy blocks.
    pub busy: usize,
}

impl Bytes {
    fn of(&mut self, k: Kind) -> &mut usize {
        match k {
            Kind::InUse => &mut self.in_use,
            Kind::Dirty => &mut self.dirty,
            Kind::Clean => &mut self.clean,
            Kind::Fresh => &mut self.fresh,
            Kind::Busy => &mut self.busy,
        }
    }

    /// Free bytes with pages behind them: what the cap bounds.
    pub fn held(&self) -> usize {
        self.dirty + self.clean + self.busy
    }
}

/// A lane's blocks: the list that tiles `[base, top)`, and its counters.
pub struct Blocks {
    base: usize,
    limit: usize,
    top: usize,
    list: &'static mut [Block],
    n: usize,
    /// The bytes of each kind (kept by every change).
    pub bytes: Bytes,
}

impl Blocks {
    /// The range `[base, limit)` (page-aligned), with room for `list.len()` blocks.
    pub fn new(base: usize, limit: usize, list: &'static mut [Block]) -> Blocks {
        debug_assert!(base.is_multiple_of(PAGE) && limit.is_multiple_of(PAGE) && base < limit);
        Blocks {
            base,
            limit,
            top: base,
            list,
            n: 0,
            bytes: Bytes::default(),
        }
    }

    /// The end of the blocks: beyond it the range is untouched.
    pub fn top(&self) -> usize {
        self.top
    }

    /// The end of the range.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The list, in address order.
    #[cfg(test)]
    pub fn blocks(&self) -> &[Block] {
        &self.list[..self.n]
    }

    /// Blocks as `blocks` and `top` say, in `list`: the cache's interleaving
    /// model keeps a copy of them per state, and works on them in one list.
    #[cfg(test)]
    pub fn restore(
        base: usize,
        limit: usize,
        top: usize,
        blocks: &[Block],
        list: &'static mut [Block],
    ) -> Blocks {
        let mut b = Blocks::new(base, limit, list);
        b.list[..blocks.len()].copy_from_slice(blocks);
        b.list[blocks.len()..].fill(EMPTY);
        b.n = blocks.len();
        b.top = top;
        for blk in blocks {
            *b.bytes.of(blk.kind) += blk.len;
        }
        b
    }

    /// The list back, for [`Blocks::restore`].
    #[cfg(test)]
    pub fn into_list(self) -> &'static mut [Block] {
        self.list
    }

    /// The index of the block starting at `start`.
    fn find(&self, start: usize) -> Option<usize> {
        self.list[..self.n]
            .binary_search_by_key(&start, |b| b.start)
            .ok()
    }

    /// The block handed out at `start`, if any: its length.
    pub fn in_use_len(&self, start: usize) -> Option<usize> {
        let i = self.find(start)?;
        (self.list[i].kind == Kind::InUse).then_some(self.list[i].len)
    }

    fn insert(&mut self, i: usize, b: Block) -> bool {
        if self.n == self.list.len() {
            return false;
        }
        self.list.copy_within(i..self.n, i + 1);
        self.list[i] = b;
        self.n += 1;
        true
    }

    fn remove(&mut self, i: usize) {
        self.list.copy_within(i + 1..self.n, i);
        self.n -= 1;
        self.list[self.n] = EMPTY;
    }

    /// Changes block `i`'s kind, keeping the counters.
    fn set_kind(&mut self, i: usize, k: Kind) {
        let b = &mut self.list[i];
        *self.bytes.of(b.kind) -= b.len;
        *self.bytes.of(k) += b.len;
        b.kind = k;
    }

    /// The invariant of the module docs.
    pub fn check(&self) -> bool {
        let mut bytes = Bytes::default();
        let mut at = self.base;
        for (k, b) in self.list[..self.n].iter().enumerate() {
            if b.start != at || b.len == 0 || !b.len.is_multiple_of(PAGE) {
                return false;
            }
            if k > 0 && b.kind.merges() && self.list[k - 1].kind == b.kind {
                return false;
            }
            *bytes.of(b.kind) += b.len;
            at += b.len;
        }
        at == self.top && self.top <= self.limit && bytes == self.bytes
    }
}
