//! The pool's cross-thread protocol (mod.rs's Concurrency section), checked in
//! every interleaving of a few threads by [`crate::interleavings`].
//!
//! The bookkeeping is the real [`State`]; the threads are the real code's
//! steps over it: critical sections whole, and outside the lock the waiters'
//! counter, the notifies, and the start and the end of work on a chunk's bytes.
//! Each [`Pc`] says which lines it stands for, and `the_model_follows_the_code`
//! fails if those lines change order. Left out: the wait's deadline (with it a
//! lost wake-up would only be a late hand-out; without it, it is a thread blocked
//! for good, which the checker sees), spurious wake-ups (they only add turns),
//! and NUMA nodes (`exhausted` and the wake-ups do not depend on them).
//!
//! Checked in every state: the state's own invariant; a chunk handed to one
//! thread at a time, and only while it is out of the lists; its bytes touched by
//! one party at a time, the one its phase names; a chunk handed out for
//! `alloc_zeroed` all zero. Where no thread can move: a waiter asleep only while
//! the pool is exhausted (no lost wake-up), the scrubber asleep only with nothing
//! to do, no thread joining one that cannot end (no deadlock).

use std::hash::{Hash, Hasher};

use super::state::{Phase, Source, State};
use crate::interleavings::{explore, in_order, Model};

/// What a chunk's bytes hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Bytes {
    Zero,
    Written,
}

/// What a thread does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Role {
    /// `Pool::try_alloc_zeroed_timeout`, then writes the chunk and drops it;
    /// `drops_pool`: then drops the `Pool` (the scoped threads joined first).
    Waiter { drops_pool: bool },
    /// `Pool::alloc_zeroed` (no wait: exhausted, it gives up), then as a waiter.
    Taker,
    /// Holds a chunk from the start: writes it and drops it.
    Freer,
    /// The scrubber thread (scrubber.rs, `run`).
    Scrubber,
    /// `Pool::trim(0)`.
    Trimmer,
}

/// Where a thread goes after the wake-ups that follow a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Then {
    /// Back to the thread's role: done, or dropping the pool.
    AfterFree,
    /// The scrubber's loop.
    Look,
    /// `hand_out` returns the grow's error.
    GaveUp { registered: bool },
}

/// A thread's place in its program: each step is the lines named on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Pc {
    /// `hand_out`'s critical section: `take_zeroed`, `has_room`, the hand-out
    /// or `growing += 1`, and `wants_scrub` with its `scrub_wake.notify_one()`.
    HandOut {
        registered: bool,
    },
    /// `try_alloc_zeroed_timeout`: `waiters.fetch_add(1, SeqCst)`.
    Register,
    /// `try_alloc_zeroed_timeout`: `shared.lock()`, `s.exhausted(..)`, and
    /// `chunk_ready.wait_timeout(s, ..)`, which gives the lock back.
    LookAgain,
    /// In `chunk_ready.wait_timeout`: moves only when notified.
    Waiting,
    /// `prepare`'s `kernel.run(ptr, n)` on a Hot or Cold chunk: begins, ends.
    Clear(usize, bool),
    Clearing(usize, bool),
    /// `grow`: `Region::new` and `adopt`'s critical section, or on failure
    /// `self.lock().growing -= 1` and `wake_waiters()`.
    Grow {
        registered: bool,
    },
    /// `try_alloc_zeroed_timeout`: `waiters.fetch_sub(1, SeqCst)`.
    Unregister(Option<usize>),
    /// The caller's writes to its chunk: begin, end.
    Write(usize),
    Writing(usize),
    /// `Shared::free`'s critical section: `s.free(id, ..)`, `wants_scrub`.
    Free(usize),
    /// `Shared::free`, after `drop(s)`: `scrub_wake.notify_one()`.
    NotifyScrub(Then),
    /// `wake_waiters`: `waiters.load(SeqCst) > 0`, then `chunk_ready.notify_all()`.
    LoadWaiters(Then),
    NotifyReady(Then),
    /// `Pool::drop`: `stop.store(true)`, `s.shutdown = true` under the lock,
    /// `scrub_wake.notify_all()`, the scrubbers' `join`.
    Stop,
    Shutdown,
    NotifyScrubbers,
    Join,
    /// scrubber.rs `run`: the critical section that sees `shutdown`, or takes a
    /// chunk (`wants_scrub`, `scrub_start`), or waits on `scrub_wake`.
    Look,
    /// In `scrub_wake.wait`: moves only when notified.
    Sleeping,
    /// `clear::bounded(kernels.cold, ..)`, which stops early once `stop` is set.
    Scrub(usize),
    Scrubbing(usize),
    /// `scrub_finish(id, cleared)` under the lock, then `wake_waiters()` if cleared.
    Finish(usize, bool),
    /// `Pool::trim`: one critical section (the pages are dropped under the lock).
    Trim,
    Done,
}

/// The pool's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Config {
    max_chunks: usize,
    hot_chunks: u64,
    low: usize,
    high: usize,
    /// The wait as it was before this model: without the look under the lock.
    wait_without_look: bool,
}

/// The real bookkeeping, compared whole and hashed by its parts that change.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Book(State);

impl Hash for Book {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.slots.hash(h);
        self.0.counts().hash(h);
        (self.0.growing, self.0.scrub_active, self.0.shutdown).hash(h);
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct World {
    cfg: Config,
    book: Book,
    /// Per chunk: its bytes, the thread it is handed to, the one touching it.
    bytes: Vec<Bytes>,
    owner: Vec<Option<usize>>,
    touching: Vec<Option<usize>>,
    /// `Shared::waiters` and `Shared::stop`.
    waiters: usize,
    stop: bool,
    roles: Vec<Role>,
    pcs: Vec<Pc>,
    /// The first broken promise, for `check`.
    broken: Option<String>,
}

impl World {
    /// A pool of `cfg` whose chunk 0 is handed to the `Freer` (or, without
    /// one, to a thread that keeps it), and `dirty` more chunks freed (hot or
    /// cold as `cfg.hot_chunks` says).
    fn new(cfg: Config, dirty: usize, roles: &[Role]) -> World {
        let mut s = State::default();
        let freer = roles.iter().position(|&r| r == Role::Freer);
        let mut owner = Vec::new();
        for id in 0..=dirty {
            s.add(0x1000 * (id + 1), true, None);
            if id > 0 {
                s.free(id, false, cfg.hot_chunks).expect("in use");
            }
            owner.push((id == 0).then(|| freer.unwrap_or(KEEPER)));
        }
        let pcs = roles
            .iter()
            .map(|r| match r {
                Role::Waiter { .. } | Role::Taker => Pc::HandOut { registered: false },
                Role::Freer => Pc::Write(0),
                Role::Scrubber => Pc::Look,
                Role::Trimmer => Pc::Trim,
            })
            .collect();
        World {
            cfg,
            book: Book(s),
            bytes: vec![Bytes::Written; dirty + 1],
            owner,
            touching: vec![None; dirty + 1],
            waiters: 0,
            stop: false,
            roles: roles.to_vec(),
            pcs,
            broken: None,
        }
    }

    fn s(&mut self) -> &mut State {
        &mut self.book.0
    }

    fn fail(&mut self, what: String) {
        self.broken.get_or_insert(what);
    }

    /// `scrub_wake.notify_one()` (one scrubber here) or `notify_all()`.
    fn notify_scrubber(&mut self) {
        for pc in &mut self.pcs {
            if *pc == Pc::Sleeping {
                *pc = Pc::Look;
            }
        }
    }

    /// Thread `t` is handed chunk `id`: nobody else holds it, and a chunk for
    /// `alloc_zeroed` is all zero.
    fn hand(&mut self, t: usize, id: usize, zero_by_now: bool) {
        if let Some(other) = self.owner[id] {
            self.fail(format!(
                "chunk {id} handed to thread {t} while thread {other} holds it"
            ));
        }
        self.owner[id] = Some(t);
        if zero_by_now && self.bytes[id] != Bytes::Zero {
            self.fail(format!(
                "chunk {id} handed to thread {t} as zero, but written"
            ));
        }
    }

    /// Thread `t` starts work on chunk `id`'s bytes, as its phase allows.
    fn touch(&mut self, t: usize, id: usize) {
        if let Some(other) = self.touching[id] {
            self.fail(format!(
                "threads {other} and {t} work on chunk {id} at once"
            ));
        }
        self.touching[id] = Some(t);
        let phase = self.book.0.slots[id].phase;
        let allowed = match self.roles[t] {
            Role::Scrubber => phase == Phase::Scrubbing,
            _ => phase == Phase::InUse && self.owner[id] == Some(t),
        };
        if !allowed {
            self.fail(format!("thread {t} works on chunk {id} in phase {phase:?}"));
        }
    }

    fn untouch(&mut self, id: usize, bytes: Bytes) {
        self.touching[id] = None;
        self.bytes[id] = bytes;
    }

    /// Where `then` leads thread `t`.
    fn then(&self, t: usize, then: Then) -> Pc {
        match then {
            Then::Look => Pc::Look,
            Then::GaveUp { registered: true } => Pc::Unregister(None),
            Then::GaveUp { registered: false } => Pc::Done,
            Then::AfterFree => match self.roles[t] {
                Role::Waiter { drops_pool: true } => Pc::Stop,
                _ => Pc::Done,
            },
        }
    }

    /// The step of a chunk's hand-out by `hand_out`, the source as it says.
    fn got(&mut self, t: usize, id: usize, src: Source, registered: bool) -> Pc {
        match src {
            Source::Hot | Source::Cold => {
                self.hand(t, id, false);
                Pc::Clear(id, registered)
            }
            _ => {
                self.hand(t, id, true);
                self.using(id, registered)
            }
        }
    }

    fn using(&self, id: usize, registered: bool) -> Pc {
        if registered {
            Pc::Unregister(Some(id))
        } else {
            Pc::Write(id)
        }
    }
}

impl Model for World {
    fn threads(&self) -> usize {
        self.pcs.len()
    }

    fn check(&self) -> Result<(), String> {
        if let Some(b) = &self.broken {
            return Err(b.clone());
        }
        if !self.book.0.check() {
            return Err(format!("the state's invariant: {:?}", self.book.0.counts()));
        }
        for (id, owner) in self.owner.iter().enumerate() {
            let phase = self.book.0.slots[id].phase;
            if owner.is_some() != (phase == Phase::InUse) {
                return Err(format!("chunk {id} held by {owner:?} in phase {phase:?}"));
            }
        }
        Ok(())
    }

    fn end(&self) -> Result<(), String> {
        for (t, pc) in self.pcs.iter().enumerate() {
            match pc {
                Pc::Done => {}
                Pc::Waiting if self.book.0.exhausted(self.cfg.max_chunks) => {}
                Pc::Waiting => {
                    return Err(format!(
                        "lost wake-up: thread {t} waits though there is a chunk to take or room to map one"
                    ))
                }
                Pc::Sleeping => {
                    let mut s = self.book.0.clone();
                    if s.shutdown || s.wants_scrub(self.cfg.low, self.cfg.high) {
                        return Err("the scrubber sleeps with work to do, or through shutdown".into());
                    }
                }
                pc => return Err(format!("deadlock: thread {t} cannot move from {pc:?}")),
            }
        }
        Ok(())
    }

    fn steps(&self, t: usize) -> Vec<World> {
        let mut w = self.clone();
        let cfg = self.cfg;
        let next = match self.pcs[t] {
            Pc::HandOut { registered } => {
                let s = w.s();
                let taken = s.take_zeroed(cfg.hot_chunks, None);
                let room = s.has_room(cfg.max_chunks);
                if taken.is_none() && room {
                    s.growing += 1;
                }
                if s.wants_scrub(cfg.low, cfg.high) {
                    w.notify_scrubber();
                }
                match taken {
                    Some((id, src)) => w.got(t, id, src, registered),
                    None if room => Pc::Grow { registered },
                    None => match (w.roles[t], registered) {
                        (Role::Taker, _) => Pc::Done,
                        (_, false) => Pc::Register,
                        (_, true) => Pc::LookAgain,
                    },
                }
            }
            Pc::Register => {
                w.waiters += 1;
                Pc::HandOut { registered: true }
            }
            Pc::LookAgain => {
                if cfg.wait_without_look || w.s().exhausted(cfg.max_chunks) {
                    Pc::Waiting
                } else {
                    Pc::HandOut { registered: true }
                }
            }
            Pc::Waiting | Pc::Sleeping | Pc::Done => return Vec::new(),
            Pc::Clear(id, registered) => {
                w.touch(t, id);
                Pc::Clearing(id, registered)
            }
            Pc::Clearing(id, registered) => {
                w.untouch(id, Bytes::Zero);
                w.using(id, registered)
            }
            Pc::Grow { registered } => {
                let mut failed = w.clone();
                failed.s().growing -= 1;
                failed.pcs[t] = Pc::LoadWaiters(Then::GaveUp { registered });
                let s = w.s();
                s.growing -= 1;
                let id = s.add(0x1000 * (s.slots.len() + 1), true, None);
                w.bytes.push(Bytes::Zero);
                w.owner.push(None);
                w.touching.push(None);
                w.hand(t, id, true);
                w.pcs[t] = w.using(id, registered);
                return vec![w, failed];
            }
            Pc::Unregister(got) => {
                w.waiters -= 1;
                got.map_or(Pc::Done, Pc::Write)
            }
            Pc::Write(id) => {
                w.touch(t, id);
                Pc::Writing(id)
            }
            Pc::Writing(id) => {
                w.untouch(id, Bytes::Written);
                Pc::Free(id)
            }
            Pc::Free(id) => {
                let s = w.s();
                if let Err(e) = s.free(id, false, cfg.hot_chunks) {
                    w.fail(format!("thread {t}'s free of chunk {id} refused: {e:?}"));
                }
                let wake = w.s().wants_scrub(cfg.low, cfg.high);
                w.owner[id] = None;
                if wake {
                    Pc::NotifyScrub(Then::AfterFree)
                } else {
                    Pc::LoadWaiters(Then::AfterFree)
                }
            }
            Pc::NotifyScrub(then) => {
                w.notify_scrubber();
                Pc::LoadWaiters(then)
            }
            Pc::LoadWaiters(then) if w.waiters > 0 => Pc::NotifyReady(then),
            Pc::LoadWaiters(then) => w.then(t, then),
            Pc::NotifyReady(then) => {
                for pc in &mut w.pcs {
                    if *pc == Pc::Waiting {
                        *pc = Pc::HandOut { registered: true };
                    }
                }
                w.then(t, then)
            }
            Pc::Stop => {
                // The threads borrowing the pool are joined before it drops.
                let borrowers_done = (0..w.pcs.len()).all(|o| {
                    o == t
                        || w.pcs[o] == Pc::Done
                        || matches!(w.roles[o], Role::Freer | Role::Scrubber)
                });
                if !borrowers_done {
                    return Vec::new();
                }
                w.stop = true;
                Pc::Shutdown
            }
            Pc::Shutdown => {
                w.s().shutdown = true;
                Pc::NotifyScrubbers
            }
            Pc::NotifyScrubbers => {
                w.notify_scrubber();
                Pc::Join
            }
            Pc::Join => {
                let scrubbers_done =
                    (0..w.pcs.len()).all(|o| w.roles[o] != Role::Scrubber || w.pcs[o] == Pc::Done);
                if !scrubbers_done {
                    return Vec::new();
                }
                Pc::Done
            }
            Pc::Look => {
                let s = w.s();
                if s.shutdown {
                    Pc::Done
                } else if !s.wants_scrub(cfg.low, cfg.high) {
                    Pc::Sleeping
                } else {
                    s.scrub_start().map_or(Pc::Sleeping, Pc::Scrub)
                }
            }
            Pc::Scrub(id) => {
                w.touch(t, id);
                Pc::Scrubbing(id)
            }
            Pc::Scrubbing(id) => {
                // Stopped, it may have cleared the chunk or part of it.
                let mut partial = w.clone();
                w.untouch(id, Bytes::Zero);
                w.pcs[t] = Pc::Finish(id, true);
                if !w.stop {
                    return vec![w];
                }
                partial.untouch(id, partial.bytes[id]);
                partial.pcs[t] = Pc::Finish(id, false);
                return vec![w, partial];
            }
            Pc::Finish(id, cleared) => {
                w.s().scrub_finish(id, cleared);
                if cleared {
                    Pc::LoadWaiters(Then::Look)
                } else {
                    Pc::Look
                }
            }
            Pc::Trim => {
                while w.s().backed_chunks() > 0 {
                    let Some(id) = w.s().trim_victim() else { break };
                    if w.owner[id].is_some() || w.touching[id].is_some() {
                        w.fail(format!("trim drops the pages of chunk {id}, in use"));
                    }
                    w.bytes[id] = Bytes::Zero;
                    w.s().released(id);
                }
                Pc::Done
            }
        };
        w.pcs[t] = next;
        vec![w]
    }
}

/// The thread outside the model that keeps chunk 0 where no `Freer` frees
/// it: then a waiter's only wake-up is the one the test is about.
const KEEPER: usize = usize::MAX;

const WAITER: Role = Role::Waiter { drops_pool: false };
const DROPPER: Role = Role::Waiter { drops_pool: true };

fn config(max_chunks: usize, hot_chunks: u64) -> Config {
    Config {
        max_chunks,
        hot_chunks,
        low: 1,
        high: 2,
        wait_without_look: false,
    }
}

/// Explores `roles` over a pool of `max_chunks`, chunk 0 held by the freer and
/// `dirty` chunks freed, with freed chunks cold and hot in turn.
fn check(max_chunks: usize, dirty: usize, roles: &[Role]) {
    for hot in [0, 1] {
        let states = explore(World::new(config(max_chunks, hot), dirty, roles));
        eprintln!("{roles:?}, hot window {hot}: {states} states");
    }
}

#[test]
fn a_waiter_is_woken_by_a_free() {
    check(1, 0, &[WAITER, Role::Freer]);
    check(1, 0, &[WAITER, WAITER, Role::Freer, Role::Scrubber]);
}

#[test]
fn a_waiter_is_woken_by_a_scrub() {
    check(2, 1, &[WAITER, Role::Scrubber]);
}

#[test]
fn a_waiter_is_woken_when_a_grow_gives_up_its_room() {
    check(2, 0, &[Role::Taker, WAITER]);
    check(2, 0, &[Role::Taker, WAITER, Role::Freer, Role::Scrubber]);
}

#[test]
fn takers_scrubber_and_trim_never_share_a_chunk() {
    check(
        2,
        1,
        &[
            Role::Taker,
            Role::Taker,
            Role::Scrubber,
            Role::Trimmer,
            Role::Freer,
        ],
    );
}

#[test]
fn the_pool_drops_cleanly_and_a_stopped_scrub_hands_out_nothing_half_cleared() {
    check(1, 0, &[DROPPER, Role::Freer, Role::Scrubber]);
    check(2, 1, &[DROPPER, WAITER, Role::Scrubber, Role::Freer]);
}

/// The checker finds what it is for: the wait as it was, without the look
/// under the lock, slept through a free between `hand_out`'s look and the wait.
#[test]
#[should_panic(expected = "lost wake-up")]
fn the_wait_without_the_look_under_the_lock_loses_a_wake_up() {
    let cfg = Config {
        wait_without_look: true,
        ..config(1, 1)
    };
    explore(World::new(cfg, 0, &[WAITER, Role::Freer]));
}

/// The lines each step stands for are still in the order the model takes them.
#[test]
fn the_model_follows_the_code() {
    let pool = include_str!("mod.rs");
    let scrubber = include_str!("scrubber.rs");
    in_order(
        pool,
        "pub fn try_alloc_zeroed_timeout",
        &[
            "shared.hand_out(true)",
            "shared.waiters.fetch_add(1, Ordering::SeqCst)",
            "shared.hand_out(true)",
            "let s = shared.lock()",
            "if s.exhausted(shared.max_chunks)",
            "shared.chunk_ready.wait_timeout(s, left)",
            "shared.waiters.fetch_sub(1, Ordering::SeqCst)",
        ],
    );
    in_order(
        pool,
        "fn hand_out(",
        &[
            "let mut s = self.lock()",
            "s.take_zeroed(self.hot_chunks, node)",
            "s.has_room(self.max_chunks)",
            "s.growing += 1",
            "s.wants_scrub(self.low, self.high)",
            "self.scrub_wake.notify_one()",
            "self.prepare(ptr, src, zeroed)",
            "self.grow(node)",
        ],
    );
    in_order(
        pool,
        "fn grow(",
        &[
            "Region::new(",
            "self.lock().growing -= 1",
            "self.wake_waiters()",
            "self.adopt(r, true, node)",
        ],
    );
    in_order(
        pool,
        "fn free(",
        &[
            "let mut s = self.lock()",
            "s.free(id, raw, self.hot_chunks)?",
            "let wake = s.wants_scrub(self.low, self.high)",
            "drop(s)",
            "self.scrub_wake.notify_one()",
            "self.wake_waiters()",
        ],
    );
    in_order(
        pool,
        "fn wake_waiters(",
        &[
            "self.waiters.load(Ordering::SeqCst) > 0",
            "self.chunk_ready.notify_all()",
        ],
    );
    in_order(
        pool,
        "impl Drop for Pool",
        &[
            "self.shared.stop.store(true",
            "s.shutdown = true",
            "self.shared.scrub_wake.notify_all()",
            "h.join()",
        ],
    );
    in_order(
        pool,
        "pub fn trim(",
        &[
            "let mut s = self.shared.lock()",
            "s.trim_victim()",
            "crate::sys::discard(ptr",
            "s.released(id)",
        ],
    );
    in_order(
        scrubber,
        "fn run(",
        &[
            "let mut s = shared.lock()",
            "if s.shutdown",
            "s.wants_scrub(shared.low, shared.high)",
            "s.scrub_start()",
            "shared.scrub_wake.wait(s)",
            "crate::clear::bounded(",
            "shared.stop.load(",
            "s.scrub_finish(id, cleared)",
            "shared.wake_waiters()",
        ],
    );
}
