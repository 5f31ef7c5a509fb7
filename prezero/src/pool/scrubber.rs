//! The background scrubber (the scrubd of Linux's "Prezeroing V2"): clears dirty chunks with
//! streaming stores, in bounded steps, at idle priority.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::stats::Counters;
use super::Shared;
use crate::sys;

/// How the scrubber threads are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScrubPriority {
    /// `SCHED_IDLE`: runs only when a core has nothing else to do (falls back to
    /// nice 19 where the policy is refused; `stats()` says which is in force).
    Idle,
    /// Nice 19 under the normal policy.
    Nice19,
    /// As the creating thread.
    Normal,
}

impl ScrubPriority {
    /// Puts the calling thread at this priority, as the pool's scrubbers are
    /// (for scrubbers of one's own: the LD_PRELOAD front's). Returns the
    /// scheduling in force, as [`PoolStats`](crate::PoolStats) reports it.
    pub fn apply_to_current_thread(self) -> &'static str {
        self.apply_to(0)
    }

    /// Puts thread `tid` (0: the calling thread) at this priority: `Idle` is
    /// `SCHED_IDLE`, or nice 19 where the policy is refused; `Nice19` is nice
    /// 19; `Normal` changes nothing. Returns the scheduling in force. A tid
    /// that names no thread of ours is refused, and reads as refused here.
    pub fn apply_to(self, tid: crate::sys::Tid) -> &'static str {
        use crate::sys::{set_nice, set_policy};
        match self {
            ScrubPriority::Idle if set_policy(tid, libc::SCHED_IDLE).is_ok() => "SCHED_IDLE",
            ScrubPriority::Idle if set_nice(tid, 19).is_ok() => "nice 19 (SCHED_IDLE refused)",
            ScrubPriority::Idle => "normal (SCHED_IDLE and nice 19 refused)",
            ScrubPriority::Nice19 if set_nice(tid, 19).is_ok() => "nice 19",
            ScrubPriority::Nice19 => "normal (nice 19 refused)",
            ScrubPriority::Normal => "normal",
        }
    }
}

/// Whether the calling thread has run without being held off a core since
/// [`FreeRunning::start`]. A scrubber at `SCHED_IDLE` makes a call that
/// holds the process's mapping lock (`MADV_FREE`) only then: preempted
/// inside it, it would keep the program's own mapping calls waiting until
/// it runs again (a calloc waited 1.3 s behind two spinning threads), while
/// a scrubber that runs freely has a core to itself.
pub struct FreeRunning {
    wall: std::time::Instant,
    cpu: u64,
}

impl FreeRunning {
    /// How much longer than its CPU time the interval may have taken.
    const SLACK_NS: u64 = 200_000;

    /// Starts timing the calling thread.
    pub fn start() -> FreeRunning {
        FreeRunning {
            wall: std::time::Instant::now(),
            cpu: sys::raw::thread_cpu_ns(),
        }
    }

    /// Whether the thread ran all the time since the start.
    pub fn still(&self) -> bool {
        let wall = self.wall.elapsed().as_nanos() as u64;
        wall <= sys::raw::thread_cpu_ns().saturating_sub(self.cpu) + Self::SLACK_NS
    }
}

/// Bytes cleared between checks for shutdown: at ~10 GB/s, 100 us.
const STEP: usize = 1 << 20;

pub(super) fn spawn(
    shared: Arc<Shared>,
    priority: ScrubPriority,
    index: usize,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("prezero-scrub-{index}"))
        .spawn(move || {
            shared
                .scrubber_tids
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(sys::gettid());
            let got = priority.apply_to_current_thread();
            *shared.priority.lock().unwrap_or_else(|e| e.into_inner()) = got;
            run(&shared);
        })
}

fn run(shared: &Shared) {
    loop {
        let (id, ptr) = {
            let mut s = shared.lock();
            loop {
                if s.shutdown {
                    return;
                }
                if s.wants_scrub(shared.low, shared.high) {
                    if let Some(id) = s.scrub_start() {
                        shared.check(&s);
                        break (id, shared.chunk_ptr(&s, id));
                    }
                }
                s = shared.scrub_wake.wait(s).unwrap_or_else(|e| e.into_inner());
            }
        };
        // SAFETY: the chunk is in phase Scrubbing, which gives this thread alone
        // its `chunk_size` bytes until `scrub_finish`; the mapping outlives `shared`.
        let buf = unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), shared.chunk_size) };
        let run = FreeRunning::start();
        let done = crate::clear::bounded(shared.kernels.cold, buf, STEP, |_| {
            if shared.stop.load(Ordering::Acquire) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        let cleared = done == shared.chunk_size;
        if cleared && run.still() {
            // Held for later, it is the machine's: the kernel may take it
            // back under pressure (a chunk it took reads zero all the same).
            // SAFETY: still Scrubbing (this thread's alone), and zero now.
            let _ = unsafe { sys::free_lazily(ptr.as_ptr(), shared.chunk_size) };
        }
        {
            let mut s = shared.lock();
            s.scrub_finish(id, cleared);
            shared.check(&s);
        }
        if cleared {
            Counters::add(&shared.counters.bytes_scrubbed, shared.chunk_size);
            shared.wake_waiters();
        }
    }
}
