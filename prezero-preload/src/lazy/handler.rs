//! The fault handler: one thread per process, reading the userfaultfd's
//! fault messages and answering each.
//!
//! A fault in a 2 MiB block that lies wholly inside registered memory (a
//! registered mapping, or the cache's writable range) and has no page yet
//! gets a zeroed huge page from the reserve: the block's page table, which
//! the fault path allocated before it reported the fault, is dropped first
//! (`MADV_DONTNEED`; with it in place the move would split the huge page),
//! then the page moves in whole (`UFFDIO_MOVE`), which wakes every thread
//! waiting in the block. With nothing ready in the reserve the handler
//! scrubs a freed page itself if there is one; else it copies zeroes into
//! the whole block (`UFFDIO_COPY` of 2 MiB: 512 small pages in one call).
//! It does not fill a slot for the fault: a fresh huge page costs the
//! kernel anything from 0.5 to 12 ms here (compaction), the copy about
//! 1.7 ms, and 512 small faults 2.4 ms.
//!
//! Everything else gets one 4 KiB page: an edge smaller than a block, a
//! block partly populated already, a reserve with nothing to give, a move the
//! kernel refused (an mlock'd or mprotect'ed range). A write gets a zeroed
//! copy (`UFFDIO_COPY`: one page, no second fault for the write), a read the
//! shared zero page. EEXIST (another thread's fault filled it first) and any
//! other error end in `UFFDIO_WAKE`: every fault is answered, or its thread
//! would wait forever; a page that fails twice in a row is unregistered, so
//! the kernel serves it from then on.
//!
//! Readahead: after a fault in the block right after the last one served
//! (or moved ahead), the handler moves the next blocks too, as many as the
//! window (1, 2, 4, 8: it doubles with each sequential fault, and a fault
//! elsewhere closes it), within the mapping, and only pages already ready.

use std::sync::atomic::Ordering;

use super::reserve::{self, DIRTY, EMPTY, READY, SCRUBBING, TAKEN};
use super::{fd, is_empty, is_huge, stats, touch_active, PopGuard, FILL, HUGE, PAGE, ZEROES};
use crate::sys::{self, Errno};
use crate::uffd::{self, Msg};

/// The largest readahead window, in blocks.
const MAX_WINDOW: usize = 8;

struct Handler {
    fd: i32,
    /// The block a sequential fault would hit next, and the window.
    next: usize,
    window: usize,
    /// The last page that could not be served.
    failed: usize,
    /// Moved huge pages arrive split here: only 4 KiB pages.
    no_huge: bool,
    /// The first huge move has been checked.
    checked: bool,
}

pub fn run() {
    let mut h = Handler {
        fd: fd(),
        next: 0,
        window: 0,
        failed: usize::MAX,
        no_huge: false,
        checked: false,
    };
    let mut msgs = [Msg::default(); 16];
    loop {
        let n = match uffd::read(h.fd, &mut msgs) {
            Ok(n) => n,
            Err(Errno(libc::EINTR | libc::EAGAIN)) => continue,
            // The descriptor is gone (the program closed it): the kernel
            // released its ranges, and their faults are its own again.
            Err(_) => return,
        };
        for m in &msgs[..n] {
            if m.event == uffd::UFFD_EVENT_PAGEFAULT {
                let write = m.flags & uffd::UFFD_PAGEFAULT_FLAG_WRITE != 0;
                h.serve(m.address as usize, write);
            }
        }
    }
}

impl Handler {
    fn serve(&mut self, addr: usize, write: bool) {
        stats::FAULTS.fetch_add(1, Ordering::Relaxed);
        touch_active();
        if !FILL.load(Ordering::Relaxed) {
            // This process faults large blocks: its reserve may fill now.
            FILL.store(true, Ordering::Relaxed);
            reserve::wake_worker();
        }
        let block = addr & !(HUGE - 1);
        let mut g = PopGuard::own();
        let end = self.bounds(&mut g, block);
        let moved = end.is_some() && self.huge(block, true);
        if !moved {
            if end.is_none() || !self.zeroes(block) {
                self.small(addr & !(PAGE - 1), write);
            }
            self.window = 0;
            self.next = 0;
            return;
        }
        let end = end.unwrap_or(block);
        let sequential = block == self.next;
        self.window = if sequential {
            (self.window * 2).clamp(1, MAX_WINDOW)
        } else {
            0
        };
        let mut b = block + HUGE;
        for _ in 0..self.window {
            if b + HUGE > end || reserve::ready() == 0 || !self.huge(b, false) {
                break;
            }
            stats::AHEAD.fetch_add(1, Ordering::Relaxed);
            b += HUGE;
        }
        self.next = b;
    }

    /// The end of the registered memory `[block, block + HUGE)` lies wholly
    /// in, if it does.
    fn bounds(&self, g: &mut PopGuard, block: usize) -> Option<usize> {
        let end =
            crate::cache::writable_end(block).or_else(|| g.table().find(block).map(|r| r.end))?;
        (block + HUGE <= end).then_some(end)
    }

    /// Moves a zeroed huge page into `block` if it has no page yet: for a
    /// fault (`demand`: scrubbing or filling one if none is ready) or ahead
    /// of one.
    fn huge(&mut self, block: usize, demand: bool) -> bool {
        if self.no_huge || !is_empty(block, HUGE) {
            return false;
        }
        let Some(slot) = self.slot(demand) else {
            return false;
        };
        let from = reserve::slot_addr(slot);
        // SAFETY: the block has no page (is_empty, under POP: nothing else
        // populates it meanwhile), and lies in registered memory of ours:
        // dropping it drops only its empty page table.
        if unsafe { sys::discard(block, HUGE) }.is_err() {
            reserve::set(slot, READY);
            return false;
        }
        // SAFETY: the slot is ours (TAKEN) and zero; the block is missing,
        // in a range registered with this descriptor.
        let (moved, r) = unsafe { uffd::move_pages(self.fd, block, from, HUGE, !demand) };
        match r {
            Ok(()) => reserve::set(slot, EMPTY),
            Err(_) if moved == 0 => {
                reserve::set(slot, READY);
                return false;
            }
            Err(_) => {
                // Part of it moved: zero pages in the block, a split page
                // left in the slot.
                reserve::drop_pages(slot);
                return false;
            }
        }
        if demand {
            stats::MOVED.fetch_add(1, Ordering::Relaxed);
        }
        if !self.checked {
            // A kernel that keeps the empty page table (before 6.14's
            // reclaim of them on MADV_DONTNEED) splits every moved page.
            self.checked = true;
            if !is_huge(block) {
                self.no_huge = true;
                stats::SPLIT.fetch_add(1, Ordering::Relaxed);
            }
        }
        true
    }

    /// A zeroed huge page of the reserve, TAKEN: a ready one, else (for a
    /// fault) a freed one scrubbed here.
    fn slot(&self, demand: bool) -> Option<usize> {
        while let Some(i) = reserve::take(READY, TAKEN) {
            if is_huge(reserve::slot_addr(i)) {
                return Some(i);
            }
            // Split meanwhile (reclaim, compaction): not worth moving.
            reserve::drop_pages(i);
        }
        if !demand || !reserve::scrub(reserve::take(DIRTY, SCRUBBING)?, true) {
            return None;
        }
        stats::SYNC.fetch_add(1, Ordering::Relaxed);
        reserve::take(READY, TAKEN)
    }

    /// Copies zeroes into the whole of `block` (in registered memory): its
    /// missing pages get small pages of their own, and its waiters wake.
    fn zeroes(&mut self, block: usize) -> bool {
        let from = ZEROES.load(Ordering::Relaxed);
        // SAFETY: ZEROES is a readable mapping of HUGE bytes.
        let r = unsafe { uffd::copy(self.fd, block, from, HUGE) };
        if r.is_ok() {
            stats::COPIED.fetch_add(1, Ordering::Relaxed);
        }
        r.is_ok()
    }

    /// One 4 KiB page at `page`; every outcome wakes the fault.
    fn small(&mut self, page: usize, write: bool) {
        let r = if write {
            // SAFETY: ZEROES is readable, HUGE bytes.
            unsafe { uffd::copy(self.fd, page, ZEROES.load(Ordering::Relaxed), PAGE) }
        } else {
            uffd::zeropage(self.fd, page, PAGE)
        };
        match r {
            Ok(()) => {
                stats::SMALL.fetch_add(1, Ordering::Relaxed);
                self.failed = usize::MAX;
                return;
            }
            Err(Errno(libc::EEXIST)) => self.failed = usize::MAX,
            Err(_) if self.failed == page => {
                // Twice in a row: the kernel serves it from now on.
                let _ = uffd::unregister(self.fd, page, PAGE);
                self.failed = usize::MAX;
            }
            Err(_) => self.failed = page,
        }
        let _ = uffd::wake(self.fd, page, PAGE);
    }
}
