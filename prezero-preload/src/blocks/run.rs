//! Which run of free blocks a request takes. A request takes a *run* of
//! neighbouring free blocks, whatever their kinds, and pays for each kind
//! what it costs: a Clean byte nothing, a Dirty byte a store if the request
//! wants zeroes, a Fresh byte a page fault (the kernel zeroes it: several
//! times a store). So a 512 MiB `calloc` takes a block the scrubber has half
//! done, and clears the other half itself.

use super::{Alloc, Blocks, Kind, MAX_RUN, PAGE};

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

impl Blocks {
    /// `size` bytes aligned to `align` (a power of two), zero if `zeroed`, from
    /// the run of free blocks that costs least (see [`cost`]), or from the
    /// untouched range beyond `top`. `room`: bytes beyond `top` the caller
    /// lets it take (the cap and the memory available).
    pub fn alloc(&mut self, size: usize, align: usize, zeroed: bool, room: usize) -> Alloc {
        self.alloc_run(size, align, zeroed, room, true)
    }

    /// [`Blocks::alloc`] around the Busy blocks: never `Wait`. For a request
    /// that has waited once already: while the program's own threads keep
    /// every core busy one step of the scrubber's may be preempted for
    /// long.
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
}
