//! Splitting and merging blocks, and the program's changes made of them: a
//! run taken (split at its ends, made one InUse block), a block freed
//! (merged with neighbours of its kind), shrunk or grown in place.

use super::{Alloc, Block, Blocks, Kind, MAX_RUN, PAGE};

impl Blocks {
    /// Splits block `i` at `at` (inside it, page-aligned): two blocks of its kind.
    pub(super) fn split(&mut self, i: usize, at: usize) -> bool {
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
    pub(super) fn merge(&mut self, mut i: usize) -> usize {
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

    /// Makes `[start, end)` one InUse block from the free blocks from `first`
    /// on (and the range beyond top); what each part was.
    pub(super) fn take(&mut self, first: usize, start: usize, end: usize) -> Alloc {
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
}
