//! The program's own mappings: which `mmap`s are registered, and what
//! `munmap`, `mremap`, `mmap(MAP_FIXED)` and `madvise` do to registered
//! ranges. `entry/lazy.rs` calls these from the C entry points, which have
//! already forwarded everything while the lazy mode was not asked for.
//!
//! Registered: anonymous private read-write mappings of at least the
//! threshold, 2 MiB at least (`smallest_mapping`), without `MAP_POPULATE`
//! (the program wants the pages now), `MAP_LOCKED` (a move into locked
//! memory is refused), `MAP_HUGETLB`, `MAP_STACK` or `MAP_GROWSDOWN`, and
//! holding a whole 2 MiB
//! block: all of it (its edges get small pages: a move is of whole blocks;
//! a part registered or advised alone would split the mapping, which
//! `mremap` could not move or grow whole then). A
//! `PROT_NONE` reservation (a JVM's heap, reserved at `-Xmx`) is not; the
//! read-write mappings a runtime commits over it with `MAP_FIXED` are.
//!
//! The table follows a call once it succeeded (a failed one changes no
//! mapping). The program's unmaps and drops (`munmap`, `MADV_DONTNEED`,
//! `MADV_FREE`, `MADV_REMOVE`, `mmap(MAP_FIXED)` over, a shrinking
//! `mremap`) leave its pages to the kernel: none moves into the reserve,
//! though a fault is served from it as before. The kernel may still hold
//! references to them that the program cannot see and a move does not
//! refuse (a pipe's, after `vmsplice`: it must deliver the bytes written,
//! not the next owner's); the kernel frees a page only once the last is
//! gone. `MADV_HUGEPAGE` on a registered range is done, then undone there
//! (`MADV_NOHUGEPAGE`).
//!
//! Locked memory is the kernel's: `mlock` populates a mapping whole, in the
//! call and again when `mremap` grows it, which the handler would serve a
//! page at a time (a move into locked memory is refused), behind `POP` when
//! `mremap` holds it. A registered mapping the program locks is
//! unregistered first, and none is registered while `mlockall(MCL_FUTURE)`
//! holds (not with `MCL_ONFAULT`/`MLOCK_ONFAULT`, which populate nothing).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::stats::Count;
use super::table::Range;
use super::{
    active, ensure_started, fd, smallest_mapping, stats, thp_always, PopGuard, HUGE, PAGE,
};
use crate::sys::uffd;
use crate::sys::{self, Advice, Errno};

/// Every registered range lies in `[LO, HI)` (widened, never narrowed): a
/// `munmap` or `madvise` elsewhere is forwarded without the lock.
static LO: AtomicUsize = AtomicUsize::new(usize::MAX);
static HI: AtomicUsize = AtomicUsize::new(0);

/// `mlockall(MCL_FUTURE)` holds: new mappings are locked.
static LOCKED_FUTURE: AtomicBool = AtomicBool::new(false);

/// `MADV_GUARD_INSTALL` (Linux 6.13).
const MADV_GUARD_INSTALL: i32 = 102;

fn maybe_registered(start: usize, end: usize) -> bool {
    start < HI.load(Ordering::Acquire) && end > LO.load(Ordering::Acquire)
}

/// The 2 MiB-aligned interior of `[start, start + len)`, if it holds a block.
fn interior(start: usize, len: usize) -> Option<Range> {
    let r = Range {
        start: start.next_multiple_of(HUGE),
        end: start.checked_add(len)? & !(HUGE - 1),
    };
    (r.start < r.end).then_some(r)
}

/// Whether a new mapping of these arguments is one to register.
pub fn candidate(len: usize, prot: i32, flags: i32) -> bool {
    registrable(prot, flags) && len >= smallest_mapping()
}

/// Whether a mapping of these arguments could be registered, of any size.
fn registrable(prot: i32, flags: i32) -> bool {
    let excluded = libc::MAP_POPULATE
        | libc::MAP_LOCKED
        | libc::MAP_HUGETLB
        | libc::MAP_STACK
        | libc::MAP_GROWSDOWN;
    flags & libc::MAP_ANONYMOUS != 0
        && flags & 0x0f == libc::MAP_PRIVATE
        && flags & excluded == 0
        && prot == libc::PROT_READ | libc::PROT_WRITE
        && !LOCKED_FUTURE.load(Ordering::Relaxed)
}

/// Before `mlock`/`mlock2` of `[start, end)` (and `MADV_COLLAPSE`, which
/// the kernel refuses in registered memory): every registered mapping it
/// meets is the kernel's from now on, whole (unregistered, out of the
/// table).
pub fn to_kernel(start: usize, end: usize) {
    if !active() || !maybe_registered(start, end) {
        return;
    }
    let mut g = PopGuard::program();
    while let Some(r) = first_within(&mut g, start, end) {
        let _ = uffd::unregister(fd(), r.start, r.end - r.start);
        g.table().remove(r.start, r.end);
    }
}

/// Before `mlockall(flags)`: with `MCL_CURRENT` every registered mapping is
/// the kernel's from now on; with `MCL_FUTURE` none is registered until
/// `munlockall`. Nothing with `MCL_ONFAULT`.
pub fn locking_all(flags: i32) {
    if flags & libc::MCL_ONFAULT != 0 {
        return;
    }
    if flags & libc::MCL_FUTURE != 0 {
        LOCKED_FUTURE.store(true, Ordering::Relaxed);
    }
    if flags & libc::MCL_CURRENT != 0 {
        to_kernel(0, usize::MAX);
    }
}

/// After `munlockall`: new mappings are registered again.
pub fn unlocked_all() {
    LOCKED_FUTURE.store(false, Ordering::Relaxed);
}

/// The whole entry of the first entry that meets `[start, end)`.
fn first_within(g: &mut PopGuard, start: usize, end: usize) -> Option<Range> {
    let mut first = None;
    g.table().each_within(start, end, |r| {
        first.get_or_insert(r.start);
    });
    g.table().find(first?)
}

/// Registers the new mapping `[at, at + len)`, if it holds a whole block,
/// and remembers it; nothing if the table is full or the kernel refuses.
/// The whole mapping, edges too (served with small pages): a registration
/// or advice of a part would split it, and `mremap` cannot span mappings.
fn register(g: &mut PopGuard, at: usize, len: usize) {
    let (Some(_), Some(end)) = (interior(at, len), at.checked_add(len)) else {
        return;
    };
    let r = Range {
        start: at,
        end: end.next_multiple_of(PAGE),
    };
    if g.table().len() == super::table::MAX_MAPPINGS || !g.may_register() {
        return;
    }
    // SAFETY: the handler thread runs (the lazy mode is on, under POP) and
    // answers every fault.
    if unsafe { uffd::register(fd(), r.start, r.end - r.start, uffd::Mode::Missing) }.is_err() {
        return;
    }
    if thp_always() {
        let _ = sys::madvise(r.start, r.end - r.start, Advice::NoHugePage);
    }
    track(g, r);
    stats::LAZY.add(Count::Mappings, 1);
}

/// Registers the small new mapping `[at, at + len)` if it lies right beside
/// a registered one: the kernel merges such neighbours plainly (a program
/// may grow the two with one `mremap`), and registration's flags would keep
/// them apart.
fn register_neighbour(g: &mut PopGuard, at: usize, len: usize) {
    let end = at + len.next_multiple_of(PAGE);
    let beside = g.table().find(at.wrapping_sub(1)).is_some() || g.table().find(end).is_some();
    if !beside || g.table().len() == super::table::MAX_MAPPINGS || !g.may_register() {
        return;
    }
    // SAFETY: the handler thread runs (the lazy mode is on, under POP) and
    // answers every fault.
    if unsafe { uffd::register(fd(), at, end - at, uffd::Mode::Missing) }.is_ok() {
        if thp_always() {
            let _ = sys::madvise(at, end - at, Advice::NoHugePage);
        }
        track(g, Range { start: at, end });
    }
}

/// Remembers the registered range `r`.
fn track(g: &mut PopGuard, r: Range) {
    g.table().insert(r);
    LO.fetch_min(r.start, Ordering::AcqRel);
    HI.fetch_max(r.end, Ordering::AcqRel);
}

/// Takes `[start, end)` (to its last page: what a call of that length
/// unmapped) out of the table, once the call succeeded: a failed one
/// changed nothing, and a range forgotten before it would be served with
/// small pages from then on.
fn forget(g: &mut PopGuard, start: usize, end: usize) {
    let end = end.checked_next_multiple_of(PAGE).unwrap_or(usize::MAX);
    if let Some(lost) = g.table().remove(start, end) {
        // No room to keep tracking it: the kernel serves it from now on.
        let _ = uffd::unregister(fd(), lost.start, lost.end - lost.start);
    }
}

/// `mmap`, once the lazy mode was asked for.
///
/// # Safety
/// As `mmap(2)`.
pub unsafe fn mmap(
    addr: usize,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    off: libc::off_t,
) -> Result<usize, Errno> {
    let fixed = flags & libc::MAP_FIXED != 0 && flags & libc::MAP_FIXED_NOREPLACE == 0;
    let wanted = candidate(len, prot, flags);
    let end = addr.saturating_add(len);
    if fixed && active() && maybe_registered(addr, end) {
        let mut g = PopGuard::program();
        // SAFETY: as mmap(2) (the caller's contract).
        let at = unsafe { sys::mmap_raw(addr, len, prot, flags, fd, off) }?;
        forget(&mut g, addr, end);
        if wanted {
            register(&mut g, at, len);
        }
        return Ok(at);
    }
    // Not in a child forked meanwhile (the program's fork handlers may run
    // in it before ours): the descriptor acts on this process's memory.
    if !wanted {
        // SAFETY: as mmap(2).
        let at = unsafe { sys::mmap_raw(addr, len, prot, flags, fd, off) }?;
        let near = maybe_registered(
            at.saturating_sub(1),
            at.saturating_add(len).saturating_add(1),
        );
        if near && registrable(prot, flags) && active() {
            register_neighbour(&mut PopGuard::program(), at, len);
        }
        return Ok(at);
    }
    if !ensure_started() || !active() {
        // SAFETY: as mmap(2).
        return unsafe { sys::mmap_raw(addr, len, prot, flags, fd, off) };
    }
    // SAFETY: as mmap(2).
    let at = unsafe { sys::mmap_raw(addr, len, prot, flags, fd, off) }?;
    // Registered before the program has the address (unless MAP_FIXED, which
    // it chose: a thread that touches it meanwhile gets the kernel's pages).
    let mut g = PopGuard::program();
    register(&mut g, at, len);
    Ok(at)
}

/// `munmap`, once the lazy mode was asked for.
///
/// # Safety
/// As `munmap(2)`.
pub unsafe fn munmap(addr: usize, len: usize) -> Result<(), Errno> {
    let end = addr.saturating_add(len);
    if !maybe_registered(addr, end) || !active() {
        // SAFETY: as munmap(2).
        return unsafe { sys::munmap_raw(addr, len) };
    }
    let mut g = PopGuard::program();
    // SAFETY: as munmap(2).
    unsafe { sys::munmap_raw(addr, len) }?;
    forget(&mut g, addr, end);
    Ok(())
}

/// `mremap`, once the lazy mode was asked for. Registration does not follow
/// a mapping the kernel moves or grows: the result is unregistered whole and
/// its interior registered again, and so is every registered range (the
/// kernel may have unregistered a neighbour the result merged with).
///
/// # Safety
/// As `mremap(2)`.
pub unsafe fn mremap(
    old: usize,
    old_len: usize,
    new_len: usize,
    flags: i32,
    to: usize,
) -> Result<usize, Errno> {
    let fixed = flags & libc::MREMAP_FIXED != 0;
    let old_end = old.saturating_add(old_len);
    let hit = maybe_registered(old, old_end)
        || (fixed && maybe_registered(to, to.saturating_add(new_len)));
    if !hit || !active() {
        // SAFETY: as mremap(2).
        return unsafe { sys::mremap_raw(old, old_len, new_len, flags, to) };
    }
    let mut g = PopGuard::program();
    // SAFETY: as mremap(2).
    let at = unsafe { sys::mremap_raw(old, old_len, new_len, flags, to) }?;
    if new_len < old_len {
        // The tail went, whether the rest moved or not.
        forget(&mut g, old + new_len, old_end);
    }
    if fixed {
        forget(&mut g, to, to.saturating_add(new_len));
    }
    let was = g.table().overlaps(old, old_end);
    if flags & libc::MREMAP_DONTUNMAP == 0 {
        if let Some(lost) = g.table().remove(old, old_end) {
            let _ = uffd::unregister(fd(), lost.start, lost.end - lost.start);
        }
    }
    if was {
        let _ = uffd::unregister(fd(), at, new_len);
        register(&mut g, at, new_len);
    }
    // The kernel cleared the registration of the whole mapping the result
    // merged into, which may hold a neighbour's registered range.
    let n = if g.may_register() { g.table().len() } else { 0 };
    for i in 0..n {
        let r = g.table().get(i);
        // SAFETY: the handler thread runs (the lazy mode is on, under POP),
        // and answers every fault.
        let _ = unsafe { uffd::register(fd(), r.start, r.end - r.start, uffd::Mode::Missing) };
    }
    Ok(at)
}

/// `madvise`, once the lazy mode was asked for.
///
/// # Safety
/// As `madvise(2)`.
pub unsafe fn madvise(addr: usize, len: usize, advice: i32) -> Result<(), Errno> {
    let end = addr.saturating_add(len);
    let cache = crate::cache::owns(addr) || crate::cache::owns(end.saturating_sub(1));
    let ours = cache || maybe_registered(addr, end);
    // Before the call: the handler must look for them from the first; and
    // forgotten again if the kernel refused (before 6.13) and none was
    // installed before.
    let guards_before = advice == MADV_GUARD_INSTALL && super::guards_installed();
    if advice == libc::MADV_COLLAPSE {
        to_kernel(addr, end);
    }
    // SAFETY: as madvise(2) (the caller's contract).
    let r = unsafe { sys::madvise_raw(addr, len, advice) };
    if advice == MADV_GUARD_INSTALL && r.is_err() && !guards_before {
        super::no_guards();
    }
    r?;
    if advice == libc::MADV_HUGEPAGE && ours && active() {
        let mut g = PopGuard::program();
        // Its first touches get huge pages, as the kernel would give.
        g.table().ask_huge(addr, end);
        g.table().each_within(addr, end, |r| {
            let _ = sys::madvise(r.start, r.end - r.start, Advice::NoHugePage);
        });
        if let Some((base, span)) = crate::cache::range().filter(|_| cache) {
            let (s, e) = (addr.max(base), end.min(base + span));
            let _ = sys::madvise(s, e - s, Advice::NoHugePage);
        }
    }
    Ok(())
}
