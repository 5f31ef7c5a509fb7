//! Work on a segment done inside a tenant's cgroup, so the kernel charges
//! it there: the pages a child faults in (`hugetlb.<size>.current`, and
//! `memory.current` where hugetlb counts as memory) and the CPU it spends
//! populating, scrubbing and verifying (`cpu.stat`, under `cpu.max`).
//!
//! The child is a fork of the daemon (`sys::fork_into`) made inside the
//! cgroup's v2 directory, or moved into its v1 hierarchies by writing to
//! their `cgroup.procs` first thing. It works on the daemon's own mapping of
//! the segment, which is `MAP_SHARED` and so the same pages in both; it
//! reads the worker's flags (stop, stand back) from the [`Board`], a shared
//! page, and writes what it found to an [`Outcome`], another. It allocates
//! nothing and takes no lock: the daemon has other threads, whose locks the
//! fork may have copied held. The parent kills it past a deadline, so a
//! tenant that freezes or throttles its cgroup delays only its own segments.

use std::ops::ControlFlow;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prezero::clear::{clear_bounded_with, Temperature};
use prezero_sys as sys;

/// How much of a scrubbed segment is read back before it is handed out again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Every byte (the default).
    Full,
    /// The first cache line of one 4 KiB page in every `one_in`: for machines
    /// where the full read-back costs too much, by explicit configuration only.
    Sampled {
        /// Pages per sampled page (at least 1).
        one_in: usize,
    },
}

/// Flags the worker sets and its children read: on a shared page, so a
/// child forked before a change sees it.
pub(crate) struct Board(NonNull<BoardFields>);

struct BoardFields {
    stop: AtomicBool,
    /// Clients are being refused for want of ready memory: no standing back.
    urgent: AtomicBool,
    /// Until when (ns of `CLOCK_MONOTONIC`) no pages are faulted in.
    quiet_until: AtomicU64,
}

// SAFETY: the page is only reached through atomics, and lives until the
// Board is dropped (it is never unmapped while shared: see Drop).
unsafe impl Send for Board {}
// SAFETY: as above.
unsafe impl Sync for Board {}

/// Nanoseconds of `CLOCK_MONOTONIC`, the same in a forked child (an
/// `Instant` is a reading of it).
fn now_ns() -> u64 {
    prezero_sys::monotonic_ns()
}

impl Board {
    pub(crate) fn new() -> std::io::Result<Board> {
        let page = sys::mmap_shared_anon(sys::page_size())?;
        // A fresh anonymous page reads zero: every flag false, every time 0,
        // which is each atomic's valid value.
        Ok(Board(page.cast()))
    }

    fn fields(&self) -> &BoardFields {
        // SAFETY: the page is mapped for the Board's life and zero-initialised
        // atomics are valid values.
        unsafe { self.0.as_ref() }
    }

    pub(crate) fn stopping(&self) -> bool {
        self.fields().stop.load(Ordering::Acquire)
    }

    pub(crate) fn stop(&self) {
        self.fields().stop.store(true, Ordering::Release);
    }

    pub(crate) fn urgent(&self) -> bool {
        self.fields().urgent.load(Ordering::Acquire)
    }

    /// Sets the flag; its previous value.
    pub(crate) fn set_urgent(&self, on: bool) -> bool {
        self.fields().urgent.swap(on, Ordering::AcqRel)
    }

    /// No pages faulted in for `d` from now (see `Worker::stand_back`).
    pub(crate) fn stand_back(&self, d: Duration) {
        let until = now_ns().saturating_add(d.as_nanos() as u64);
        self.fields().quiet_until.fetch_max(until, Ordering::AcqRel);
    }

    /// Between two steps of a clear: waits while a client maps its hand-out,
    /// then says whether to go on (not once the worker stops).
    pub(crate) fn between_steps(&self) -> ControlFlow<()> {
        self.wait_quiet();
        if self.stopping() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    /// Waits while a client maps its hand-out, unless stopping or urgent.
    pub(crate) fn wait_quiet(&self) {
        while !self.stopping() && !self.urgent() {
            let now = now_ns();
            let until = self.fields().quiet_until.load(Ordering::Acquire);
            if now >= until {
                return;
            }
            std::thread::sleep(Duration::from_nanos(until - now));
        }
    }
}

impl Drop for Board {
    fn drop(&mut self) {
        // Children that may still read it hold their own mapping of the page.
        // SAFETY: the page was mapped in `new` and nothing borrows it now.
        let _ = unsafe { sys::munmap(self.0.cast(), sys::page_size()) };
    }
}

/// What a child does to a segment's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Fault every page in: a new segment, whose pages the kernel just zeroed.
    Create,
    /// Fault every page in (fresh pages after a punch), then verify.
    Populate,
    /// Fault in what a tenant punched out, clear in place, verify.
    Scrub,
}

/// How a child's work ended (its exit status).
pub(crate) mod status {
    pub(crate) const DONE: i32 = 0;
    /// It could not move itself into a v1 hierarchy (`Outcome::errno`).
    pub(crate) const NOT_ENTERED: i32 = 2;
    /// The worker is stopping.
    pub(crate) const STOPPED: i32 = 3;
    /// A page could not be faulted in (`Outcome::errno`): the cgroup's limit,
    /// a hugetlb shortage, a page a tenant punched out.
    pub(crate) const NO_PAGE: i32 = 4;
}

/// What a child found, on a shared page.
pub(crate) struct Outcome(NonNull<OutcomeFields>);

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) errno: i32,
    /// Offset of a byte that was not zero after the work.
    pub(crate) bad: Option<usize>,
    pub(crate) verified: usize,
    pub(crate) work: Duration,
    pub(crate) verify: Duration,
}

struct OutcomeFields {
    errno: AtomicI32,
    /// Offset + 1 of a non-zero byte; 0: none.
    bad: AtomicU64,
    verified: AtomicU64,
    work_ns: AtomicU64,
    verify_ns: AtomicU64,
}

// SAFETY: as for Board: atomics on a page mapped for the value's life.
unsafe impl Send for Outcome {}

impl Outcome {
    pub(crate) fn new() -> std::io::Result<Outcome> {
        Ok(Outcome(sys::mmap_shared_anon(sys::page_size())?.cast()))
    }

    fn fields(&self) -> &OutcomeFields {
        // SAFETY: mapped for the Outcome's life; zero is a valid atomic.
        unsafe { self.0.as_ref() }
    }

    pub(crate) fn read(&self) -> Found {
        let f = self.fields();
        let bad = f.bad.load(Ordering::Acquire);
        Found {
            errno: f.errno.load(Ordering::Acquire),
            bad: (bad != 0).then(|| (bad - 1) as usize),
            verified: f.verified.load(Ordering::Acquire) as usize,
            work: Duration::from_nanos(f.work_ns.load(Ordering::Acquire)),
            verify: Duration::from_nanos(f.verify_ns.load(Ordering::Acquire)),
        }
    }
}

impl Drop for Outcome {
    fn drop(&mut self) {
        // SAFETY: mapped in `new`; the child that wrote it has been reaped.
        let _ = unsafe { sys::munmap(self.0.cast(), sys::page_size()) };
    }
}

/// The memory a child works on, and how.
pub(crate) struct Task<'a> {
    pub(crate) ptr: NonNull<u8>,
    pub(crate) len: usize,
    pub(crate) page: usize,
    pub(crate) op: Op,
    pub(crate) verify: Verify,
    /// Bytes between looks at the board.
    pub(crate) step: usize,
    /// v1 hierarchies' `cgroup.procs` to write "0" to first.
    pub(crate) enter: &'a [BorrowedFd<'a>],
}

/// The child's whole life: allocation-free and lock-free (see the module
/// comment). Returns its exit status.
pub(crate) fn child_main(t: &Task<'_>, board: &Board, out: &Outcome) -> i32 {
    let o = out.fields();
    let fail = |code, e: std::io::Error| {
        o.errno
            .store(e.raw_os_error().unwrap_or(libc::EIO), Ordering::Release);
        code
    };
    for &procs in t.enter {
        if let Err(e) = sys::write_all_once(procs, b"0") {
            return fail(status::NOT_ENTERED, e);
        }
    }
    let started = Instant::now();
    let step = t.step.max(t.page);
    let mut off = 0;
    while off < t.len {
        board.wait_quiet();
        if board.stopping() {
            return status::STOPPED;
        }
        let n = step.min(t.len - off);
        // SAFETY: off < len: inside the mapping.
        let at = unsafe { t.ptr.as_ptr().add(off) };
        if let Err(e) = sys::madvise(at, n, sys::Advice::PopulateWrite) {
            return fail(status::NO_PAGE, e);
        }
        off += n;
    }
    // SAFETY: the daemon hands a segment to a child only once no other
    // process holds it (the lease check) and keeps away from its memory
    // until the child is reaped; every page was just populated, so nothing
    // faults; the mapping outlives the child.
    let buf = unsafe { std::slice::from_raw_parts_mut(t.ptr.as_ptr(), t.len) };
    if t.op == Op::Scrub {
        // The kernel was chosen before the fork (the worker warms it), so
        // this only clears.
        let check = |_: usize| board.between_steps();
        let cleared = clear_bounded_with(buf, Temperature::Cold, t.step, check).unwrap_or(0);
        if cleared < t.len {
            return status::STOPPED;
        }
    }
    o.work_ns
        .store(started.elapsed().as_nanos() as u64, Ordering::Release);
    if t.op == Op::Create {
        return status::DONE;
    }
    let started = Instant::now();
    let (bad, verified) = verify(buf, t.verify, t.step, board);
    if board.stopping() {
        return status::STOPPED;
    }
    o.bad
        .store(bad.map_or(0, |b| b as u64 + 1), Ordering::Release);
    o.verified.store(verified as u64, Ordering::Release);
    o.verify_ns
        .store(started.elapsed().as_nanos() as u64, Ordering::Release);
    status::DONE
}

/// Reads `buf` back as `how` says: the offset of a non-zero byte, if any,
/// and the bytes read. Stops early (with what it read) once the board says so.
pub(crate) fn verify(
    buf: &[u8],
    how: Verify,
    step: usize,
    board: &Board,
) -> (Option<usize>, usize) {
    let mut verified = 0;
    match how {
        Verify::Full => {
            for (i, chunk) in buf.chunks(step).enumerate() {
                board.wait_quiet();
                if board.stopping() {
                    break;
                }
                if let Some(off) = prezero::first_nonzero(chunk) {
                    return (Some(i * step + off), verified);
                }
                verified += chunk.len();
            }
        }
        Verify::Sampled { one_in } => {
            for page in (0..buf.len()).step_by(4096 * one_in.max(1)) {
                let line = &buf[page..(page + 64).min(buf.len())];
                if let Some(off) = prezero::first_nonzero(line) {
                    return (Some(page + off), verified);
                }
                verified += line.len();
            }
        }
    }
    (None, verified)
}
