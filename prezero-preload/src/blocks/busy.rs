//! The background work's changes: the blocks the scrubber clears, the memory
//! given back to the kernel and the spare populated are made Busy (no one
//! else touches them while the work runs outside the lock), then become what
//! the work made of them.

use super::{Block, Blocks, Kind, PAGE};

impl Blocks {
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

    /// When the oldest Dirty or Clean block freed at or before `before` was
    /// freed: which lane gives memory back first.
    pub fn oldest_free(&self, before: u64) -> Option<u64> {
        self.list[..self.n]
            .iter()
            .filter(|b| matches!(b.kind, Kind::Dirty | Kind::Clean) && b.since <= before)
            .map(|b| b.since)
            .min()
    }

    /// When the oldest Dirty block was freed: which lane is scrubbed first.
    pub fn oldest_dirty(&self) -> Option<u64> {
        self.list[..self.n]
            .iter()
            .filter(|b| b.kind == Kind::Dirty)
            .map(|b| b.since)
            .min()
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
}
