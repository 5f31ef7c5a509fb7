//! The large-block cache's bookkeeping: which part of the reserved range is
//! which block, and in which state. Pure data, no system calls and no heap
//! (it runs inside `malloc`): the block list lives in a slice the caller
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
//! A request takes a *run* of neighbouring free blocks, whatever their kinds,
//! and pays for each kind what it costs: a Clean byte nothing, a Dirty byte a
//! store if the request wants zeroes, a Fresh byte a page fault (the kernel
//! zeroes it: several times a store). So a 512 MiB `calloc` takes a block the
//! scrubber has half done, and clears the other half itself.

/// Blocks are multiples of this, and start on it.
pub const PAGE: usize = 4096;

/// Most blocks one request may span.
const MAX_RUN: usize = 16;

/// Relative cost of a byte, by kind and by whether the request wants zeroes:
/// in units of an ordinary store (a Fresh byte is a page fault and the
/// kernel's zeroing, ~4x; handing out a Clean byte to `malloc` wastes the
/// scrubber's work).
fn cost(kind: Kind, zeroed: bool) -> usize {
    match (kind, zeroed) {
        (Kind::Clean, true) => 0,
        (Kind::Clean, false) => 1,
        (Kind::Dirty, true) => 4,
        (Kind::Dirty, false) => 0,
        (Kind::Fresh, _) => 16,
        (Kind::Busy, _) => 2,
        (Kind::InUse, _) => usize::MAX,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    InUse,
    Dirty,
    Clean,
    Fresh,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub start: usize,
    pub len: usize,
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
    pub in_use: usize,
    pub dirty: usize,
    pub clean: usize,
    pub fresh: usize,
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

pub struct Blocks {
    base: usize,
    limit: usize,
    top: usize,
    list: &'static mut [Block],
    n: usize,
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

    pub fn top(&self) -> usize {
        self.top
    }

    #[cfg(test)]
    pub fn blocks(&self) -> &[Block] {
        &self.list[..self.n]
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

    /// Splits block `i` at `at` (inside it, page-aligned): two blocks of its kind.
    fn split(&mut self, i: usize, at: usize) -> bool {
        let b = self.list[i];
        debug_assert!(at > b.start && at < b.start + b.len && at.is_multiple_of(PAGE));
        let tail = Block {
            start: at,
            len: b.start + b.len - at,
            ..b
        };
        if !self.insert(i + 1, tail) {
            return false;
        }
        self.list[i].len = at - b.start;
        true
    }

    /// Merges block `i` with neighbours of its kind; its new index.
    fn merge(&mut self, mut i: usize) -> usize {
        let k = self.list[i].kind;
        if !k.merges() {
            return i;
        }
        if i + 1 < self.n && self.list[i + 1].kind == k {
            self.list[i].len += self.list[i + 1].len;
            self.list[i].since = self.list[i].since.max(self.list[i + 1].since);
            self.remove(i + 1);
        }
        if i > 0 && self.list[i - 1].kind == k {
            self.list[i - 1].len += self.list[i].len;
            self.list[i - 1].since = self.list[i - 1].since.max(self.list[i].since);
            self.remove(i);
            i -= 1;
        }
        i
    }

    /// `size` bytes aligned to `align` (a power of two), zero if `zeroed`, from
    /// the run of free blocks that costs least (see [`cost`]), or from the
    /// untouched range beyond `top`. `room`: bytes beyond `top` the caller
    /// lets it take (the cap and the memory available).
    pub fn alloc(&mut self, size: usize, align: usize, zeroed: bool, room: usize) -> Alloc {
        self.alloc_run(size, align, zeroed, room, true)
    }

    /// [`Blocks::alloc`] around the Busy blocks: never `Wait`. For a request
    /// that has waited once already: the scrubber runs at `SCHED_IDLE`, and
    /// while the program's own threads keep every core busy one step of it
    /// can take most of a second.
    pub fn alloc_around_busy(
        &mut self,
        size: usize,
        align: usize,
        zeroed: bool,
        room: usize,
    ) -> Alloc {
        self.alloc_run(size, align, zeroed, room, false)
    }

    fn alloc_run(
        &mut self,
        size: usize,
        align: usize,
        zeroed: bool,
        room: usize,
        through_busy: bool,
    ) -> Alloc {
        let usable = |k: Kind| k.free() && (through_busy || k != Kind::Busy);
        let Some(size) = size.checked_next_multiple_of(PAGE) else {
            return Alloc::Full;
        };
        let align = align.max(PAGE);
        if size == 0 || !align.is_power_of_two() {
            return Alloc::Full;
        }
        // (cost, leftover, first block, start)
        let mut best: Option<(usize, usize, usize, usize)> = None;
        for i in 0..self.n {
            if !usable(self.list[i].kind) {
                continue;
            }
            let Some(start) = self.list[i].start.checked_next_multiple_of(align) else {
                continue;
            };
            let Some(end) = start.checked_add(size) else {
                continue;
            };
            let (mut c, mut j, mut blocks) = (0usize, i, 0);
            let mut reach = self.list[i].start;
            while j < self.n && usable(self.list[j].kind) && reach < end && blocks < MAX_RUN {
                let b = self.list[j];
                let lo = b.start.max(start);
                let hi = (b.start + b.len).min(end);
                if hi > lo {
                    c = c.saturating_add((hi - lo) / PAGE * cost(b.kind, zeroed));
                }
                reach = b.start + b.len;
                j += 1;
                blocks += 1;
            }
            if reach < end {
                // Past the last block, the run may go on beyond top.
                let open = j == self.n && reach == self.top && end - self.top <= room;
                if !open || end > self.limit {
                    continue;
                }
                c = c.saturating_add((end - self.top) / PAGE * cost(Kind::Fresh, zeroed));
            }
            let leftover = reach.saturating_sub(end);
            if best.is_none_or(|(bc, bl, _, _)| (c, leftover) < (bc, bl)) {
                best = Some((c, leftover, i, start));
            }
        }
        // A run of its own beyond top.
        if let Some(start) = self.top.checked_next_multiple_of(align) {
            if let Some(end) = start.checked_add(size) {
                if end <= self.limit && end - self.top <= room {
                    let c = (end - self.top) / PAGE * cost(Kind::Fresh, zeroed);
                    if best.is_none_or(|(bc, bl, _, _)| (c, 0) < (bc, bl)) {
                        best = Some((c, 0, self.n, start));
                    }
                }
            }
        }
        let Some((_, _, first, start)) = best else {
            return Alloc::Full;
        };
        let end = start + size;
        // Busy blocks in the way: they are the scrubber's until it is done.
        let busy = self.list[first..self.n]
            .iter()
            .take_while(|b| b.start < end)
            .any(|b| b.kind == Kind::Busy);
        if busy {
            return Alloc::Wait;
        }
        self.take(first, start, end)
    }

    /// Makes `[start, end)` one InUse block from the free blocks from `first`
    /// on (and the range beyond top); what each part was.
    fn take(&mut self, first: usize, start: usize, end: usize) -> Alloc {
        // Room for the worst case: a block beyond top and two splits.
        if self.n + 3 > self.list.len() {
            return Alloc::Full;
        }
        if end > self.top {
            let fresh = Block {
                start: self.top,
                len: end.next_multiple_of(PAGE) - self.top,
                kind: Kind::Fresh,
                since: 0,
            };
            let at = self.n;
            self.insert(at, fresh);
            self.bytes.fresh += fresh.len;
            self.top = end;
            self.merge(at);
        }
        // The block holding `start`, split so a block starts there; then end.
        let mut i = first.min(self.n - 1);
        while self.list[i].start + self.list[i].len <= start {
            i += 1;
        }
        if self.list[i].start < start {
            self.split(i, start);
            i += 1;
        }
        let mut j = i;
        while self.list[j].start + self.list[j].len < end {
            j += 1;
        }
        if self.list[j].start + self.list[j].len > end {
            self.split(j, end);
        }
        let mut pieces = [(0, 0, Kind::InUse); MAX_RUN + 1];
        let n = j - i + 1;
        for (k, b) in self.list[i..=j].iter().enumerate() {
            pieces[k] = (b.start, b.len, b.kind);
        }
        for k in i..=j {
            self.set_kind(k, Kind::InUse);
        }
        self.list[i].len = end - start;
        for _ in i..j {
            self.remove(i + 1);
        }
        Alloc::Granted {
            start,
            len: end - start,
            pieces,
            n,
        }
    }

    /// Takes back the block handed out at `start`: Dirty, freed at `now`.
    /// `None` if no block was handed out there (a foreign or double free).
    pub fn free(&mut self, start: usize, now: u64) -> Option<usize> {
        self.free_as(start, Kind::Dirty, now)
    }

    /// Like [`Blocks::free`], for a block whose pages were moved away (mremap)
    /// and replaced by untouched ones: Fresh.
    pub fn free_fresh(&mut self, start: usize) -> Option<usize> {
        self.free_as(start, Kind::Fresh, 0)
    }

    /// Like [`Blocks::free`], for a block the caller made zero (populated by
    /// the kernel): Clean.
    pub fn free_clean(&mut self, start: usize, now: u64) -> Option<usize> {
        self.free_as(start, Kind::Clean, now)
    }

    fn free_as(&mut self, start: usize, kind: Kind, now: u64) -> Option<usize> {
        let i = self.find(start)?;
        if self.list[i].kind != Kind::InUse {
            return None;
        }
        let len = self.list[i].len;
        self.set_kind(i, kind);
        self.list[i].since = now;
        self.merge(i);
        Some(len)
    }

    /// Shrinks the block at `start` to `len` (page-rounded); the tail is Dirty.
    pub fn shrink(&mut self, start: usize, len: usize, now: u64) -> bool {
        let Some(i) = self.find(start) else {
            return false;
        };
        let len = len.next_multiple_of(PAGE).max(PAGE);
        let b = self.list[i];
        if b.kind != Kind::InUse || len > b.len {
            return false;
        }
        if len == b.len {
            return true;
        }
        if !self.split(i, start + len) {
            return false;
        }
        self.set_kind(i + 1, Kind::Dirty);
        self.list[i + 1].since = now;
        self.merge(i + 1);
        true
    }

    /// Grows the block at `start` to `len` in place, from the free blocks after
    /// it (no Busy one) or the range beyond top within `room`. Its contents
    /// stay; the new part is whatever it was (realloc promises nothing of it).
    pub fn grow(&mut self, start: usize, len: usize, room: usize) -> bool {
        let Some(i) = self.find(start) else {
            return false;
        };
        let Some(len) = len.checked_next_multiple_of(PAGE) else {
            return false;
        };
        let b = self.list[i];
        if b.kind != Kind::InUse || len <= b.len {
            return b.kind == Kind::InUse;
        }
        let Some(end) = start.checked_add(len) else {
            return false;
        };
        let mut j = i + 1;
        let mut reach = b.start + b.len;
        while j < self.n && reach < end && self.list[j].kind.merges() && j - i < MAX_RUN {
            reach = self.list[j].start + self.list[j].len;
            j += 1;
        }
        if reach < end {
            let open = j == self.n && reach == self.top;
            if !open || end > self.limit || end - self.top > room {
                return false;
            }
        }
        if self.n + 3 > self.list.len() {
            return false;
        }
        // Release the block, take the run from it: its own bytes come back InUse.
        self.set_kind(i, Kind::Dirty);
        let taken = matches!(self.take(i, start, end), Alloc::Granted { .. });
        debug_assert!(taken, "room was checked");
        taken
    }

    /// For the scrubber: the oldest Dirty block's first `chunk` bytes (at
    /// most), now Busy.
    pub fn scrub_take(&mut self, chunk: usize) -> Option<(usize, usize)> {
        let i = (0..self.n)
            .filter(|&i| self.list[i].kind == Kind::Dirty)
            .min_by_key(|&i| self.list[i].since)?;
        self.busy_prefix(i, chunk)
    }

    /// For giving memory back: the oldest Dirty or Clean block freed at or
    /// before `before`, its first `chunk` bytes, now Busy.
    pub fn release_take(&mut self, before: u64, chunk: usize) -> Option<(usize, usize)> {
        let i = (0..self.n)
            .filter(|&i| {
                matches!(self.list[i].kind, Kind::Dirty | Kind::Clean)
                    && self.list[i].since <= before
            })
            .min_by_key(|&i| self.list[i].since)?;
        self.busy_prefix(i, chunk)
    }

    /// The longest Clean block: what one zeroed request can take at no cost.
    pub fn largest_clean(&self) -> usize {
        self.list[..self.n]
            .iter()
            .filter(|b| b.kind == Kind::Clean)
            .map(|b| b.len)
            .max()
            .unwrap_or(0)
    }

    /// Whether the last block is Fresh: a spare grows into it, not beyond top.
    pub fn ends_fresh(&self) -> bool {
        self.n > 0 && self.list[self.n - 1].kind == Kind::Fresh
    }

    /// For populating a spare: at most `chunk` bytes without pages at the
    /// end of the range in use, now Busy and dated `now`: the head of a
    /// Fresh last block, else `room` bytes at most beyond top. At the end,
    /// so the pieces join one run (and the run the last block is, if Clean);
    /// Fresh holes further down stay for requests of their size.
    pub fn fresh_take(&mut self, chunk: usize, room: usize, now: u64) -> Option<(usize, usize)> {
        let chunk = chunk / PAGE * PAGE;
        if chunk == 0 {
            return None;
        }
        let (i, start, len) = if self.ends_fresh() {
            let last = self.n - 1;
            let (s, l) = self.busy_prefix(last, chunk)?;
            (last, s, l)
        } else {
            let len = chunk.min(room / PAGE * PAGE).min(self.limit - self.top);
            if len == 0 || self.n == self.list.len() {
                return None;
            }
            let (at, start) = (self.n, self.top);
            let busy = Block {
                start,
                len,
                kind: Kind::Busy,
                since: now,
            };
            self.insert(at, busy);
            self.bytes.busy += len;
            self.top += len;
            (at, start, len)
        };
        self.list[i].since = now;
        Some((start, len))
    }

    fn busy_prefix(&mut self, i: usize, chunk: usize) -> Option<(usize, usize)> {
        let chunk = (chunk / PAGE * PAGE).max(PAGE);
        let b = self.list[i];
        if b.len > chunk && !self.split(i, b.start + chunk) {
            return None;
        }
        self.set_kind(i, Kind::Busy);
        Some((b.start, self.list[i].len))
    }

    /// A Busy block is done: Clean (scrubbed), Fresh (given back) or Dirty
    /// (the work could not be done).
    pub fn busy_done(&mut self, start: usize, to: Kind) {
        let Some(i) = self.find(start) else {
            return;
        };
        if self.list[i].kind == Kind::Busy {
            self.set_kind(i, to);
            self.merge(i);
        }
    }

    /// A Busy block whose work failed (memory the kernel would not take
    /// back): Dirty, dated `now`, so it is not taken again as idle at once.
    pub fn busy_failed(&mut self, start: usize, now: u64) {
        let Some(i) = self.find(start) else {
            return;
        };
        if self.list[i].kind == Kind::Busy {
            self.set_kind(i, Kind::Dirty);
            self.list[i].since = now;
            self.merge(i);
        }
    }

    /// After a fork the child has no scrubber: what the parent's was doing is
    /// Dirty again (half done, for all the child knows).
    pub fn abandon_busy(&mut self) {
        let mut i = 0;
        while i < self.n {
            if self.list[i].kind == Kind::Busy {
                self.set_kind(i, Kind::Dirty);
                i = self.merge(i);
            }
            i += 1;
        }
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

#[cfg(test)]
mod tests {
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
        let len = 256 * M;
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
        for step in 0..200_000u64 {
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
}
