//! The daemon's background thread: it makes released segments zero again and
//! verifies them, and creates and destroys segments, so the event loop never
//! spends more than a system call on any one client.
//!
//! Two ways to make a segment zero ([`Clean`]): scrub it in place with
//! streaming stores (~85 GB/s a thread on a Zen 4), or punch the whole file and
//! fault fresh pages in, which the kernel zeroes (~10 GB/s). Only fresh pages
//! are out of reach of a page reference the last tenant kept without a file
//! (an io_uring fixed buffer, a `vmsplice`d pipe, a VFIO or RDMA pin), so the
//! event loop asks for them whenever a segment passes to another uid. Either
//! way every page is faulted in first with `MADV_POPULATE_WRITE`, so a page a
//! tenant punched out is an error, not a SIGBUS. When clients are being refused
//! for want of ready memory the event loop raises the thread to normal priority
//! and it faults pages in on every core.

use std::ops::ControlFlow;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::cgroup::Opened;
use super::charged::{self, Board, Op, Verify};
use super::ledger::Clean;
use super::segment::{Home, Segment};
use crate::{Error, Result};
use prezero::clear::{clear_bounded_with, Temperature};
use prezero::pool::ScrubPriority;
use prezero::region::PageKind;
use prezero_sys as sys;

/// Bytes faulted in, scrubbed or verified between checks for shutdown and
/// for a client mapping its hand-out: 16 MiB is ~1.6 ms of kernel zeroing on
/// one thread, ~0.2 ms of streaming stores.
const STEP: usize = 16 << 20;

/// A tenant cgroup a job runs in: its key in the daemon, and its directories.
#[derive(Clone)]
pub(crate) struct Placed {
    pub(crate) key: u64,
    pub(crate) cg: Arc<Opened>,
}

pub(crate) enum Job {
    /// Quarantined segments the lease check found unheld (or ready segments of
    /// one uid wanted by another): each is made zero and verified, in the
    /// cgroup it names (its own thread and child, `charged.rs`) or here.
    Clean(Vec<(u64, Segment, Option<Placed>)>, Clean),
    Create {
        pool: usize,
        page: PageKind,
        len: usize,
        home: Home,
        /// The cgroup its pages are faulted in from (charged to): a part
        /// prepared for it. `None`: the shared pool, here.
        place: Option<Placed>,
    },
    /// Punching and closing frees hugetlb pages: milliseconds per GiB.
    Destroy(Segment),
}

pub(crate) enum Done {
    Cleaned {
        id: u64,
        seg: Segment,
        how: Clean,
        /// Offset of a non-zero byte found by verification.
        bad: Option<usize>,
        clean: Duration,
        verify: Duration,
        verified: usize,
        /// The CPU the work took (its child's, or this thread's).
        cpu: Duration,
        /// The cgroup it ran in, when it ran in the one asked for; `None`
        /// when it ran here (asked for, or where the cgroup refused a child).
        ran_in: Option<u64>,
    },
    /// The fresh pages could not be had (a hugetlb shortage, perhaps made by a
    /// tenant that punched holes and took the pages): the segment is destroyed.
    Lost { id: u64, why: Error },
    /// A page is not on the segment's node (a tenant punched a hole and
    /// faulted it in elsewhere; a scrub in place keeps the page where it is):
    /// the segment is destroyed.
    Misplaced { id: u64, why: Error },
    /// Shutdown came first; the segment was unmapped unrefreshed.
    Abandoned { id: u64 },
    Created {
        pool: usize,
        seg: Result<Segment>,
        /// The cgroup its pages are charged to (as asked).
        place: Option<u64>,
        /// The CPU its population took.
        cpu: Duration,
    },
}

pub(crate) struct Worker {
    pub(crate) jobs: Option<Sender<Job>>,
    /// Stop, urgency (clients are being refused for want of ready memory:
    /// normal priority, all cores) and standing back, where the worker's
    /// children see them too.
    board: Arc<Board>,
    priority: ScrubPriority,
    tid: Arc<AtomicI32>,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts the thread. Each result is sent on `done`, then `wake` (an
    /// eventfd) is written so the event loop's poll returns.
    pub(crate) fn spawn(
        priority: ScrubPriority,
        verify: Verify,
        done: Sender<Done>,
        wake: Arc<OwnedFd>,
    ) -> std::io::Result<Worker> {
        let (tx, rx) = std::sync::mpsc::channel();
        let board = Arc::new(Board::new()?);
        let tid = Arc::new(AtomicI32::new(0));
        // The clearing kernel is chosen once, here: a child forked later
        // must find it chosen (choosing allocates).
        let _ = clear_bounded_with(&mut [0u8; 64], Temperature::Cold, STEP, |_| {
            ControlFlow::Continue(())
        });
        let env = Env {
            done,
            wake,
            board: board.clone(),
            verify,
            priority,
        };
        let t = tid.clone();
        let handle = std::thread::Builder::new()
            .name("prezero-serve-scrub".into())
            .spawn(move || {
                t.store(sys::gettid(), Ordering::Release);
                priority.apply_to(0);
                run(rx, &env)
            })?;
        Ok(Worker {
            jobs: Some(tx),
            board,
            priority,
            tid,
            handle: Some(handle),
        })
    }

    /// Raises the thread to normal priority and all cores (`true`), or puts it
    /// back at its configured priority. Takes effect at once, also mid-job: a
    /// `SCHED_IDLE` thread on a busy machine would not run to notice a flag.
    /// An error says the thread could not be raised (without `CAP_SYS_NICE`
    /// a thread cannot leave `SCHED_IDLE` or lower its nice value).
    pub(crate) fn set_urgent(&self, urgent: bool) -> std::io::Result<()> {
        if self.board.set_urgent(urgent) == urgent {
            return Ok(());
        }
        let tid = self.tid.load(Ordering::Acquire);
        if tid == 0 {
            return Ok(());
        }
        if urgent {
            sys::set_normal_priority(tid)?;
        } else {
            self.priority.apply_to(tid);
        }
        Ok(())
    }

    /// Keeps the worker from faulting in pages for `d` from now (unless clients
    /// are being refused: then supply comes first). A client mapping what it
    /// was handed takes the same kernel hugetlb fault locks, each of which the
    /// worker holds while the kernel zeroes a page: measured on a Zen 4, a 4 GiB
    /// hand-out took 1.5 ms alone and 6 ms beside a refresh.
    pub(crate) fn stand_back(&self, d: Duration) {
        self.board.stand_back(d);
    }

    /// Stops after the current step and waits. The thread is lifted to normal
    /// priority first: under `SCHED_IDLE` on a busy machine it might otherwise not
    /// run for seconds.
    pub(crate) fn shutdown(&mut self) {
        self.board.stop();
        self.jobs = None;
        let tid = self.tid.load(Ordering::Acquire);
        if tid != 0 {
            let _ = sys::set_sched_normal(tid);
        }
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// What every job of the thread needs (and each thread of a job in a
/// tenant's cgroup, a clone of it).
#[derive(Clone)]
struct Env {
    done: Sender<Done>,
    wake: Arc<OwnedFd>,
    board: Arc<Board>,
    verify: Verify,
    priority: ScrubPriority,
}

impl Env {
    /// Sends `d` and wakes the event loop; false once the loop is gone.
    fn report(&self, d: Done) -> bool {
        if self.done.send(d).is_err() {
            return false;
        }
        let _ = sys::eventfd_add(self.wake.as_fd(), 1);
        true
    }

    fn stopping(&self) -> bool {
        self.board.stopping()
    }

    /// Waits while a client maps its hand-out (see [`Worker::stand_back`]);
    /// between steps of every phase, so a client's mapping does not share the
    /// memory bandwidth with a scrub or a read-back either.
    fn wait_quiet(&self) {
        self.board.wait_quiet();
    }

    /// Faults in every page of `seg`, a step at a time, standing back while
    /// clients map their hand-outs. `Ok(false)`: stopped by shutdown.
    fn populate(&self, seg: &Segment) -> Result<bool> {
        let step = STEP.max(seg.page_size());
        let mut off = 0;
        while off < seg.len() {
            self.wait_quiet();
            if self.stopping() {
                return Ok(false);
            }
            let n = step.min(seg.len() - off);
            seg.repopulate(off, n, self.threads(seg))?;
            off += n;
        }
        Ok(true)
    }

    /// Threads for faulting in fresh pages: all cores (of the segment's node)
    /// when clients wait.
    fn threads(&self, seg: &Segment) -> usize {
        if self.board.urgent() {
            sys::online_cpus().min(seg.cpus().len().max(1))
        } else {
            1
        }
    }

    /// Runs `f` at normal priority. Unmapping and punching take our own
    /// `mmap_lock` and the file's mapping lock: a `SCHED_IDLE` thread preempted
    /// while holding one would stall the event loop's next hand-out until a core
    /// fell idle.
    fn at_normal_priority<T>(&self, f: impl FnOnce() -> T) -> T {
        if self.priority == ScrubPriority::Normal || self.board.urgent() {
            return f();
        }
        let _ = sys::set_normal_priority(0);
        let r = f();
        if !self.board.urgent() {
            self.priority.apply_to(0);
        }
        r
    }
}

fn run(rx: Receiver<Job>, env: &Env) {
    while let Ok(job) = rx.recv() {
        let sent = match job {
            Job::Clean(batch, how) => batch.into_iter().all(|(id, seg, place)| match place {
                Some(p) => in_cgroup(env, p, move |env, p| clean_placed(id, seg, how, p, env)),
                None => env.report(clean(id, seg, how, env)),
            }),
            Job::Create {
                pool,
                page,
                len,
                home,
                place: Some(p),
            } => in_cgroup(env, p, move |env, p| {
                let key = p.key;
                let (seg, cpu) = match create_placed(page, len, home, p, env) {
                    Ok((seg, cpu)) => (Ok(seg), cpu),
                    Err(e) => (Err(e), Duration::ZERO),
                };
                Done::Created {
                    pool,
                    seg,
                    place: Some(key),
                    cpu,
                }
            }),
            Job::Create {
                pool,
                page,
                len,
                home,
                place: None,
            } => {
                let cpu = sys::thread_cpu_time();
                let seg =
                    Segment::create(page, len, home).and_then(|seg| match env.populate(&seg) {
                        Ok(true) => seg.check_home().map(|()| seg),
                        Ok(false) => Err(Error::invalid("stopped while creating a segment")),
                        Err(e) => Err(e),
                    });
                let cpu = sys::thread_cpu_time().saturating_sub(cpu);
                env.report(Done::Created {
                    pool,
                    seg,
                    place: None,
                    cpu,
                })
            }
            Job::Destroy(seg) => {
                env.at_normal_priority(|| destroy(seg));
                true
            }
        };
        if !sent {
            return;
        }
    }
}

/// Runs `work` for the cgroup `p` on a thread of its own (at the worker's
/// priority) and reports what it did: a tenant that throttles or freezes its
/// cgroup delays its own segments, not the worker. False once the event
/// loop is gone.
fn in_cgroup(
    env: &Env,
    p: Placed,
    work: impl FnOnce(&Env, Placed) -> Done + Send + 'static,
) -> bool {
    let mine = env.clone();
    let spawned = std::thread::Builder::new()
        .name("prezero-serve-cg".into())
        .spawn(move || {
            mine.priority.apply_to(0);
            let done = work(&mine, p);
            mine.report(done);
        });
    spawned.is_ok()
}

/// Why a child did not finish its work.
enum ChildEnd {
    /// The cgroup would not take it (removed, controllers in its subtree, a
    /// kernel before 5.7): the work may be done elsewhere.
    Refused(std::io::Error),
    /// A page could not be had there (its limit, a hugetlb shortage).
    NoPage(std::io::Error),
    /// The worker is stopping.
    Stopped,
    /// Killed for overstaying its deadline (a frozen or throttled cgroup):
    /// its memory is in an unknown state.
    Overstayed,
    /// Ended by a signal not of the daemon's (the OOM killer of its cgroup,
    /// `cgroup.kill`): its memory is in an unknown state.
    Signalled,
}

/// Runs `op` on `seg` in a child inside `p`'s cgroup (`charged.rs`); what
/// it found and the CPU it used.
fn run_child(
    seg: &Segment,
    op: Op,
    p: &Placed,
    env: &Env,
) -> std::result::Result<(charged::Found, Duration), ChildEnd> {
    let out = charged::Outcome::new().map_err(ChildEnd::Refused)?;
    let (v2, v1) = p.cg.entry();
    let (ptr, len) = seg.memory();
    let task = charged::Task {
        ptr,
        len,
        page: seg.page_size(),
        op,
        verify: env.verify,
        step: STEP,
        enter: &v1,
    };
    let board = &*env.board;
    // SAFETY: child_main makes only system calls and plain memory accesses,
    // allocates nothing, takes no lock and does not unwind (charged.rs); what
    // it captures was made before the fork.
    let child = unsafe { sys::fork_into(v2, || charged::child_main(&task, board, &out)) }
        .map_err(ChildEnd::Refused)?;
    // Generous: a cgroup throttled to a tenth of a core still scrubs a GiB
    // in seconds. Past it the child is killed and the segment destroyed.
    let deadline = Instant::now() + Duration::from_secs(30 + (len >> 25) as u64);
    let exit = child
        .wait(deadline, || board.stopping())
        .map_err(ChildEnd::Refused)?;
    let found = out.read();
    let errno = || std::io::Error::from_raw_os_error(found.errno);
    match exit.code {
        // The child's page tables were its own: the daemon maps what it
        // faulted in (the pages exist, so this allocates and charges
        // nothing) before it looks where they are.
        Some(charged::status::DONE) => match seg.repopulate(0, len, 1) {
            Ok(()) => Ok((found, exit.cpu)),
            Err(e) => Err(ChildEnd::NoPage(std::io::Error::from_raw_os_error(
                e.errno(),
            ))),
        },
        Some(charged::status::NOT_ENTERED) => Err(ChildEnd::Refused(errno())),
        Some(charged::status::NO_PAGE) => Err(ChildEnd::NoPage(errno())),
        _ if board.stopping() => Err(ChildEnd::Stopped),
        None if !exit.killed => Err(ChildEnd::Signalled),
        _ => Err(ChildEnd::Overstayed),
    }
}

/// A new segment whose pages a child inside `p`'s cgroup faults in (so they
/// are charged there), with the CPU that took.
fn create_placed(
    page: PageKind,
    len: usize,
    home: Home,
    p: Placed,
    env: &Env,
) -> Result<(Segment, Duration)> {
    let seg = Segment::create(page, len, home)?;
    let _pinned = Pinned::to(seg.cpus());
    let name = crate::cgroup::parse::display(&p.cg.name);
    match run_child(&seg, Op::Create, &p, env) {
        Ok((_, cpu)) => seg.check_home().map(|()| (seg, cpu)),
        Err(ChildEnd::Refused(e)) => Err(Error::invalid(format!("cgroup {name} takes no child: {e}"))),
        Err(ChildEnd::NoPage(e)) => Err(Error::invalid(format!(
            "cgroup {name} could not have the segment's pages ({e}): its hugetlb or memory limit, \
             or a shortage"
        ))),
        Err(ChildEnd::Stopped) => Err(Error::invalid("stopped while creating a segment")),
        Err(ChildEnd::Overstayed) => Err(Error::invalid(format!(
            "cgroup {name} kept the child that fills its segment past its deadline (frozen or throttled)"
        ))),
        Err(ChildEnd::Signalled) => Err(Error::invalid(format!(
            "the child that fills a segment in cgroup {name} was killed (its OOM killer?)"
        ))),
    }
}

/// [`clean`] inside `p`'s cgroup. Where the cgroup takes no child, a scrub in
/// place is done here (the daemon counts its CPU to the cgroup); fresh pages
/// are not (they would be charged here, not where the segment is placed).
fn clean_placed(id: u64, seg: Segment, how: Clean, p: Placed, env: &Env) -> Done {
    let _pinned = Pinned::to(seg.cpus());
    if how == Clean::Fresh {
        if let Err(why) = env.at_normal_priority(|| seg.punch()) {
            env.at_normal_priority(|| drop(seg));
            return Done::Lost { id, why };
        }
    }
    let op = match how {
        Clean::InPlace => Op::Scrub,
        Clean::Fresh => Op::Populate,
    };
    let lost = |why, seg| {
        env.at_normal_priority(|| destroy(seg));
        Done::Lost { id, why }
    };
    match run_child(&seg, op, &p, env) {
        Ok((found, cpu)) => {
            if let Err(why) = seg.check_home() {
                env.at_normal_priority(|| destroy(seg));
                return Done::Misplaced { id, why };
            }
            Done::Cleaned {
                id,
                seg,
                how,
                bad: found.bad,
                clean: found.work,
                verify: found.verify,
                verified: found.verified,
                cpu,
                ran_in: Some(p.key),
            }
        }
        Err(ChildEnd::Refused(_)) if how == Clean::InPlace => clean(id, seg, how, env),
        Err(ChildEnd::Refused(e) | ChildEnd::NoPage(e)) => {
            lost(Error::os("a child in the segment's cgroup", e), seg)
        }
        Err(ChildEnd::Signalled) => lost(
            Error::invalid("the child that cleans it in its cgroup was killed (its OOM killer?)"),
            seg,
        ),
        Err(ChildEnd::Overstayed) => lost(
            Error::invalid(
                "its cgroup kept the child that cleans it past its deadline (frozen or throttled)",
            ),
            seg,
        ),
        Err(ChildEnd::Stopped) => {
            env.at_normal_priority(|| drop(seg));
            Done::Abandoned { id }
        }
    }
}

/// Gives back a segment nobody else holds: its pages go back to the hugetlb
/// pool even if an `O_PATH` descriptor somewhere keeps the inode alive.
fn destroy(seg: Segment) {
    let _ = seg.punch();
    drop(seg);
}

/// The calling thread on `cpus` until dropped, then on the CPUs it had
/// (nothing, for no CPUs, or an affinity that could not be read).
struct Pinned(Option<Vec<usize>>);

impl Pinned {
    fn to(cpus: &[usize]) -> Pinned {
        if cpus.is_empty() {
            return Pinned(None);
        }
        let before = sys::thread_affinity().ok();
        let _ = sys::set_thread_affinity(cpus);
        Pinned(before)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(cpus) = &self.0 {
            let _ = sys::set_thread_affinity(cpus);
        }
    }
}

fn clean(id: u64, seg: Segment, how: Clean, env: &Env) -> Done {
    let len = seg.len();
    let t = Instant::now();
    let cpu = sys::thread_cpu_time();
    // The scrub in place runs here: from the segment's node, as its fill
    // does; the worker's own CPUs again once it is done.
    let _pinned = Pinned::to(seg.cpus());
    if how == Clean::Fresh {
        if let Err(why) = env.at_normal_priority(|| seg.punch()) {
            env.at_normal_priority(|| drop(seg));
            return Done::Lost { id, why };
        }
    }
    match env.populate(&seg) {
        Ok(true) => {}
        Ok(false) => {
            env.at_normal_priority(|| drop(seg));
            return Done::Abandoned { id };
        }
        Err(why) => {
            env.at_normal_priority(|| destroy(seg));
            return Done::Lost { id, why };
        }
    }
    if let Err(why) = seg.check_home() {
        env.at_normal_priority(|| destroy(seg));
        return Done::Misplaced { id, why };
    }
    let (ptr, _) = seg.memory();
    // SAFETY: the event loop sends a segment here only once the lease check has
    // proven that no other open file description exists, and keeps no reference
    // to its memory while the worker owns it; every page was just populated, so
    // no access can fault; the mapping lives as long as `seg`.
    let buf = unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), len) };
    if how == Clean::InPlace {
        let check = |_: usize| env.board.between_steps();
        let cleared = clear_bounded_with(buf, Temperature::Cold, STEP, check).unwrap_or(0);
        if cleared < len {
            return Done::Abandoned { id };
        }
    }
    let clean = t.elapsed();
    let t = Instant::now();
    let (bad, verified) = charged::verify(buf, env.verify, STEP, &env.board);
    if env.stopping() {
        return Done::Abandoned { id };
    }
    Done::Cleaned {
        id,
        seg,
        how,
        bad,
        clean,
        verify: t.elapsed(),
        verified,
        cpu: sys::thread_cpu_time().saturating_sub(cpu),
        ran_in: None,
    }
}
