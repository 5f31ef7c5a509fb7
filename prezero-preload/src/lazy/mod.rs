//! The lazy mode (`PREZERO_LAZY=1`, `prezero run --lazy`): large blocks are
//! not populated; their first touch is a page fault that a handler thread of
//! this process serves by moving a pre-zeroed 2 MiB huge page in from a
//! reserve (`UFFDIO_MOVE`, Linux 6.8), and the huge pages of blocks freed to
//! the cache move back into the reserve to be scrubbed with streaming stores
//! instead of faulted anew (the program's own unmaps leave theirs to the
//! kernel: `recycle.rs`).
//!
//! What is registered with the userfaultfd (missing-page faults): the
//! cache's whole range, `MADV_NOHUGEPAGE` (in a range the kernel may fault
//! huge pages into, it allocates and zeroes one before it reports the fault,
//! then frees it), and the program's own large anonymous private mappings
//! (`mmap` is interposed: `entry/lazy.rs`, the ranges in `table.rs`), which
//! say it only under THP `always`, so that they merge with their neighbours
//! as they would plainly.
//!
//! * `handler.rs`: the fault handler thread (huge page, readahead, 4 KiB);
//! * `history.rs`: what the program took, kept for its next run;
//! * `reserve.rs`: the reserve's slots, filled, scrubbed, given back;
//! * `lanes.rs`: which node's lane of the reserve serves a fault;
//! * `worker.rs`: the threads (one per lane) that do that in the
//!   background, out of the program's way;
//! * `recycle.rs`: the huge pages of freed blocks back into the reserve;
//! * `realloc.rs`: the cache's `realloc` of registered blocks;
//! * `pause.rs`: the handler's and workers' part in `crate::threads`, and
//!   how they start again;
//! * `suspend.rs`: everything registered handed to the kernel when the
//!   threads end (a change of who the program is, or idle with the reserve
//!   empty), until the next large block or mapping;
//! * `mappings.rs`: what `mmap`, `munmap`, `mremap` and `madvise` do to the
//!   registered ranges (their C entry points are in `entry/lazy.rs`);
//! * `table.rs`: the registered mappings (pure);
//! * `why.rs`: why it could not start, said once.
//!
//! The lazy mode uses the cache; the cache never names it, and reaches it
//! through the hooks set in [`configure`] (their contract in
//! `cache/hooks.rs`): the start at the first large block, `realloc.rs` and
//! `recycle.rs`.
//!
//! Locks: `POP` orders everything that populates or unmaps registered
//! memory other than by a fault: the handler holds it from its look at a
//! block to its move, so a block it found empty is still empty when it drops
//! the block's page table (`MADV_DONTNEED`) and moves a page in. Whoever
//! holds it touches no registered memory and takes no other lock (a thread
//! waiting on its own fault would wait on the handler, which waits on
//! `POP`); a program thread holds it with its signals blocked, for the same
//! reason. The kernel may still touch registered memory for its holder (a
//! call's argument on a stack the program mapped itself): the handler waits
//! for it a millisecond at most, then serves the faulting page alone, which
//! needs no lock. It is not held across `fork`, where the program's own fork
//! handlers may wait on a thread that maps: the child, which runs without
//! the lazy mode, starts it unlocked and its table empty. The reserve is
//! atomics only. The cache's `realloc` hook (`realloc.rs`) holds it across
//! the cache's plain move, which takes no lock (the cache calls its hooks
//! without its own) and touches neither block: the hooks' contract in
//! `cache/hooks.rs`. How `POP` stands to the other locks, and to signals:
//! the crate's contracts (`lib.rs`).
//!
//! Starts: at the first large block or mapping; in the program `prezero
//! run` executes with `--reserve`, or whose last run left a history
//! (`history.rs`), at start-up (its reserve fills from then on). Only the
//! program fills its reserve from the start; any other
//! process fills it once it has faulted a block (a script that starts a
//! hundred short processes does not populate a hundred reserves). Where it
//! cannot start (no userfaultfd allowed, no `UFFDIO_MOVE`) the program says
//! why once and runs as `prezero run` runs it.
//!
//! Fork: the child's copies of registered ranges are not registered (no
//! `UFFD_FEATURE_EVENT_FORK`), so the kernel serves its faults, and the
//! reserve is not copied (`MADV_DONTFORK`): the child runs without the lazy
//! mode. Its descriptors are closed: the userfaultfd's moves act on the
//! parent's memory.

mod handler;
/// What the program took, kept for its next run.
pub mod history;
mod lanes;
/// The program's own mappings (for `entry/lazy.rs`).
pub mod mappings;
mod pause;
mod realloc;
mod recycle;
mod reserve;
/// The lazy mode's counters and its line at exit.
pub mod stats;
mod suspend;
mod table;
mod why;
mod worker;

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::config::Config;
use crate::sys::uffd;
use crate::sys::{self, Errno};
use why::Why;

/// What memory pressure asks of the lazy mode (`crate::pressure`).
static PRESSURE_HOOKS: crate::pressure::Hooks = crate::pressure::Hooks {
    give_back,
    trim: None,
    holds: serves_or_holds,
};

/// Whether the lazy mode serves (its threads run) or its reserve holds
/// pages.
fn serves_or_holds() -> bool {
    serving() || !reserve::holds_nothing()
}

/// Gives the reserve back (memory is short): a no-op where the lazy mode
/// does not run in this process.
fn give_back() {
    if active() {
        reserve::give_back_all();
    }
}

/// The huge page, and the block the handler moves whole.
pub const HUGE: usize = 2 << 20;
const PAGE: usize = 4096;

/// Not asked for, or a forked child.
const OFF: u8 = 0;
/// Asked for, not started yet.
const WANTED: u8 = 1;
const STARTING: u8 = 2;
const ON: u8 = 3;
/// Could not start: the cache serves as without the lazy mode.
const FAILED: u8 = 4;
/// Its threads ended; nothing registered; the next large block or mapping
/// starts it again (`suspend.rs`).
const SUSPENDED: u8 = 5;

static STATE: AtomicU8 = AtomicU8::new(OFF);
static UFFD: AtomicI32 = AtomicI32::new(-1);
/// Which file the descriptor is (device, inode), to tell it from another
/// the program opened at its number after closing it.
static UFFD_DEV: AtomicU64 = AtomicU64::new(0);
static UFFD_INO: AtomicU64 = AtomicU64::new(0);
static PAGEMAP: AtomicI32 = AtomicI32::new(-1);
/// HUGE bytes that read as zero: what the handler copies into a block when
/// the reserve has nothing for it.
static ZEROES: AtomicUsize = AtomicUsize::new(0);
/// The process that started it: a child made without `fork`'s handlers
/// (a raw `clone`, `vfork`) must not use the descriptor, whose moves act on
/// this process's memory.
static OWNER: AtomicI32 = AtomicI32::new(0);
/// When the program last faulted or freed a huge page (coarse ms).
static LAST_ACTIVE: AtomicU64 = AtomicU64::new(0);

/// The lazy mode's settings: stored once by [`configure`] at start-up from
/// the `Config`, only read after (atomics: no lock on any path).
struct Settings {
    /// Most bytes the reserve holds (`Config::reserve`).
    reserve_bytes: AtomicUsize,
    /// The smallest of the program's mappings registered: the preload's
    /// threshold (`PREZERO_THRESHOLD`), at least a huge page.
    smallest_mapping: AtomicUsize,
    /// The reserve unused this long goes back (`PREZERO_IDLE_SECS`, in ms).
    idle_ms: AtomicU64,
    /// Whether the reserve fills ahead of demand from start-up (the program
    /// `prezero run` executes; in other processes a lane fills once they
    /// fault there), in the starting thread's lane.
    fill: AtomicBool,
    /// Testing only (`PREZERO_NO_USERFAULTFD=1`): as if userfaultfd were refused.
    no_userfaultfd: AtomicBool,
    /// Print why, if it cannot start (the program `prezero run` executes).
    say_why: AtomicBool,
}

static SETTINGS: Settings = Settings {
    reserve_bytes: AtomicUsize::new(0),
    smallest_mapping: AtomicUsize::new(usize::MAX),
    idle_ms: AtomicU64::new(5000),
    fill: AtomicBool::new(false),
    no_userfaultfd: AtomicBool::new(false),
    say_why: AtomicBool::new(false),
};

/// The table of registered mappings, under `POP`.
struct TableCell(UnsafeCell<table::Table>);
// SAFETY: reached only through `PopGuard::table`, with `POP` held.
unsafe impl Sync for TableCell {}
static TABLE: TableCell = TableCell(UnsafeCell::new(table::Table::new()));
static POP: sys::Mutex = sys::Mutex::new();

/// `POP` held; signals blocked if the holder is a program thread.
pub struct PopGuard {
    mask: Option<libc::sigset_t>,
}

impl PopGuard {
    /// For a program thread: its signals blocked first.
    fn program() -> PopGuard {
        let mask = Some(uffd::block_signals());
        POP.lock();
        PopGuard { mask }
    }

    /// For the fault handler: `None` if `POP` stays taken for `us`
    /// microseconds. Its holder may be waiting on the very fault the
    /// handler serves: a thread whose stack is registered memory it has not
    /// touched yet.
    fn own_within(us: u64) -> Option<PopGuard> {
        let mut start = None;
        while !POP.try_lock() {
            let t = sys::clock_gettime(libc::CLOCK_MONOTONIC);
            let now = t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1000;
            if now - *start.get_or_insert(now) >= us {
                return None;
            }
            std::thread::yield_now();
        }
        Some(PopGuard { mask: None })
    }

    /// Whether the lazy mode serves: what a registration needs (the
    /// hand-over, which holds `POP` too, unregisters everything).
    fn may_register(&self) -> bool {
        STATE.load(Ordering::Acquire) == ON
    }

    fn table(&mut self) -> &mut table::Table {
        // SAFETY: POP is held while the guard lives: the only reference.
        unsafe { &mut *TABLE.0.get() }
    }
}

impl Drop for PopGuard {
    fn drop(&mut self) {
        // SAFETY: this guard locked POP.
        unsafe { POP.unlock() };
        if let Some(m) = &self.mask {
            uffd::restore_signals(m);
        }
    }
}

fn now_ms() -> u64 {
    sys::coarse_ms()
}

fn touch_active() {
    LAST_ACTIVE.store(now_ms(), Ordering::Relaxed);
}

fn fd() -> i32 {
    UFFD.load(Ordering::Relaxed)
}

/// Reads the settings at start-up; in the program `prezero run` executes,
/// starts now.
pub fn configure(cfg: &Config) {
    if !cfg.lazy {
        return;
    }
    // The main thread's, at load time: what numactl set for the process.
    lanes::take_process_policy();
    let s = &SETTINGS;
    s.reserve_bytes.store(cfg.reserve, Ordering::Relaxed);
    s.smallest_mapping
        .store(cfg.threshold.max(HUGE), Ordering::Relaxed);
    s.idle_ms
        .store(cfg.idle_secs.saturating_mul(1000), Ordering::Relaxed);
    s.no_userfaultfd
        .store(cfg.no_userfaultfd, Ordering::Relaxed);
    s.say_why.store(cfg.program, Ordering::Relaxed);
    s.fill.store(cfg.program, Ordering::Relaxed);
    reserve::fill_ahead(cfg.ahead);
    pause::register();
    crate::pressure::register(&PRESSURE_HOOKS);
    // The cache reaches the lazy mode only through these (the contract:
    // `cache/hooks.rs`); each does the plain thing until the lazy mode runs
    // in this process.
    crate::cache::set_hooks(crate::cache::Hooks {
        before_alloc: || {
            ensure_started();
        },
        realloc_move: realloc::moving,
        releasing: recycle::recycle,
    });
    STATE.store(WANTED, Ordering::Release);
    // Threads at load only where memory is to be filled ahead (a reserve
    // asked for, or the program's history): any other program starts none
    // before its first large block or mapping.
    if cfg.program && cfg.ahead > 0 {
        ensure_started();
    }
}

/// Whether the lazy mode was asked for (started or not): `mmap`'s first look.
#[inline]
pub fn wanted() -> bool {
    STATE.load(Ordering::Acquire) != OFF
}

/// The smallest mapping worth registering ([`Settings::smallest_mapping`]).
pub fn smallest_mapping() -> usize {
    SETTINGS.smallest_mapping.load(Ordering::Relaxed)
}

/// Starts the lazy mode if it was asked for and has not been tried, or
/// resumes it: true if it runs.
pub fn ensure_started() -> bool {
    // After a seccomp filter nothing starts (see `crate::threads::never`).
    if crate::threads::never() {
        return STATE.load(Ordering::Acquire) == ON;
    }
    match STATE.load(Ordering::Acquire) {
        ON => return true,
        WANTED => {}
        SUSPENDED if OWNER.load(Ordering::Relaxed) == sys::getpid() => return pause::resume(),
        FAILED => {
            close_left();
            return false;
        }
        _ => return false,
    }
    if STATE
        .compare_exchange(WANTED, STARTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // Another thread starts it; its first requests go without.
        return STATE.load(Ordering::Acquire) == ON;
    }
    match start() {
        // A stop or a retirement may have suspended it meanwhile.
        Ok(()) => STATE.load(Ordering::Acquire) == ON,
        Err(why) => {
            if SETTINGS.say_why.load(Ordering::Relaxed) {
                why.print();
            }
            STATE.store(FAILED, Ordering::Release);
            false
        }
    }
}

/// Whether the lazy mode serves or is starting to (its threads run): what
/// the handler and the workers look at. Registering takes `ON` itself,
/// under `POP`.
fn serving() -> bool {
    matches!(STATE.load(Ordering::Acquire), ON | STARTING)
}

/// Whether this process's lazy mode runs: a system call (`getpid`) beside
/// the state, for the paths that use the descriptor from program threads.
pub fn active() -> bool {
    STATE.load(Ordering::Acquire) == ON && OWNER.load(Ordering::Relaxed) == sys::getpid()
}

/// Moves `fd` to a high number: a program that opens and closes many files
/// is less likely to close ours by mistake (the handler would read another
/// file's bytes).
fn high(fd: i32) -> i32 {
    let Ok(hi) = sys::dup_above(fd, 512) else {
        return fd;
    };
    uffd::close(fd);
    hi
}

fn start() -> Result<(), Why> {
    if SETTINGS.no_userfaultfd.load(Ordering::Relaxed) {
        return Err(Why::Disabled);
    }
    if !sys::data_unlimited() {
        return Err(Why::DataLimit);
    }
    read_thp_mode();
    // The clearing kernels' choice, made once: here, not in the handler's
    // first scrub, where reading the profile could allocate and wait on a
    // lock a faulting thread holds.
    let _ = prezero::active_size_classes();
    let fd = high(uffd::open().map_err(Why::Refused)?);
    let fail = |why: Why| {
        uffd::close(fd);
        why
    };
    uffd::handshake(fd).map_err(|e| fail(Why::NoMove(e)))?;
    // The handler waits in `poll`, a second at most, between reads.
    uffd::set_nonblocking(fd).map_err(|e| fail(Why::Failed("the userfaultfd's flags", e)))?;
    let pm = uffd::open_pagemap().map_err(|e| fail(Why::Failed("/proc/self/pagemap", e)))?;
    let pm = high(pm);
    if fd <= 2 || pm <= 2 {
        // The program closed its standard descriptors and no number above
        // 512 could be had (a low RLIMIT_NOFILE): ours would take them, and
        // its writes to stdout go to the userfaultfd.
        uffd::close(pm);
        return Err(fail(Why::Failed(
            "a descriptor number above the standard ones",
            Errno(libc::EMFILE),
        )));
    }
    let zeroes = sys::map_zeroes(HUGE).map_err(|e| {
        uffd::close(pm);
        fail(Why::Failed("the zero page mapping", e))
    })?;
    ZEROES.store(zeroes, Ordering::Release);
    lanes::init();
    reserve::create(
        fd,
        SETTINGS.reserve_bytes.load(Ordering::Relaxed),
        lanes::count(),
    )
    .map_err(|e| {
        uffd::close(pm);
        fail(Why::Failed(
            "the reserve (mapped, and placed on each NUMA node)",
            e,
        ))
    })?;
    let (dev, ino) = uffd::identity(fd).map_err(|e| {
        uffd::close(pm);
        fail(Why::Failed("the userfaultfd's fstat", e))
    })?;
    UFFD_DEV.store(dev, Ordering::Relaxed);
    UFFD_INO.store(ino, Ordering::Relaxed);
    UFFD.store(fd, Ordering::Release);
    PAGEMAP.store(pm, Ordering::Release);
    OWNER.store(sys::getpid(), Ordering::Release);
    touch_active();
    // Before the cache's range is registered: a fault there needs them
    // (the state STARTING: they run, nothing registered yet).
    if !pause::start_threads() {
        // Nothing is registered to the descriptor that could wait on it.
        uffd::close(pm);
        return Err(fail(Why::Failed(
            "the fault handler thread",
            Errno(libc::EAGAIN),
        )));
    }
    pause::go_live();
    if SETTINGS.fill.load(Ordering::Relaxed) {
        reserve::start_filling(lanes::of_caller());
    }
    crate::pressure::watch();
    sys::atfork(None, None, Some(in_child));
    Ok(())
}

/// Whether the descriptor is still the userfaultfd opened at the start (a
/// program that closes every descriptor it did not open, a daemon's
/// `close_range`, closes it, and may open another file at its number).
fn still_ours() -> bool {
    uffd::identity(fd()).is_ok_and(|(dev, ino)| {
        dev == UFFD_DEV.load(Ordering::Relaxed) && ino == UFFD_INO.load(Ordering::Relaxed)
    })
}

/// Stops the lazy mode for good (the handler, whose descriptor is gone or
/// failed): the program's later calls go straight to the kernel, and no
/// path uses the descriptor's number again (the program's file, if it
/// opened one there). Where the descriptor is still ours it is closed: the
/// kernel unregisters its ranges and wakes their faults, as it did when the
/// program closed it.
fn stop() {
    stop_leaving(false);
}

/// [`stop`], leaving the descriptors open where `program_closes` (the
/// program's own `close` of them follows, and must not find them gone).
fn stop_leaving(program_closes: bool) {
    STATE.store(FAILED, Ordering::Release);
    // The reserve serves no fault any more: the workers give it back now
    // (idle at once, never filling again).
    LAST_ACTIVE.store(0, Ordering::Relaxed);
    reserve::stop_filling();
    if sys::own_descriptors() {
        // The handler: its descriptors are its own (`pause.rs`) and go with
        // it; the program's go as a worker ends, or at the program's next
        // call (`close_left`).
        return;
    }
    let ours = still_ours() && !program_closes;
    let fd = UFFD.swap(-1, Ordering::AcqRel);
    if ours {
        uffd::close(fd);
    }
}

/// A program's thread, after the lazy mode stopped on a thread of ours:
/// the descriptor the program's table still holds, closed where it is
/// still ours (not a file the program opened at its number since).
fn close_left() {
    let failed = STATE.load(Ordering::Acquire) == FAILED;
    if !failed || UFFD.load(Ordering::Relaxed) < 0 || sys::own_descriptors() {
        return;
    }
    let ours = still_ours();
    let fd = UFFD.swap(-1, Ordering::AcqRel);
    if ours {
        uffd::close(fd);
    }
}

/// The handler, ending after the lazy mode stopped for good: the workers
/// end too, and close the descriptor the program's table holds (the
/// handler's table is its own).
fn stopped_for_good() {
    if STATE.load(Ordering::Acquire) == FAILED {
        reserve::stop_filling();
    }
}

/// Why the lazy mode stops while the program runs.
#[derive(Clone, Copy)]
enum Stop {
    /// Its calls keep failing (the last error): the faults it could not
    /// serve would otherwise wait for ever.
    Refused(Errno),
    /// The program closes the userfaultfd or the pagemap's descriptor, or
    /// puts another file at its number.
    Closed,
}

/// Stops the lazy mode for good: every range still registered is
/// unregistered first (which wakes its faults, and holds where a child's
/// copy of the descriptor keeps it open after this process closed it), then
/// [`stop`] closes it: from then on the kernel serves every fault. Says why
/// once.
fn give_up(why: Stop) {
    // The program's own call closes what it closes: a descriptor gone
    // before it would make that call fail (EBADF) where it would not
    // plainly. The handler, blocked in its read, sleeps on for good.
    let program_closes = matches!(why, Stop::Closed);
    if still_ours() {
        let fd = fd();
        if let Some((base, len)) = crate::cache::range() {
            let _ = uffd::unregister(fd, base, len);
        }
        // The table under POP, if it can be had: its holder may wait on a
        // fault of this thread's to serve; closing wakes those anyway. The
        // handler unregisters it as it ends, serving meanwhile.
        if !sys::own_descriptors() {
            if let Some(mut g) = PopGuard::own_within(10 * 1000) {
                let t = g.table();
                for i in 0..t.len() {
                    let r = t.get(i);
                    let _ = uffd::unregister(fd, r.start, r.end - r.start);
                }
            }
        }
        use std::io::Write;
        let mut buf = [0u8; 256];
        let mut w = &mut buf[..];
        let _ = write!(w, "prezero: --lazy stopped: ");
        let _ = match why {
            Stop::Refused(e) => write!(w, "the kernel refuses its calls ({})", sys::strerror(e)),
            Stop::Closed => write!(w, "the program closes its descriptors"),
        };
        let _ = writeln!(w, "; the kernel serves every fault from now on");
        let used = 256 - w.len();
        sys::write_stderr(&buf[..used]);
    }
    stop_leaving(program_closes);
}

/// The program is about to close (or replace with `dup2`) the descriptors
/// `[lo, hi]`: where the lazy mode's are among them, it stops first, while
/// its descriptor can still unregister what it holds (a child made without
/// fork handlers may keep a copy open, and with it every fault waiting).
pub fn closing(lo: i32, hi: i32) {
    let ours = |fd: i32| fd >= 0 && lo <= fd && fd <= hi;
    // The numbers first: `active` makes a system call.
    if (ours(fd()) || ours(PAGEMAP.load(Ordering::Relaxed))) && active() {
        give_up(Stop::Closed);
    }
}

fn is_huge(at: usize) -> bool {
    let mut out = [uffd::Region::default(); 1];
    let pm = PAGEMAP.load(Ordering::Relaxed);
    matches!(
        uffd::scan(pm, at, at + HUGE, uffd::PAGE_IS_HUGE, uffd::PAGE_IS_PRESENT, uffd::PAGE_IS_HUGE, &mut out),
        Ok((1, _)) if out[0].start as usize == at && out[0].end as usize == at + HUGE
    )
}

/// The kernel's THP mode is `always`: it may fault a huge page into any
/// mapping that did not say `MADV_NOHUGEPAGE` (allocated and zeroed before
/// the fault is reported, then freed), so registered mappings say it.
/// Under `madvise` or `never` they say nothing, and keep merging with
/// their neighbours as the program's own mappings would.
static THP_ALWAYS: AtomicBool = AtomicBool::new(false);

fn thp_always() -> bool {
    THP_ALWAYS.load(Ordering::Relaxed)
}

/// Reads the kernel's THP mode into [`THP_ALWAYS`].
fn read_thp_mode() {
    let always = sys::thp_mode() == Some(sys::ThpMode::Always);
    THP_ALWAYS.store(always, Ordering::Relaxed);
}

/// Set once the program installs a guard region (`MADV_GUARD_INSTALL`,
/// through the C library's `madvise`): a fill of small pages maps a page
/// over a guard's marker (`UFFDIO_COPY` takes it for a missing page), and a
/// huge page moved over one erases it; from then on the handler looks for
/// them first.
static GUARDS: AtomicBool = AtomicBool::new(false);

/// The program installs a guard region: whether one was installed before.
pub fn guards_installed() -> bool {
    GUARDS.swap(true, Ordering::Relaxed)
}

/// The program's first guard region was refused: none to look for.
pub fn no_guards() {
    GUARDS.store(false, Ordering::Relaxed);
}

/// Whether `[at, at + len)` may hold a guard page: once the program
/// installed any, one found there, or the kernel cannot say (its scan knows
/// guards from 6.14).
fn guarded(at: usize, len: usize) -> bool {
    if !GUARDS.load(Ordering::Relaxed) {
        return false;
    }
    let mut out = [uffd::Region::default(); 1];
    let pm = PAGEMAP.load(Ordering::Relaxed);
    let guard = uffd::PAGE_IS_GUARD;
    !matches!(
        uffd::scan(pm, at, at + len, 0, guard, guard, &mut out),
        Ok((0, _))
    )
}

/// Whether no page of `[at, at + len)` is present or swapped out (false if
/// the kernel cannot say).
fn is_empty(at: usize, len: usize) -> bool {
    let mut out = [uffd::Region::default(); 1];
    let pm = PAGEMAP.load(Ordering::Relaxed);
    let any = uffd::PAGE_IS_PRESENT | uffd::PAGE_IS_SWAPPED;
    matches!(
        uffd::scan(pm, at, at + len, 0, any, any, &mut out),
        Ok((0, _))
    )
}

extern "C" fn in_child() {
    crate::pressure::in_child();
    match STATE.load(Ordering::Acquire) {
        ON | SUSPENDED => {}
        FAILED => {
            close_left();
            return;
        }
        _ => return,
    }
    STATE.store(OFF, Ordering::Release);
    uffd::close(UFFD.swap(-1, Ordering::AcqRel));
    uffd::close(PAGEMAP.swap(-1, Ordering::AcqRel));
    // SAFETY: the child's only thread: a parent's thread that held POP at
    // the fork is not here.
    unsafe { POP.reset() };
    // SAFETY: as for POP: nor is one that may have been changing the table.
    unsafe { (*TABLE.0.get()).clear() };
    stats::LAZY.reset();
}
