//! The reserve: one anonymous mapping of the process's own, cut in 2 MiB
//! slots, each holding one transparent huge page (or, where the kernel had
//! none to give, 512 small pages) or nothing. The handler
//! moves its zeroed pages into the program's faulting blocks; freed huge
//! pages move back into empty slots; the worker thread (out of the
//! program's way: `crate::threads::Polite`) scrubs those with streaming
//! stores, fills empty slots ahead of demand and
//! gives the reserve back when the process has been idle.
//!
//! The mapping is `MADV_HUGEPAGE` (its slots fault in as huge pages),
//! `MADV_DONTFORK` (a move works only within one process: a child that
//! shared the pages would make every move fail with EBUSY), and registered
//! with the userfaultfd in write-protect mode, which arms nothing: a move may
//! only land in a registered range.
//!
//! A READY slot's pages are marked free (`MADV_FREE`): the kernel may take
//! them back under pressure, without swap, and the handler, finding such a
//! slot empty, marks it EMPTY and holds the worker's filling back for a
//! while (the machine is short of memory).
//!
//! On a machine of several NUMA nodes the slots are cut in lanes, as the
//! cache's range is (`lanes.rs`): one per node, which prefers it
//! (`MPOL_PREFERRED` before anything is populated: a bind would make a
//! fill on a node out of memory call the OOM killer; a page the kernel put
//! elsewhere is dropped), and one unbound for spread policies. A lane has
//! its own counts, cursor, worker and fill switch; a slot's lane is its
//! index over the lane's length. Each lane has as many slots as the reserve
//! holds, and together they hold no more: a program on one node has all of
//! it. A lane without a worker takes no page
//! back: nothing would scrub or give it back. On one node there is one
//! lane.
//!
//! Each slot's state is one atomic, changed by compare-and-swap: the handler
//! never waits on a lock (a thread holding one might be waiting on the
//! handler's answer to its own fault). `held` counts the slots with pages.
//! A slot is EMPTY only once the kernel dropped its pages (a locked reserve,
//! under `mlockall`, takes `MADV_DONTNEED_LOCKED`); one it kept is DIRTY,
//! and a fill looks before it populates: populating keeps the bytes of
//! pages present.
//!
//! | state     | pages                          | who moves it on              |
//! |-----------|--------------------------------|------------------------------|
//! | EMPTY     | none                           | the worker, the recycler     |
//! | FILLING   | being populated                | the worker                   |
//! | INCOMING  | a freed page being moved in    | the recycler                 |
//! | DIRTY     | any, contents unknown          | worker or handler (scrub)    |
//! | SCRUBBING | being cleared                  | whoever took it              |
//! | READY     | zeroed pages                   | the handler (moves them out) |
//! | TAKEN     | being moved out                | the handler                  |

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use super::stats::Count;
use super::{is_empty, is_huge, stats, HUGE};
use crate::nodes::MAX_LANES;
use crate::sys::uffd;
use crate::sys::{self, Advice, Errno};

// A slot's states (the table above).
/// No pages.
pub const EMPTY: u8 = 0;
/// Being populated (the worker).
pub const FILLING: u8 = 1;
/// A freed page being moved in (the recycler).
pub const INCOMING: u8 = 2;
/// Pages of unknown contents: to scrub.
pub const DIRTY: u8 = 3;
/// Being cleared, by whoever took it.
pub const SCRUBBING: u8 = 4;
/// Zeroed pages, for the handler to move out.
pub const READY: u8 = 5;
/// Being moved out (the handler).
pub const TAKEN: u8 = 6;

/// Most slots: a reserve of 16 GiB.
pub const MAX_SLOTS: usize = 8192;

static STATE: [AtomicU8; MAX_SLOTS] = [const { AtomicU8::new(EMPTY) }; MAX_SLOTS];
static BASE: AtomicUsize = AtomicUsize::new(0);
/// Slots in each lane, and lanes: `PER_LANE * LANES` slots in all.
static PER_LANE: AtomicUsize = AtomicUsize::new(0);
static LANES: AtomicUsize = AtomicUsize::new(1);

/// One lane's counts (for the worker's and the handler's quick looks), its
/// search cursor, its worker's futex and whether it fills ahead.
struct Lane {
    /// Where the next search for a slot starts: slots are taken round the
    /// lane's ring.
    cursor: AtomicUsize,
    ready: AtomicUsize,
    dirty: AtomicUsize,
    /// Slots with pages (every state but EMPTY and TAKEN's source after a
    /// move).
    held: AtomicUsize,
    /// Bumped when there is work for the lane's worker; it sleeps on it.
    work: AtomicU32,
    /// Whether its worker fills empty slots ahead of demand.
    fill: AtomicBool,
    /// Whether a worker serves it.
    worker: AtomicBool,
}

static LANE: [Lane; MAX_LANES] = [const {
    Lane {
        cursor: AtomicUsize::new(0),
        ready: AtomicUsize::new(0),
        dirty: AtomicUsize::new(0),
        held: AtomicUsize::new(0),
        work: AtomicU32::new(0),
        fill: AtomicBool::new(false),
        worker: AtomicBool::new(false),
    }
}; MAX_LANES];

/// Until when (`now_ms`) the workers fill nothing: the kernel took a READY
/// slot's pages back, so the machine is short of memory.
static PRESSED_UNTIL: AtomicU64 = AtomicU64::new(0);
/// How long a slot the kernel took holds filling back.
const PRESSED_MS: u64 = 5000;

/// Maps the reserve for `bytes` (rounded down to slots): `lanes` lanes of
/// that many slots each ([`MAX_SLOTS`] in all at most), which hold no more
/// than `bytes` together (a program on one node has all of it), and
/// registers it with `fd`; the slots it may hold. An error where a lane
/// cannot be placed on its node (one unbound reserve would serve every node
/// from wherever its worker runs: the lazy mode does not run).
pub fn create(fd: i32, bytes: usize, lanes: usize) -> Result<usize, Errno> {
    let per = (bytes / HUGE).min(MAX_SLOTS / lanes.max(1));
    if per == 0 {
        return Ok(0);
    }
    let len = per * lanes * HUGE;
    let raw = sys::map_noreserve(len + HUGE)?;
    let base = raw.next_multiple_of(HUGE);
    // Failures of the advice only cost speed: small pages to move (the
    // filler then finds them not huge and backs off), or a child's copy.
    let _ = sys::madvise(base, len, Advice::HugePage);
    let _ = sys::madvise(base, len, Advice::DontFork);
    let placed = (0..lanes).try_for_each(|l| match super::lanes::node(l) {
        Some(n) => sys::prefer_node(base + l * per * HUGE, per * HUGE, n),
        None => Ok(()),
    });
    if let Err(e) = placed {
        // SAFETY: the mapping just made, which nothing uses.
        let _ = unsafe { sys::munmap(raw, len + HUGE) };
        return Err(e);
    }
    // SAFETY: write-protect mode arms nothing: no fault waits on us.
    if let Err(e) = unsafe { uffd::register(fd, base, len, uffd::Mode::WriteProtect) } {
        // SAFETY: the mapping just made, which nothing uses.
        let _ = unsafe { sys::munmap(raw, len + HUGE) };
        return Err(e);
    }
    BASE.store(base, Ordering::Release);
    LANES.store(lanes, Ordering::Release);
    PER_LANE.store(per, Ordering::Release);
    Ok(per)
}

/// Where slot `i` starts.
pub fn slot_addr(i: usize) -> usize {
    BASE.load(Ordering::Relaxed) + i * HUGE
}

/// The reserve's lanes (its workers).
pub fn lanes() -> usize {
    LANES.load(Ordering::Acquire)
}

/// The reserve's lane for the fault lane `lane` (the reserve may have one
/// lane only).
fn lane(lane: usize) -> &'static Lane {
    &LANE[lane.min(lanes() - 1)]
}

fn lane_of_slot(i: usize) -> &'static Lane {
    lane(i / PER_LANE.load(Ordering::Relaxed).max(1))
}

fn count(l: &Lane, state: u8) -> Option<&AtomicUsize> {
    match state {
        READY => Some(&l.ready),
        DIRTY => Some(&l.dirty),
        _ => None,
    }
}

/// Takes a slot of lane `lane` in state `from` into state `to`: one search
/// round the lane's ring.
pub fn take(lane_no: usize, from: u8, to: u8) -> Option<usize> {
    let l = lane(lane_no);
    if count(l, from).is_some_and(|c| c.load(Ordering::Acquire) == 0) {
        return None;
    }
    let per = PER_LANE.load(Ordering::Acquire);
    let first = lane_no.min(lanes() - 1) * per;
    let start = l.cursor.load(Ordering::Relaxed);
    for k in 0..per {
        let i = first + (start + k) % per;
        if STATE[i]
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            if let Some(c) = count(l, from) {
                c.fetch_sub(1, Ordering::AcqRel);
            }
            if from == EMPTY {
                l.held.fetch_add(1, Ordering::Relaxed);
            }
            l.cursor.store(i - first + 1, Ordering::Relaxed);
            return Some(i);
        }
    }
    None
}

/// Slot `i`, which the caller took, is now in state `to`.
pub fn set(i: usize, to: u8) {
    let l = lane_of_slot(i);
    if to == EMPTY {
        l.held.fetch_sub(1, Ordering::Relaxed);
    }
    // Counted before the slot shows the state: a `take` decrements only
    // after it took the slot, so a count never goes below the slots in it.
    if let Some(c) = count(l, to) {
        c.fetch_add(1, Ordering::AcqRel);
    }
    STATE[i].store(to, Ordering::Release);
    if to == DIRTY || to == EMPTY {
        wake(l);
    }
}

/// The calling thread is lane `lane`'s worker.
pub fn serve_lane(lane_no: usize) {
    lane(lane_no).worker.store(true, Ordering::Relaxed);
}

/// Lane `lane`'s worker ends: no page moves back into it.
pub fn unserve_lane(lane_no: usize) {
    lane(lane_no).worker.store(false, Ordering::Relaxed);
}

/// Drops the pages of lane `lane`'s READY and DIRTY slots (its worker
/// retires: no thread of ours keeps memory for a program that may have
/// changed who it is).
pub fn give_back_lane(lane_no: usize) {
    while let Some(i) = take(lane_no, READY, TAKEN).or_else(|| take(lane_no, DIRTY, SCRUBBING)) {
        if drop_pages(i) {
            stats::LAZY.add(Count::Released, 1);
        } else {
            // Kept (locked): the others would be too.
            break;
        }
    }
}

/// Whether lane `lane` may take a page back: a worker serves it, and it has
/// an empty slot.
pub fn takes_back(lane_no: usize) -> bool {
    lane(lane_no).worker.load(Ordering::Relaxed) && !full(lane_no)
}

/// Whether lane `lane` may hold no more pages: every slot of it has one,
/// or the lanes together hold as many as one lane has slots.
pub fn full(lane_no: usize) -> bool {
    let per = PER_LANE.load(Ordering::Acquire);
    lane(lane_no).held.load(Ordering::Relaxed) >= per || held() >= per
}

/// Whether lane `lane` has a slot a fault can take now or after a scrub.
pub fn has_pages(lane_no: usize) -> bool {
    let l = lane(lane_no);
    l.ready.load(Ordering::Acquire) + l.dirty.load(Ordering::Acquire) > 0
}

/// Whether no slot of any lane has pages.
pub fn holds_nothing() -> bool {
    held() == 0
}

/// Slots with pages, over every lane.
fn held() -> usize {
    LANE[..lanes()]
        .iter()
        .map(|l| l.held.load(Ordering::Relaxed))
        .sum()
}

/// Slots the workers fill ahead of demand, less the blocks the program has
/// taken since: every one for a reserve a person asked for (`--reserve`),
/// what the program's last run took (its history), else none; beyond them
/// they fill to [`BOUND`].
static AHEAD: AtomicUsize = AtomicUsize::new(0);
/// Slots the default reserve fills to: a sixteenth of the memory the
/// program has resident beside the reserve, as the worker last read it. It
/// grows as the program takes memory and shrinks as it gives it back, so a
/// program is never more than a sixteenth bigger than plainly for it.
static BOUND: AtomicUsize = AtomicUsize::new(0);
/// The share of the program's resident memory the default reserve holds.
const RESIDENT_SHARE: usize = 16;
/// Blocks the program took whole; every [`WAKE_EVERY`]th wakes the worker
/// to fill again (it would look only each second).
static TAKEN_BLOCKS: AtomicUsize = AtomicUsize::new(0);
const WAKE_EVERY: usize = 8;

/// The bytes the workers fill from start (see [`AHEAD`]; `usize::MAX`:
/// every slot).
pub fn fill_ahead(bytes: usize) {
    AHEAD.store(bytes / HUGE, Ordering::Relaxed);
}

/// The program took a block whole (moved in or filled) in lane `lane_no`.
pub fn demanded(lane_no: usize) {
    if TAKEN_BLOCKS.fetch_add(1, Ordering::Relaxed) % WAKE_EVERY == WAKE_EVERY - 1 {
        wake(lane(lane_no));
    }
}

/// Reads the program's resident memory again: [`BOUND`] follows it.
pub fn update_bound() {
    if let Some(resident) = sys::resident_private() {
        let own = resident.saturating_sub(held() * HUGE);
        BOUND.store(own / RESIDENT_SHARE / HUGE, Ordering::Relaxed);
    }
}

/// Whether the lanes hold what a fill ahead is for: every slot a person
/// asked for, within half the room the machine and the memory cgroup have
/// left (as the pressure watcher last read it); else [`BOUND`], within a
/// tenth of that room.
pub fn enough() -> bool {
    let room = crate::pressure::room() / HUGE;
    // What the program's history foresees and it has not taken yet: a
    // reserve filled to the whole figure while the program takes it would
    // hold it twice (numpy's loop peaked at 1.9x its RSS).
    let ahead = AHEAD
        .load(Ordering::Relaxed)
        .saturating_sub(TAKEN_BLOCKS.load(Ordering::Relaxed));
    let want = BOUND
        .load(Ordering::Relaxed)
        .min(room / 10)
        .max(ahead.min(PER_LANE.load(Ordering::Acquire)).min(room / 2));
    held() >= want
}

/// Lane `lane`'s futex, which its worker sleeps on.
pub fn work(lane_no: usize) -> &'static AtomicU32 {
    &lane(lane_no).work
}

/// Wakes every lane's worker (a pause asks them to return).
pub fn wake_all() {
    LANE[..lanes()].iter().for_each(wake);
}

fn wake(l: &Lane) {
    l.work.fetch_add(1, Ordering::Release);
    sys::futex_wake(&l.work);
}

/// Whether lane `lane` fills ahead of demand.
pub fn filling(lane_no: usize) -> bool {
    lane(lane_no).fill.load(Ordering::Relaxed)
}

/// Lane `lane` fills ahead of demand from now on (its process faults large
/// blocks there).
pub fn start_filling(lane_no: usize) {
    let l = lane(lane_no);
    l.fill.store(true, Ordering::Relaxed);
    wake(l);
}

/// No lane fills any more; every worker looks again (to give its lane
/// back).
pub fn stop_filling() {
    for l in &LANE[..lanes()] {
        l.fill.store(false, Ordering::Relaxed);
        wake(l);
    }
}

/// Drops slot `i`'s pages (the caller took it): EMPTY after, and true; or,
/// where the kernel kept them, DIRTY (scrubbed before it is handed out: an
/// EMPTY slot with pages would be filled around the bytes it holds) and
/// false.
pub fn drop_pages(i: usize) -> bool {
    let dropped = discard(i);
    set(i, if dropped { EMPTY } else { DIRTY });
    dropped
}

/// Whether the kernel dropped slot `i`'s pages (the caller took it).
fn discard(i: usize) -> bool {
    // SAFETY: the slot is the caller's (taken), nothing reads it.
    unsafe { sys::discard_even_locked(slot_addr(i), HUGE) }.is_ok()
}

/// Populates slot `i` (taken, FILLING) with pages the kernel zeroes, one
/// huge page where it has one to give, else small ones: READY, or (the
/// kernel refused) EMPTY and false. A slot not seen empty (pages a drop
/// left, whose bytes the population would keep; or the kernel could not
/// say) is DIRTY instead, and false. `ahead`: filled ahead of demand, its
/// pages marked free for the kernel to take back meanwhile (not one filled
/// for a fault, moved out at once).
pub fn fill(i: usize, ahead: bool) -> bool {
    let at = slot_addr(i);
    if !is_empty(at, HUGE) {
        set(i, DIRTY);
        return false;
    }
    let run = prezero::FreeRunning::start();
    let ok = sys::madvise(at, HUGE, Advice::PopulateWrite).is_ok() && on_its_node(i);
    if ok {
        if ahead && run.still() {
            mark_free(i);
        }
        let kind = if is_huge(at) {
            Count::Filled
        } else {
            Count::FilledSmall
        };
        stats::LAZY.add(kind, 1);
        set(i, READY);
    } else {
        drop_pages(i);
    }
    ok
}

/// Whether slot `i`'s pages are on its lane's node (or it has none): its
/// node was short, and the kernel took them from another.
fn on_its_node(i: usize) -> bool {
    let lane_no = i / PER_LANE.load(Ordering::Relaxed).max(1);
    match super::lanes::node(lane_no).filter(|_| lanes() > 1) {
        Some(n) => sys::page_node(slot_addr(i)).is_none_or(|at| at == n),
        None => true,
    }
}

/// Clears slot `i` (taken, SCRUBBING): READY after, if it is still one huge
/// page (else dropped; cleared all the same if the kernel keeps its pages).
/// `hot`: the program is about to use it (the handler scrubs for a waiting
/// fault).
pub fn scrub(i: usize, hot: bool) -> bool {
    let at = slot_addr(i);
    // A split page is not worth moving, unless the kernel would not drop it.
    if !is_huge(at) && discard(i) {
        set(i, EMPTY);
        return false;
    }
    let t = if hot {
        prezero::Temperature::Hot
    } else {
        prezero::Temperature::Cold
    };
    let run = prezero::FreeRunning::start();
    // SAFETY: the slot is the caller's (taken), mapped read-write (a page
    // not present faults in: the reserve's registration is for
    // write-protection faults, which nothing arms): no one else reads or
    // writes it until it is READY.
    let _ = unsafe { prezero::clear_raw_with(at as *mut u8, HUGE, t) };
    if !hot && run.still() {
        // Hot: moved out at once, for a waiting fault.
        mark_free(i);
    }
    stats::LAZY.add(Count::Scrubbed, 1);
    set(i, READY);
    true
}

/// Marks slot `i`'s zeroed pages free (the caller took it): the kernel may
/// take them back.
fn mark_free(i: usize) {
    // SAFETY: the slot is the caller's (taken) and zero: nothing writes it.
    let _ = unsafe { sys::free_lazily(slot_addr(i), HUGE, false) };
}

/// A READY slot taken (`i`) that the kernel emptied: EMPTY, and no filling
/// for a while.
pub fn reclaimed(i: usize) {
    stats::LAZY.add(Count::Reclaimed, 1);
    PRESSED_UNTIL.store(super::now_ms() + PRESSED_MS, Ordering::Relaxed);
    set(i, EMPTY);
}

/// Drops the pages of every READY and DIRTY slot (memory is short); the
/// number dropped.
pub fn give_back_all() {
    (0..lanes()).for_each(give_back_lane);
}

/// Whether the kernel took slots back lately: the worker fills nothing.
pub fn pressed(now: u64) -> bool {
    now < PRESSED_UNTIL.load(Ordering::Relaxed)
}
