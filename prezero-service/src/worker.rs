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
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::ledger::Clean;
use super::segment::{Home, Segment};
use prezero::clear::{clear_bounded_with, Temperature};
use prezero::pool::ScrubPriority;
use prezero::region::PageKind;
use prezero::sys;
use prezero::{Error, Result};

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

/// Bytes faulted in, scrubbed or verified between checks for shutdown and
/// for a client mapping its hand-out: 16 MiB is ~1.6 ms of kernel zeroing on
/// one thread, ~0.2 ms of streaming stores.
const STEP: usize = 16 << 20;

pub(crate) enum Job {
    /// Quarantined segments the lease check found unheld (or ready segments of
    /// one uid wanted by another): each is made zero and verified.
    Clean(Vec<(u64, Segment)>, Clean),
    Create {
        pool: usize,
        page: PageKind,
        len: usize,
        home: Home,
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
    },
    /// The fresh pages could not be had (a hugetlb shortage, perhaps made by a
    /// tenant that punched holes and took the pages): the segment is destroyed.
    Lost {
        id: u64,
        why: Error,
    },
    /// A page is not on the segment's node (a tenant punched a hole and
    /// faulted it in elsewhere; a scrub in place keeps the page where it is):
    /// the segment is destroyed.
    Misplaced {
        id: u64,
        why: Error,
    },
    /// Shutdown came first; the segment was unmapped unrefreshed.
    Abandoned {
        id: u64,
    },
    Created {
        pool: usize,
        seg: Result<Segment>,
    },
}

pub(crate) struct Worker {
    pub(crate) jobs: Option<Sender<Job>>,
    pub(crate) stop: Arc<AtomicBool>,
    /// Clients are being refused for want of ready memory: normal priority, all cores.
    urgent: Arc<AtomicBool>,
    /// Until when (ns after `epoch`) the worker faults in no pages.
    quiet_until: Arc<AtomicU64>,
    epoch: Instant,
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
        let stop = Arc::new(AtomicBool::new(false));
        let urgent = Arc::new(AtomicBool::new(false));
        let quiet_until = Arc::new(AtomicU64::new(0));
        let epoch = Instant::now();
        let tid = Arc::new(AtomicI32::new(0));
        let (s, u, q, t) = (
            stop.clone(),
            urgent.clone(),
            quiet_until.clone(),
            tid.clone(),
        );
        let handle = std::thread::Builder::new()
            .name("prezero-serve-scrub".into())
            .spawn(move || {
                t.store(sys::gettid(), Ordering::Release);
                priority.apply_to(0);
                let env = Env {
                    done,
                    wake: &wake,
                    stop: &s,
                    urgent: &u,
                    quiet_until: &q,
                    epoch,
                    verify,
                    priority,
                };
                run(rx, &env)
            })?;
        Ok(Worker {
            jobs: Some(tx),
            stop,
            urgent,
            quiet_until,
            epoch,
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
        if self.urgent.swap(urgent, Ordering::AcqRel) == urgent {
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
        let until = (self.epoch.elapsed() + d).as_nanos() as u64;
        self.quiet_until.fetch_max(until, Ordering::AcqRel);
    }

    /// Stops after the current step and waits. The thread is lifted to normal
    /// priority first: under `SCHED_IDLE` on a busy machine it might otherwise not
    /// run for seconds.
    pub(crate) fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
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

/// What every job of the thread needs.
struct Env<'a> {
    done: Sender<Done>,
    wake: &'a OwnedFd,
    stop: &'a AtomicBool,
    urgent: &'a AtomicBool,
    quiet_until: &'a AtomicU64,
    epoch: Instant,
    verify: Verify,
    priority: ScrubPriority,
}

impl Env<'_> {
    /// Sends `d` and wakes the event loop; false once the loop is gone.
    fn report(&self, d: Done) -> bool {
        if self.done.send(d).is_err() {
            return false;
        }
        let _ = sys::eventfd_add(self.wake.as_fd(), 1);
        true
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Waits while a client maps its hand-out (see [`Worker::stand_back`]);
    /// between steps of every phase, so a client's mapping does not share the
    /// memory bandwidth with a scrub or a read-back either.
    fn wait_quiet(&self) {
        while !self.stopping() && !self.urgent.load(Ordering::Acquire) {
            let now = self.epoch.elapsed().as_nanos() as u64;
            let until = self.quiet_until.load(Ordering::Acquire);
            if now >= until {
                return;
            }
            std::thread::sleep(Duration::from_nanos(until - now));
        }
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
        if self.urgent.load(Ordering::Acquire) {
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
        if self.priority == ScrubPriority::Normal || self.urgent.load(Ordering::Acquire) {
            return f();
        }
        let _ = sys::set_normal_priority(0);
        let r = f();
        if !self.urgent.load(Ordering::Acquire) {
            self.priority.apply_to(0);
        }
        r
    }
}

fn run(rx: Receiver<Job>, env: &Env<'_>) {
    while let Ok(job) = rx.recv() {
        let sent = match job {
            Job::Clean(batch, how) => batch
                .into_iter()
                .all(|(id, seg)| env.report(clean(id, seg, how, env))),
            Job::Create {
                pool,
                page,
                len,
                home,
            } => {
                let seg =
                    Segment::create(page, len, home).and_then(|seg| match env.populate(&seg) {
                        Ok(true) => seg.check_home().map(|()| seg),
                        Ok(false) => Err(Error::invalid("stopped while creating a segment")),
                        Err(e) => Err(e),
                    });
                env.report(Done::Created { pool, seg })
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

fn clean(id: u64, seg: Segment, how: Clean, env: &Env<'_>) -> Done {
    let len = seg.len();
    let t = Instant::now();
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
        let check = |_: usize| {
            env.wait_quiet();
            if env.stopping() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        };
        let cleared = clear_bounded_with(buf, Temperature::Cold, STEP, check).unwrap_or(0);
        if cleared < len {
            return Done::Abandoned { id };
        }
    }
    let clean = t.elapsed();
    let t = Instant::now();
    let mut bad = None;
    let mut verified = 0;
    match env.verify {
        Verify::Full => {
            for (i, chunk) in buf.chunks(STEP).enumerate() {
                env.wait_quiet();
                if env.stopping() {
                    return Done::Abandoned { id };
                }
                if let Some(off) = prezero::first_nonzero(chunk) {
                    bad = Some(i * STEP + off);
                    break;
                }
                verified += chunk.len();
            }
        }
        Verify::Sampled { one_in } => {
            for page in (0..len).step_by(4096 * one_in.max(1)) {
                let line = &buf[page..(page + 64).min(len)];
                if let Some(off) = prezero::first_nonzero(line) {
                    bad = Some(page + off);
                    break;
                }
                verified += line.len();
            }
        }
    }
    Done::Cleaned {
        id,
        seg,
        how,
        bad,
        clean,
        verify: t.elapsed(),
        verified,
    }
}
