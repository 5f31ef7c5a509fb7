//! The fault handler: one thread per process, reading the userfaultfd's
//! fault messages and answering each.
//!
//! A fault in a 2 MiB block that lies wholly inside registered memory (a
//! registered mapping, or the cache's writable range) and has no page yet
//! gets a zeroed huge page from the reserve: the block's page table, which
//! the fault path allocated before it reported the fault, is dropped first
//! (`MADV_DONTNEED`; with it in place the move would split the huge page),
//! then the page moves in whole (`UFFDIO_MOVE`), which wakes every thread
//! waiting in the block. A slot the kernel filled with small pages (no
//! huge page to be had) moves a page-table entry at a time. With nothing
//! ready in the reserve the handler scrubs a freed page itself if there is
//! one; else the whole block gets small pages in one call. It fills a slot
//! for the fault only where the program asked for huge pages (the kernel's
//! own fault would give one; not while memory is short): a fresh huge page
//! costs the kernel anything from 0.5 to 12 ms here (compaction), 2 MiB of
//! small pages in one call about 1.7 ms, 512 small faults 2.4 ms. Where
//! moved huge pages arrive split (before Linux 6.14), such a mapping is
//! handed to the kernel's own faults instead.
//!
//! Small pages: a write gets zeroed copies (`UFFDIO_COPY` from a mapping
//! that reads zero: real pages, no second fault for the write), a read the
//! shared zero page (`UFFDIO_ZEROPAGE`), from the faulting page to the end of
//! its block (a block partly populated already: the call stops at the first
//! page present, and wakes what it filled; or an edge of a mapping, outside
//! its whole blocks: to the mapping's end if that comes first). EEXIST
//! (another thread's fault filled it first) ends in `UFFDIO_WAKE`.
//!
//! Threads that fault one of the program's mappings at once (two within
//! 20 ms) while the reserve has nothing for them get the kernel's own
//! faults: the whole mapping is unregistered (the huge pages the program
//! asked for, which registration turned off, asked again), since the
//! kernel's fault runs on every CPU and the handler on one. It stays the
//! kernel's.
//!
//! No fault waits for ever: one the handler cannot serve (ENOMEM in a memory
//! cgroup at its limit, EPERM under a seccomp filter, anything) is handed to
//! the kernel: the shared zero page (a write then takes the kernel's own
//! copy-on-write fault), else the page unregistered (which wakes it). When
//! that fails too, or faults keep failing ([`MAX_UNSERVED`] in a row), the
//! lazy mode stops: every range is unregistered and the descriptor closed,
//! which wakes every waiter and leaves every fault to the kernel, whose
//! cgroup and OOM behaviour is then the plain program's.
//!
//! Page size: the first touch of an empty block away from the last one
//! served gets its page alone (a read the zero page), as the kernel gives a
//! program that did not ask for huge pages; a write beside a page present
//! there fills the rest of the block with small pages (other touches get
//! their page alone), and the block after a whole one gets a huge page
//! (one touch a block, even in order, stays sparse). Under THP `always` every block does. A sparse table costs what it
//! touches.
//!
//! On several NUMA nodes a fault is served from the reserve's lane for
//! where the kernel would have placed its page (`lanes.rs`), readahead from
//! the same lane; small pages copied in come from that node too (the
//! handler's own policy is set to prefer it: the copy allocates as the
//! handler).

use std::sync::atomic::Ordering;

use super::reserve::{self, DIRTY, EMPTY, FILLING, READY, SCRUBBING, TAKEN};
use super::stats::Count;
use super::{
    fd, give_up, guarded, is_empty, is_huge, lanes, serving, stats, still_ours, stop, suspend,
    thp_always, touch_active, PopGuard, Stop, HUGE, PAGE, ZEROES,
};
use crate::sys::uffd::{self, Msg};
use crate::sys::{self, Errno};
use crate::threads::{self, Owner};

/// READY slots a fault looks at that the kernel emptied, before it takes
/// small pages instead.
const MAX_RECLAIMED_LOOKS: usize = 8;

/// How long a fault waits for `POP` before it gets a small page without it
/// (its holders make a system call or two: tens of microseconds).
const POP_WAIT_US: u64 = 1000;

/// Pages unregistered in a row (their faults neither served nor given the
/// zero page) after which the lazy mode stops: each one splits its mapping
/// in three, and the next fault is likely to fail the same way.
const MAX_UNREGISTERED: u32 = 16;

/// How recently another thread must have faulted for a fault to count as
/// one of several at once (the coarse clock ticks every 4 ms).
const CONTENDED_MS: u64 = 20;

/// Fault messages read at once.
const BATCH: usize = 16;

struct Handler {
    fd: i32,
    /// The block after the last one served: a first touch there is dense.
    next: usize,
    /// Pages unregistered since the last fault served (`u32::MAX`: a page
    /// could not be): the lazy mode stops past [`MAX_UNREGISTERED`].
    unregistered: u32,
    /// The last error of a call that could not serve a fault.
    error: Errno,
    /// Moved huge pages arrive split here: every slot moves a page-table
    /// entry at a time.
    no_huge: bool,
    /// The first huge move has been checked.
    checked: bool,
    /// The node the handler's own policy places small pages on now
    /// (`usize::MAX`: the process's policy; `usize::MAX - 1`: not known).
    placed: usize,
    /// The thread of the last fault in a mapping of the program's, that
    /// mapping's start, and when a fault there last came from another thread
    /// than the one before it (0: never).
    last_tid: u32,
    last_mapping: usize,
    switched_ms: u64,
    /// The mappings handed to the kernel in this batch of faults (one a
    /// message at most): a fault there read before the hand-over was woken
    /// by it, and is the kernel's.
    handed: [(usize, usize); BATCH],
    n_handed: usize,
}

/// The handler thread's body: it reads the userfaultfd's faults and serves
/// them until it is asked to end, the lazy mode stops, or it is idle with
/// the reserve empty.
pub fn run() {
    let mut h = Handler {
        fd: fd(),
        next: 0,
        unregistered: 0,
        error: Errno(0),
        no_huge: false,
        checked: false,
        placed: usize::MAX - 1,
        last_tid: 0,
        last_mapping: 0,
        switched_ms: 0,
        handed: [(0, 0); BATCH],
        n_handed: 0,
    };
    loop {
        threads::sync();
        // Asked to end (a stop or a retirement), or handed over already: it
        // ends once nothing is registered.
        if threads::stopping(Owner::Handler).is_some() || !serving() {
            h.leave();
            super::stopped_for_good();
            return;
        }
        // Looked at before each read: after the program closed the
        // descriptor and opened another file at its number, a read would
        // take that file's bytes (a pipe's), or spin (/dev/null's end).
        if !still_ours() {
            stop();
            h.leave();
            return;
        }
        match h.round(threads::CHECK_MS as i32) {
            Round::Served => {}
            Round::Quiet if idle_and_empty() => {
                // The kernel's own fault is as fast as a copy of zeroes.
                h.leave();
                return;
            }
            Round::Quiet => {}
            Round::Stopped => {
                h.leave();
                super::stopped_for_good();
                return;
            }
        }
    }
}

/// What a round of reading the userfaultfd came to.
enum Round {
    Served,
    /// Nothing to read within the wait.
    Quiet,
    /// The lazy mode stopped (the kernel refused, the descriptor failed).
    Stopped,
}

/// Whether the program has not faulted or freed a huge page for the idle
/// time and the reserve holds nothing: the handler has nothing to serve
/// faster than the kernel.
fn idle_and_empty() -> bool {
    let idle = super::now_ms().saturating_sub(super::LAST_ACTIVE.load(Ordering::Relaxed))
        >= super::SETTINGS.idle_ms.load(Ordering::Relaxed);
    idle && reserve::holds_nothing()
}

/// What [`Handler::move_in`] found.
#[derive(PartialEq, Eq)]
enum MoveIn {
    Moved,
    /// The block has pages already.
    Populated,
    /// Nothing in the reserve, or the kernel refused the move.
    Unavailable,
}

impl Handler {
    /// Reads what faults wait (`ms` at most for the first) and serves them.
    fn round(&mut self, ms: i32) -> Round {
        let mut msgs = [Msg::default(); BATCH];
        if !uffd::readable_within(self.fd, ms) {
            return Round::Quiet;
        }
        let n = match uffd::read(self.fd, &mut msgs) {
            Ok(n) => n,
            Err(Errno(libc::EINTR | libc::EAGAIN)) => return Round::Served,
            Err(_) => {
                stop();
                return Round::Stopped;
            }
        };
        for m in &msgs[..n] {
            if m.event == uffd::UFFD_EVENT_PAGEFAULT && serving() {
                let write = m.flags & uffd::UFFD_PAGEFAULT_FLAG_WRITE != 0;
                self.serve(m.address as usize, write, m.thread());
            } else if m.event == uffd::UFFD_EVENT_PAGEFAULT {
                // Stopped, or handed over but for this fault, made before.
                self.hand_to_kernel(m.address as usize & !(PAGE - 1), Errno(libc::EAGAIN));
            }
        }
        self.n_handed = 0;
        if self.unregistered > MAX_UNREGISTERED {
            give_up(Stop::Refused(self.error));
            return Round::Stopped;
        }
        Round::Served
    }

    /// Hands everything registered to the kernel (`suspend.rs`), serving
    /// faults (or handing them to the kernel, once stopped) until `POP` can
    /// be had: its holder may wait on one.
    fn leave(&mut self) {
        loop {
            if let Some(mut g) = PopGuard::own_within(POP_WAIT_US) {
                suspend::hand_over(&mut g, self.fd);
                return;
            }
            let _ = self.round(1);
        }
    }

    fn serve(&mut self, addr: usize, write: bool, tid: u32) {
        if self.handed[..self.n_handed]
            .iter()
            .any(|&(s, e)| (s..e).contains(&addr))
        {
            return;
        }
        stats::LAZY.add(Count::Faults, 1);
        touch_active();
        let lane = self.lane(addr, tid);
        if let Some(l) = lane.filter(|&l| !reserve::filling(l)) {
            // This process faults large blocks there: the lane may fill now.
            reserve::start_filling(l);
        }
        let page = addr & !(PAGE - 1);
        let block = addr & !(HUGE - 1);
        let Some(mut g) = PopGuard::own_within(POP_WAIT_US) else {
            // The page alone, which needs no lock (a fill stops at a page
            // present): its holder may be waiting on this fault.
            self.small(page, page, page + PAGE, write);
            return;
        };
        if self.kernel_serves_better(&mut g, page, lane, tid) {
            return;
        }
        if !self.bounds(&mut g, block) {
            // An edge of a mapping: small pages to the end of the block or
            // the mapping.
            let to = g
                .table()
                .find(page)
                .map_or(page + PAGE, |r| r.end.min(block + HUGE));
            self.small(page, page, to, write);
            return;
        }
        // A first touch of an empty block outside a dense run gets its page
        // alone, as the kernel gives a program that did not ask for huge
        // pages (THP `always` asks for all): a sparse table costs what it
        // touches, and a read the zero page. A second touch of the block
        // fills the rest of it; the block after it gets a huge page.
        if !thp_always() && is_empty(block, HUGE) && !self.dense(&mut g, block, tid) {
            // Not the next block: a table touched once a block, in order,
            // is as sparse; only a second touch here makes the run dense.
            self.next = 0;
            self.small(page, page, page + PAGE, write);
            stats::LAZY.add(Count::Sparse, 1);
            return;
        }
        // A program that turned huge pages off for itself gets none moved
        // in: small pages, as the kernel would give it.
        // Where the program asked for huge pages, an empty reserve is filled
        // now (the kernel's own huge-page fault, then a move) rather than
        // leave it small pages.
        let asked_huge = thp_always() || g.table().asked_huge(block);
        let moved = match lane {
            Some(lane) if !sys::thp_disabled() => self.move_in(block, lane, asked_huge),
            // Its first touch got the page alone: the rest after this one
            // (a fill of the whole block would stop at that page).
            _ if !is_empty(block, HUGE) => MoveIn::Populated,
            _ => MoveIn::Unavailable,
        };
        // No readahead: a block moved in before the program touches it is
        // memory it may never use, counted as its own (`mincore`, RSS).
        match moved {
            MoveIn::Moved => {
                self.next = block + HUGE;
                if let Some(l) = lane {
                    reserve::demanded(l);
                }
            }
            MoveIn::Populated => {
                self.next = block + HUGE;
                self.fill_rest(page, block, write);
            }
            MoveIn::Unavailable => {
                if self.small(page, block, block + HUGE, write) {
                    stats::LAZY.add(Count::Copied, 1);
                    if let Some(l) = lane {
                        reserve::demanded(l);
                    }
                }
            }
        }
    }

    /// Hands the program's mapping around `page` to the kernel's own faults
    /// where they serve it better than this handler can. Whether it did.
    fn kernel_serves_better(
        &mut self,
        g: &mut PopGuard,
        page: usize,
        lane: Option<usize>,
        tid: u32,
    ) -> bool {
        let block = page & !(HUGE - 1);
        // Where moved huge pages arrive split (before Linux 6.14), a mapping
        // of the program's that asked for huge pages: the kernel's own fault
        // gives them whole, which no move here can.
        if self.no_huge
            && (thp_always() || g.table().asked_huge(block))
            && self.hand_over_mapping(g, page)
        {
            stats::LAZY.add(Count::ToKernel, 1);
            return true;
        }
        // Threads faulting at once with nothing in the reserve: the
        // kernel's own faults run on every CPU, this handler on one and a
        // round trip each (a JVM's pretouch ran 1.8x longer). The cache's
        // range stays.
        let mapping = g.table().find(page).map(|r| r.start);
        if self.contended(tid, mapping)
            && lane.is_none_or(|l| !reserve::has_pages(l))
            && self.hand_over_mapping(g, page)
        {
            stats::LAZY.add(Count::Contended, 1);
            return true;
        }
        false
    }

    /// Whether another thread than `tid` faulted in the same mapping of the
    /// program's (`mapping`: its start) within [`CONTENDED_MS`]. Faults
    /// without a thread id, outside the program's mappings, or by a thread of
    /// the preload's own never count.
    fn contended(&mut self, tid: u32, mapping: Option<usize>) -> bool {
        let Some(mapping) = mapping.filter(|_| tid != 0 && !crate::cache::is_scrubber(tid)) else {
            return false;
        };
        let now = super::now_ms();
        if (tid, mapping) != (self.last_tid, self.last_mapping) {
            if self.last_tid != 0 && tid != self.last_tid && mapping == self.last_mapping {
                self.switched_ms = now;
            }
            (self.last_tid, self.last_mapping) = (tid, mapping);
        }
        self.switched_ms != 0 && now.saturating_sub(self.switched_ms) <= CONTENDED_MS
    }

    /// Hands the program's whole mapping around `page` to the kernel's own
    /// faults (unregistering it wakes every fault waiting there; its pages
    /// stay). Whether it did: the cache's range is not a mapping of the
    /// program's, and stays registered.
    fn hand_over_mapping(&mut self, g: &mut PopGuard, page: usize) -> bool {
        let Some(r) = g.table().find(page) else {
            return false;
        };
        if uffd::unregister(self.fd, r.start, r.end - r.start).is_err() {
            return false;
        }
        // The huge pages the program asked for (or all, under THP
        // `always`), which registration had turned off: the kernel's own
        // faults give them as plainly.
        if thp_always() {
            let _ = sys::madvise(r.start, r.end - r.start, sys::Advice::HugePage);
        } else {
            g.table().each_asked_within(r.start, r.end, |s, e| {
                let _ = sys::madvise(s, e - s, sys::Advice::HugePage);
            });
        }
        g.table().remove(r.start, r.end);
        if self.n_handed < BATCH {
            self.handed[self.n_handed] = (r.start, r.end);
            self.n_handed += 1;
        }
        true
    }

    /// Whether a first touch of the empty `block` is part of a dense run:
    /// the block after the last one served, a block whose previous one is
    /// wholly populated (a stream of its own, served between others'), one
    /// the program asked huge pages for, or a touch of the preload's own
    /// scrubber (its populating fills).
    fn dense(&self, g: &mut PopGuard, block: usize, tid: u32) -> bool {
        let prev = block.wrapping_sub(HUGE);
        block == self.next
            || g.table().asked_huge(block)
            || crate::cache::is_scrubber(tid)
            || (block >= HUGE
                && (g.table().find(prev).is_some() || crate::cache::owns(prev))
                && is_full(prev, HUGE))
    }

    /// A later touch of a block whose first got its page alone. A read: the
    /// zero page up to the next page present (no memory). A write beside a
    /// page present (a dense run): real zeroed pages from it on, then in
    /// every other hole of the block. Another write: its page alone, as the
    /// kernel gives it (a table with a few entries a block stays small).
    fn fill_rest(&mut self, page: usize, block: usize, write: bool) {
        let beside = |p: usize| p >= block && p < block + HUGE && !is_empty(p, PAGE);
        if !write {
            self.small(page, page, block + HUGE, false);
            return;
        }
        if !beside(page.wrapping_sub(PAGE)) && !beside(page + PAGE) {
            self.small(page, page, page + PAGE, true);
            return;
        }
        if !self.small(page, page, block + HUGE, true) || guarded(block, HUGE) {
            return;
        }
        let mut holes = [uffd::Region::default(); 32];
        let pm = super::PAGEMAP.load(Ordering::Relaxed);
        if let Ok((n, _)) = uffd::scan_missing(pm, block, block + HUGE, &mut holes) {
            for h in &holes[..n] {
                if let Ok(filled) = self.fill(h.start as usize, h.end as usize, true) {
                    stats::LAZY.add(Count::Small, (filled / PAGE) as u64);
                }
            }
        }
    }

    /// Whether `[block, block + HUGE)` lies wholly in registered memory.
    fn bounds(&self, g: &mut PopGuard, block: usize) -> bool {
        crate::cache::writable_end(block)
            .or_else(|| g.table().find(block).map(|r| r.end))
            .is_some_and(|end| block + HUGE <= end)
    }

    /// Moves a zeroed slot of the reserve into `block` if it has no page
    /// yet, for a fault (scrubbing a freed one if none is ready). A huge page moves whole (its page-table entry) once
    /// the block's empty page table is dropped; a slot of small pages (the
    /// kernel had no huge page to fill it with) a page-table entry at a time
    /// (0.7 ms a block here: still 2.5x what copying zeroes costs).
    fn move_in(&mut self, block: usize, lane: usize, fill_now: bool) -> MoveIn {
        // A guard page's marker is no page, and a move would erase it.
        if !is_empty(block, HUGE) || guarded(block, HUGE) {
            return MoveIn::Populated;
        }
        let Some((slot, huge)) = self.slot(lane, fill_now && !self.no_huge) else {
            return MoveIn::Unavailable;
        };
        let from = reserve::slot_addr(slot);
        // Where moved huge pages arrive split (below), the page table stays.
        let whole = huge && !self.no_huge;
        // SAFETY: the block has no page (is_empty, under POP: nothing else
        // populates it meanwhile), and lies in registered memory of ours:
        // dropping it drops only its empty page table.
        if whole && unsafe { sys::discard(block, HUGE) }.is_err() {
            reserve::set(slot, READY);
            return MoveIn::Unavailable;
        }
        // Holes where the kernel took part of a slot back: the block's
        // pages there fault again, served as any.
        // SAFETY: the slot is ours (TAKEN) and zero; the block is missing,
        // in a range registered with this descriptor.
        let (moved, r) =
            unsafe { uffd::move_range(self.fd, block, from, HUGE, uffd::MOVE_SRC_HOLES) };
        match r {
            Ok(()) => reserve::set(slot, EMPTY),
            // The kernel may report an error for a move it made (a batch
            // that hit EAGAIN, then EEXIST for the pages it had moved, with
            // nothing counted): an empty slot and a populated block say it
            // did, and nothing woke the block's waiters.
            Err(_) if is_empty(from, HUGE) && !is_empty(block, HUGE) => {
                reserve::set(slot, EMPTY);
                let _ = uffd::wake(self.fd, block, HUGE);
            }
            Err(_) if moved == 0 => {
                reserve::set(slot, READY);
                return MoveIn::Unavailable;
            }
            Err(_) => {
                // Part of it moved: zero pages in the block, the rest left in
                // the slot.
                reserve::drop_pages(slot);
                return MoveIn::Populated;
            }
        }
        let kind = if huge {
            Count::Moved
        } else {
            Count::MovedSmall
        };
        stats::LAZY.add(kind, 1);
        if whole && !self.checked {
            // A kernel that keeps the empty page table (before 6.14's
            // reclaim of them on MADV_DONTNEED) splits every moved page.
            self.checked = true;
            if !is_huge(block) {
                self.no_huge = true;
                stats::LAZY.add(Count::Split, 1);
            }
        }
        MoveIn::Moved
    }

    /// A zeroed slot of the reserve, TAKEN, and whether it is one huge page:
    /// a ready one (the kernel may have taken one's pages back: it is
    /// emptied, and the next looked at, a few at most), else (for a fault) a
    /// freed one scrubbed here, else, with `fill_now`, an empty one filled
    /// here.
    fn slot(&self, lane: usize, fill_now: bool) -> Option<(usize, bool)> {
        for _ in 0..MAX_RECLAIMED_LOOKS {
            let i = match reserve::take(lane, READY, TAKEN) {
                Some(i) => i,
                None if self.scrub_or_fill(lane, fill_now) => reserve::take(lane, READY, TAKEN)?,
                None => return None,
            };
            let at = reserve::slot_addr(i);
            if is_empty(at, HUGE) {
                reserve::reclaimed(i);
                continue;
            }
            return Some((i, is_huge(at)));
        }
        None
    }

    /// Makes a slot of lane `lane` READY for a fault: a freed one scrubbed,
    /// else, with `fill_now`, an empty one filled. Whether it did.
    fn scrub_or_fill(&self, lane: usize, fill_now: bool) -> bool {
        if let Some(i) = reserve::take(lane, DIRTY, SCRUBBING) {
            let scrubbed = reserve::scrub(i, true);
            if scrubbed {
                stats::LAZY.add(Count::ScrubbedOnDemand, 1);
            }
            return scrubbed;
        }
        // Not while memory is short: the fault gets small pages, as the
        // kernel's own fault would under reclaim.
        if !fill_now
            || reserve::full(lane)
            || crate::pressure::pressed()
            || reserve::pressed(super::now_ms())
        {
            return false;
        }
        let Some(i) = reserve::take(lane, EMPTY, FILLING) else {
            return false;
        };
        let filled = reserve::fill(i, false);
        if filled {
            stats::LAZY.add(Count::FilledNow, 1);
        }
        filled
    }

    /// The reserve's lane for a fault at `addr` by thread `tid` (`None`:
    /// small pages, placed by the mapping's own policy); where its node
    /// differs from the last one's, the handler's own policy is made to
    /// place small pages there (on one node: nothing but a comparison).
    fn lane(&mut self, addr: usize, tid: u32) -> Option<usize> {
        if lanes::count() == 1 {
            return Some(0);
        }
        let lane = lanes::for_fault(addr, tid);
        let node = lane.and_then(lanes::node);
        let want = node.map_or(usize::MAX, |n| n as usize);
        if want != self.placed {
            let placed = match node {
                Some(n) => sys::prefer_thread_node(n),
                None => lanes::process_raw()
                    .as_ref()
                    .map_or(Ok(()), sys::set_thread_policy),
            };
            // Not placed: the next fault tries again.
            self.placed = if placed.is_ok() { want } else { usize::MAX - 1 };
        }
        lane
    }

    /// Small zeroed pages from `from` (the faulting `page`, or the start of
    /// its block) up to `to` at most, in registered memory: the call stops
    /// at the first page present. Whether it filled the faulting page;
    /// whatever the outcome, the fault's thread is woken.
    fn small(&mut self, page: usize, from: usize, to: usize, write: bool) -> bool {
        // A fill maps pages over guard markers: the page alone near one.
        let (from, to) = if guarded(from, to - from) {
            (page, page + PAGE)
        } else {
            (from, to)
        };
        let r = self.fill(from, to, write);
        let r = match r {
            // The range spans mappings the kernel keeps apart: the page alone.
            Err(Errno(e)) if e != libc::EEXIST && to - from > PAGE => {
                self.fill(page, page + PAGE, write)
            }
            r => r,
        };
        match r {
            Ok(filled) => {
                stats::LAZY.add(Count::Small, (filled / PAGE) as u64);
                // It woke what it filled, which starts at or before the page.
                if from + filled > page {
                    self.unregistered = 0;
                    return true;
                }
            }
            Err(Errno(libc::EEXIST)) => {}
            Err(e) => {
                self.hand_to_kernel(page, e);
                return false;
            }
        }
        match uffd::wake(self.fd, page, PAGE) {
            Ok(()) => self.unregistered = 0,
            Err(e) => self.hand_to_kernel(page, e),
        }
        false
    }

    /// Hands the fault at `page`, which failed with `e`, to the kernel: the
    /// shared zero page there (which costs no memory, so a memory cgroup at
    /// its limit allows it, and wakes the fault), else the page unregistered
    /// (which wakes it too); where neither can be done the lazy mode stops
    /// after this batch of faults.
    fn hand_to_kernel(&mut self, page: usize, e: Errno) {
        stats::LAZY.add(Count::Unserved, 1);
        self.error = e;
        match uffd::zeropage(self.fd, page, PAGE) {
            Ok(_) => return,
            Err(Errno(libc::EEXIST)) if uffd::wake(self.fd, page, PAGE).is_ok() => return,
            Err(Errno(libc::EEXIST)) => {}
            Err(e) => self.error = e,
        }
        self.unregistered = match uffd::unregister(self.fd, page, PAGE) {
            Ok(()) => self.unregistered.saturating_add(1),
            Err(_) => u32::MAX,
        };
    }

    /// `UFFDIO_COPY` of zeroes (a write) or `UFFDIO_ZEROPAGE` (a read) of
    /// `[from, to)`: the bytes filled before a page present stopped it.
    fn fill(&self, from: usize, to: usize, write: bool) -> Result<usize, Errno> {
        if write {
            // SAFETY: ZEROES is readable, HUGE bytes, and to - from <= HUGE.
            unsafe { uffd::copy(self.fd, from, ZEROES.load(Ordering::Relaxed), to - from) }
        } else {
            uffd::zeropage(self.fd, from, to - from)
        }
    }
}

/// Whether every page of `[at, at + len)` is present or swapped out (false
/// if the kernel cannot say).
fn is_full(at: usize, len: usize) -> bool {
    let mut out = [uffd::Region::default(); 1];
    let pm = super::PAGEMAP.load(Ordering::Relaxed);
    matches!(uffd::scan_missing(pm, at, at + len, &mut out), Ok((0, _)))
}
