//! The daemon's background thread: it scrubs released segments with streaming
//! stores and verifies them, and creates new segments, so the event loop never
//! spends more than a system call on any one client.

use std::ops::ControlFlow;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::segment::{held_elsewhere, Segment};
use crate::clear::{clear_bounded_with, Temperature};
use crate::error::Result;
use crate::pool::ScrubPriority;
use crate::region::PageKind;
use crate::sys;

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

/// Bytes between checks for shutdown: 64 MiB is ~3 ms of streaming stores.
const STEP: usize = 64 << 20;

pub(crate) enum Job {
    /// Quarantined segments the lease check found unheld: one /proc scan for
    /// all of them (off the event loop: it takes milliseconds), then a scrub of
    /// each one no process holds.
    Scrub(Vec<(u64, Segment)>),
    Create {
        pool: usize,
        page: PageKind,
        len: usize,
    },
    /// Unmapping and closing frees hugetlb pages: milliseconds per GiB.
    Destroy(Segment),
}

pub(crate) enum Done {
    /// The /proc scan found a descriptor or mapping of it: back to quarantine.
    StillHeld {
        id: u64,
        seg: Segment,
    },
    Scrubbed {
        id: u64,
        seg: Segment,
        /// Offset of a non-zero byte found by verification.
        bad: Option<usize>,
        scrub: Duration,
        verify: Duration,
        verified: usize,
    },
    /// Shutdown came first; the segment was unmapped unscrubbed.
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
        let tid = Arc::new(AtomicI32::new(0));
        let (s, t) = (stop.clone(), tid.clone());
        let handle = std::thread::Builder::new()
            .name("prezero-serve-scrub".into())
            .spawn(move || {
                t.store(sys::gettid(), Ordering::Release);
                lower(priority);
                run(rx, done, &wake, &s, verify, priority)
            })?;
        Ok(Worker {
            jobs: Some(tx),
            stop,
            tid,
            handle: Some(handle),
        })
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

/// Puts the calling thread at the configured scrubbing priority.
fn lower(priority: ScrubPriority) {
    match priority {
        ScrubPriority::Idle => {
            if sys::set_sched_idle().is_err() {
                let _ = sys::set_nice(19);
            }
        }
        ScrubPriority::Nice19 => {
            let _ = sys::set_nice(19);
        }
        ScrubPriority::Normal => {}
    }
}

/// Runs `f` at normal priority. Reading a process's `/proc/PID/maps` takes its
/// `mmap_lock`, and unmapping takes our own: a `SCHED_IDLE` thread preempted
/// while holding one would stall that process's next mmap (a client mapping
/// its hand-out, measured as 8 ms outliers) until a core fell idle.
fn at_normal_priority<T>(priority: ScrubPriority, f: impl FnOnce() -> T) -> T {
    if priority == ScrubPriority::Normal {
        return f();
    }
    let _ = sys::set_sched_normal(0);
    let _ = sys::set_nice(0);
    let r = f();
    lower(priority);
    r
}

fn run(
    rx: Receiver<Job>,
    done: Sender<Done>,
    wake: &OwnedFd,
    stop: &AtomicBool,
    verify: Verify,
    priority: ScrubPriority,
) {
    let report = |d: Done| {
        if done.send(d).is_err() {
            return false;
        }
        let one: u64 = 1;
        // SAFETY: an 8-byte write from a local to our eventfd.
        unsafe { libc::write(wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
        true
    };
    while let Ok(job) = rx.recv() {
        let sent = match job {
            Job::Scrub(batch) => {
                let wanted = batch.iter().map(|(_, s)| (s.dev, s.ino)).collect();
                let held = at_normal_priority(priority, || held_elsewhere(&wanted));
                batch.into_iter().all(|(id, seg)| {
                    report(if held.contains(&(seg.dev, seg.ino)) {
                        Done::StillHeld { id, seg }
                    } else {
                        scrub(id, seg, stop, verify)
                    })
                })
            }
            Job::Create { pool, page, len } => report(Done::Created {
                pool,
                seg: Segment::create(page, len, 1),
            }),
            Job::Destroy(seg) => {
                at_normal_priority(priority, || drop(seg));
                true
            }
        };
        if !sent {
            return;
        }
    }
}

fn scrub(id: u64, seg: Segment, stop: &AtomicBool, verify: Verify) -> Done {
    let (ptr, len) = seg.memory();
    // SAFETY: the event loop sends a segment here only once it is quarantined and
    // proven held by no other process, and keeps no reference to its memory while
    // the worker owns it; the mapping lives as long as `seg`.
    let buf = unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), len) };
    let check = |_: usize| {
        if stop.load(Ordering::Acquire) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    let t = Instant::now();
    let cleared = clear_bounded_with(buf, Temperature::Cold, STEP, check).unwrap_or(0);
    let scrub = t.elapsed();
    if cleared < len {
        return Done::Abandoned { id };
    }
    let t = Instant::now();
    let mut bad = None;
    let mut verified = 0;
    match verify {
        Verify::Full => {
            for (i, chunk) in buf.chunks(STEP).enumerate() {
                if stop.load(Ordering::Acquire) {
                    return Done::Abandoned { id };
                }
                if let Some(off) = crate::verify::first_nonzero(chunk) {
                    bad = Some(i * STEP + off);
                    break;
                }
                verified += chunk.len();
            }
        }
        Verify::Sampled { one_in } => {
            for page in (0..len).step_by(4096 * one_in.max(1)) {
                let line = &buf[page..(page + 64).min(len)];
                if let Some(off) = crate::verify::first_nonzero(line) {
                    bad = Some(page + off);
                    break;
                }
                verified += line.len();
            }
        }
    }
    Done::Scrubbed {
        id,
        seg,
        bad,
        scrub,
        verify: t.elapsed(),
        verified,
    }
}
