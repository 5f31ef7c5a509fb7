//! The cache's cross-thread protocol (mod.rs's Concurrency), checked in every
//! interleaving of a few threads by `prezero::interleavings`.
//!
//! The bookkeeping is the real [`Blocks`] of one lane; the threads are the real
//! code's steps over it: critical sections whole (the lock held from `lock()` to
//! a wait, to `release_one`'s unlock, or to the guard's drop), and outside the
//! lock the start and the end of work on pages. Each [`Pc`] says which lines it
//! stands for, and `follows.rs`'s `the_model_follows_the_code` fails if they
//! change order.
//! Every wait here has a timeout (the request's 2 ms, the scrubber's 1 ms and
//! 1 s): a waiting thread can always go on, by a signal or by its timer. A
//! program's thread may find the lock kept by a starved scrubber at any of
//! its takes (`lock_unless_starved`): a request then goes to the next
//! allocator, whether it waited or not, and a free leaves its block
//! (`deferred.rs`) for the next `free` or scrubber loop to make.
//! Scaled down: pages for megabytes (a scrub or a release takes a page where it
//! takes 8 or 64 MiB), one clock tick, no spare, no prefill, no realloc.
//!
//! Checked in every state: the blocks' invariant; every page of a Clean or
//! Fresh block zero; a block handed to one thread, and a Busy block worked on
//! by the one that made it Busy, its pages touched by no one else; a zeroed
//! grant all zero when handed out; `WAITING` the number of waiting requests; a
//! request waiting for a signal only while a block is Busy (whose end signals:
//! no lost wake-up); a block left for the next holder touched by no one,
//! handed to no one, and freed once; the scrubber starting no step while a
//! request waits for one to end, nor between its wake-up by a signal and its
//! look after it; and a fork at any point leaving the child blocks with no
//! Busy one, its Clean and Fresh pages zero, and no wait.

mod follows;

use std::cell::Cell;
use std::collections::BTreeMap;

use prezero::interleavings::{explore, Model};

use crate::blocks::{Alloc, Block, Blocks, Kind, Piece, PAGE};
use Role::{Forker, Freer, Requester, Scrubber};

const BASE: usize = 1 << 40;
/// Pages in the lane.
const PAGES: usize = 6;
/// The requests' size, and a page where the real chunks are megabytes.
const REQUEST: usize = 2 * PAGE;
const CHUNK: usize = PAGE;
/// The one tick of the clock: every block was freed at it.
const NOW: u64 = 0;
/// The holder of a block a `free` left for the lock's next holder.
const LEFT: usize = usize::MAX - 1;

thread_local! {
    /// The list each step's [`Blocks`] lives in (one per test thread).
    static LIST: Cell<Option<&'static mut [Block]>> = Cell::new(Some(Box::leak(
        vec![Block { start: 0, len: 0, kind: Kind::Fresh, since: 0 }; 16].into_boxed_slice(),
    )));
}

/// What a thread does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Role {
    /// `calloc` of [`REQUEST`] bytes (`requests::take`), writes, then `free`.
    Requester,
    /// Holds the first block from the start: writes it, then `free`.
    Freer,
    /// The scrubber thread (`scrubber::scrub`), prefill done.
    Scrubber,
    /// `fork` (`fork.rs`: `before_fork` takes the lock, `in_child` starts the
    /// child's cache, `after_fork` gives the lock back in the parent).
    Forker,
}

/// Where a thread goes after giving memory back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Then {
    /// `free`'s loop over the cap.
    Free,
    /// The scrubber's loop (its cap, then what is idle).
    Scrub,
}

/// A thread's place in its program: each step is the lines named on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Pc {
    /// `take`'s critical section: `alloc` (or `alloc_around_busy` once it
    /// `waited`), then `break` with a grant, or `Alloc::Wait`'s
    /// `WAITING.fetch_add` and `g.wait_unless_starved`, or `Full`'s return; or,
    /// the lock kept by the scrubber, the next allocator. `woken`: by a
    /// signal, after the lock was let go (only the old order had that).
    Take {
        waited: bool,
        woken: bool,
    },
    /// In `g.wait_unless_starved`: a signal (`signalled`) or the timer ends
    /// it, then `WAITING.fetch_sub` and `waited`, and (the lock taken again)
    /// the look, or (kept by the scrubber) the next allocator.
    Waiting {
        signalled: bool,
    },
    /// `take`, after `drop(g)`: `clear_raw_with` on the grant's Dirty pieces
    /// (`clear_dirty`).
    Clear,
    Clearing,
    /// The program's writes to its block.
    Write,
    Writing,
    /// `free`'s critical section: the blocks left by others, `blocks.free`,
    /// then the cap's `release_one`; or, the lock kept by the scrubber, its
    /// block left (`deferred::leave`) and `signal_all()`.
    Free,
    /// `release_one` after `SHARED.mutex.unlock()`: `sys::discard(s, l)`, then
    /// (the end of the work and the lock taken again in one step) `busy_done`
    /// or `busy_failed`, `signal_all()`, and the caller's loop.
    Discard(usize, usize, Then),
    Discarding(usize, usize, Then),
    /// `scrub`: `g.wait_ms(1)` while a request waits, `g.wait(1)` with nothing
    /// to do: then the loop again.
    Yield,
    Idle,
    /// `scrub`, after `drop(g)`: `clear_raw_with(.., Cold)`, then `g = lock()`,
    /// `busy_done(s, Clean)`, `signal_all()` and the loop.
    Scrub(usize, usize),
    Scrubbing(usize, usize),
    /// `before_fork`, `in_child`, `after_fork`.
    Fork,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Config {
    /// `Config::cap`: free memory with pages over it goes back in `free`.
    cap: usize,
    /// The scrubber gives every free block back as idle (`idle_secs` 0).
    idle: bool,
    /// The request's wake-up and its look in two critical sections, as
    /// before this model.
    look_after_unlock: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct World {
    cfg: Config,
    /// The lane's blocks and top, put back into a [`Blocks`] for each step.
    blocks: Vec<Block>,
    top: usize,
    /// Per page: zero, and the thread working on it.
    zero: Vec<bool>,
    touching: Vec<Option<usize>>,
    /// The thread each InUse block is handed to, and each Busy block's worker.
    held: BTreeMap<usize, usize>,
    busy: BTreeMap<usize, usize>,
    /// Each requester's grant: its start and length, and its pieces.
    grant: Vec<Option<(usize, usize, Vec<Piece>)>>,
    /// Blocks left by a `free` for the lock's next holder (`held` by [`LEFT`]).
    left: Vec<usize>,
    waiting: usize,
    roles: Vec<Role>,
    pcs: Vec<Pc>,
    broken: Option<String>,
}

fn pages(start: usize, len: usize) -> std::ops::Range<usize> {
    (start - BASE) / PAGE..(start - BASE + len) / PAGE
}

impl World {
    /// The lane with a 1-page block held by the `Freer` (or kept outside the
    /// model) and a written 2-page block freed: Dirty.
    fn new(cfg: Config, roles: &[Role]) -> World {
        let mut w = World {
            cfg,
            blocks: Vec::new(),
            top: BASE,
            zero: vec![true; PAGES],
            touching: vec![None; PAGES],
            held: BTreeMap::new(),
            busy: BTreeMap::new(),
            grant: vec![None; roles.len()],
            left: Vec::new(),
            waiting: 0,
            roles: roles.to_vec(),
            pcs: roles
                .iter()
                .map(|r| match r {
                    Role::Requester => Pc::Take {
                        waited: false,
                        woken: false,
                    },
                    Role::Freer => Pc::Write,
                    Role::Scrubber => Pc::Idle,
                    Role::Forker => Pc::Fork,
                })
                .collect(),
            broken: None,
        };
        let granted = w.with(|b| {
            (
                b.alloc(PAGE, 1, false, usize::MAX),
                b.alloc(REQUEST, 1, false, usize::MAX),
            )
        });
        let (Alloc::Granted { start: a, .. }, Alloc::Granted { start: d, .. }) = granted else {
            panic!("the lane's first blocks");
        };
        let freer = roles.iter().position(|&r| r == Role::Freer);
        // Without a freer, a thread outside the model keeps it.
        w.held.insert(a, freer.unwrap_or(usize::MAX));
        if let Some(f) = freer {
            w.grant[f] = Some((a, PAGE, Vec::new()));
        }
        w.zero[pages(a, PAGE)].fill(false);
        w.zero[pages(d, REQUEST)].fill(false);
        w.with(|b| b.free(d, NOW));
        w
    }

    /// Runs `f` on the real blocks this state holds, and keeps what it made.
    fn with<R>(&mut self, f: impl FnOnce(&mut Blocks) -> R) -> R {
        let list = LIST.take().expect("one step at a time");
        let mut b = Blocks::restore(BASE, BASE + PAGES * PAGE, self.top, &self.blocks, list);
        let r = f(&mut b);
        self.blocks = b.blocks().to_vec();
        self.top = b.top();
        LIST.set(Some(b.into_list()));
        r
    }

    fn fail(&mut self, what: String) {
        self.broken.get_or_insert(what);
    }

    /// `signal_all()`: every waiting request is signalled.
    fn signal_all(&mut self) {
        for pc in &mut self.pcs {
            if let Pc::Waiting { signalled } = pc {
                *signalled = true;
            }
        }
    }

    /// Thread `t` starts work on `[s, s + l)`, which must be its own.
    fn touch(&mut self, t: usize, s: usize, l: usize) {
        for p in pages(s, l) {
            if let Some(o) = self.touching[p] {
                self.fail(format!("threads {o} and {t} work on page {p} at once"));
            }
            self.touching[p] = Some(t);
        }
        let block = self
            .blocks
            .iter()
            .find(|b| b.start <= s && s + l <= b.start + b.len);
        let ours = match block {
            Some(b) if b.kind == Kind::InUse => self.held.get(&b.start) == Some(&t),
            Some(b) if b.kind == Kind::Busy => self.busy.get(&b.start) == Some(&t),
            _ => false,
        };
        if !ours {
            self.fail(format!(
                "thread {t} works on {s:#x}+{l:#x}, not its own: {block:?}"
            ));
        }
    }

    fn untouch(&mut self, s: usize, l: usize, zero: bool) {
        for p in pages(s, l) {
            self.touching[p] = None;
            self.zero[p] = zero;
        }
    }

    /// `take`'s look, the lock held: a grant, a wait, or the next allocator.
    fn take(&mut self, t: usize, waited: bool) -> Pc {
        let a = self.with(|b| {
            if waited {
                b.alloc_around_busy(REQUEST, 1, true, usize::MAX)
            } else {
                b.alloc(REQUEST, 1, true, usize::MAX)
            }
        });
        match a {
            Alloc::Granted {
                start,
                len,
                pieces,
                n,
            } => {
                if let Some(o) = self.held.insert(start, t) {
                    self.fail(format!(
                        "{start:#x} handed to thread {t} while thread {o} holds it"
                    ));
                }
                self.grant[t] = Some((start, len, pieces[..n].to_vec()));
                Pc::Clear
            }
            Alloc::Wait => {
                self.waiting += 1;
                Pc::Waiting { signalled: false }
            }
            Alloc::Full => Pc::Done,
        }
    }

    /// `free_deferred`, the lock held: each block left is freed.
    fn free_left(&mut self) {
        for s in std::mem::take(&mut self.left) {
            if self.held.remove(&s) != Some(LEFT) {
                self.fail(format!("{s:#x} was left, and is not held as left"));
            }
            if self.with(|b| b.free(s, NOW)).is_none() {
                self.fail(format!("the free of {s:#x}, left, refused"));
            }
        }
    }

    /// `free`'s loop, the lock held: over the cap, one `release_one`.
    fn free_tail(&mut self, t: usize) -> Pc {
        let cap = self.cfg.cap;
        if self.with(|b| b.bytes.held()) > cap {
            if let Some(pc) = self.release(t, u64::MAX, Then::Free) {
                return pc;
            }
        }
        self.signal_all();
        Pc::Done
    }

    /// `release_one`'s first half: the oldest free memory freed by `before`, Busy.
    fn release(&mut self, t: usize, before: u64, then: Then) -> Option<Pc> {
        let (s, l) = self.with(|b| b.release_take(before, CHUNK))?;
        self.busy.insert(s, t);
        Some(Pc::Discard(s, l, then))
    }

    /// The scrubber's loop, the lock held, from `free_deferred` on.
    fn scrub_loop(&mut self, t: usize) -> Pc {
        self.free_left();
        let cap = self.cfg.cap;
        if self.with(|b| b.bytes.held()) > cap {
            if let Some(pc) = self.release(t, u64::MAX, Then::Scrub) {
                return pc;
            }
        }
        if self.cfg.idle {
            if let Some(pc) = self.release(t, NOW, Then::Scrub) {
                return pc;
            }
        }
        self.scrub_rest(t)
    }

    /// The scrubber's loop after `release_one` found nothing to give back.
    fn scrub_rest(&mut self, t: usize) -> Pc {
        if self.waiting > 0 {
            return Pc::Yield;
        }
        let woken = self
            .pcs
            .iter()
            .any(|pc| matches!(pc, Pc::Take { woken: true, .. }));
        match self.with(|b| b.scrub_take(CHUNK)) {
            Some((s, l)) => {
                if woken || self.waiting > 0 {
                    self.fail(format!(
                        "the scrubber started a step while a request waited for one to end ({}), \
                         or before a woken request looked ({woken})",
                        self.waiting
                    ));
                }
                self.busy.insert(s, t);
                Pc::Scrub(s, l)
            }
            None => {
                // It drained them at the top of this loop; a free left since
                // (in the code: while it held the lock) ends its wait at once.
                if !self.left.is_empty() {
                    self.fail("the scrubber waits with frees left".into());
                }
                Pc::Idle
            }
        }
    }

    /// A Busy block's work is done: it becomes `to`, and waiting requests are
    /// signalled.
    fn busy_end(&mut self, s: usize, to: Kind) {
        self.busy.remove(&s);
        if to == Kind::Dirty {
            self.with(|b| b.busy_failed(s, NOW));
        } else {
            self.with(|b| b.busy_done(s, to));
        }
        self.signal_all();
    }

    /// The child of a fork now: what `in_child` leaves it.
    fn check_child(&self) -> Result<(), String> {
        let mut child = self.clone();
        child.with(|b| b.abandon_busy());
        let (ok, busy) = child.with(|b| (b.check(), b.bytes.busy));
        let wait = child.with(|b| b.alloc(REQUEST, 1, true, usize::MAX)) == Alloc::Wait;
        if !ok || busy > 0 || wait {
            return Err(format!("a fork leaves the child {:?}", child.blocks));
        }
        // The child makes the frees left in the parent (its slots' copy):
        // their blocks must still be InUse there.
        for &s in &child.left {
            if !child
                .blocks
                .iter()
                .any(|b| b.start == s && b.kind == Kind::InUse)
            {
                return Err(format!("a fork leaves the child {s:#x}, left, not in use"));
            }
        }
        child.zero_where_claimed()
    }

    fn zero_where_claimed(&self) -> Result<(), String> {
        for b in &self.blocks {
            if matches!(b.kind, Kind::Clean | Kind::Fresh)
                && !self.zero[pages(b.start, b.len)].iter().all(|&z| z)
            {
                return Err(format!("{b:?} is not zero"));
            }
        }
        Ok(())
    }
}

impl Model for World {
    fn check(&self) -> Result<(), String> {
        if let Some(b) = &self.broken {
            return Err(b.clone());
        }
        let mut w = self.clone();
        if !w.with(|b| b.check()) {
            return Err("the blocks' invariant".into());
        }
        self.zero_where_claimed()?;
        for b in &self.blocks {
            let owned = match b.kind {
                Kind::InUse => self.held.contains_key(&b.start),
                Kind::Busy => self.busy.contains_key(&b.start),
                _ => true,
            };
            if !owned {
                return Err(format!("{b:?} is no one's"));
            }
        }
        let waiting = self
            .pcs
            .iter()
            .filter(|pc| matches!(pc, Pc::Waiting { .. }))
            .count();
        if waiting != self.waiting {
            return Err(format!("WAITING is {} for {waiting} waiting", self.waiting));
        }
        let unsignalled = self.pcs.contains(&Pc::Waiting { signalled: false });
        if unsignalled && self.busy.is_empty() {
            return Err("lost wake-up: a request waits for a signal, and no block is Busy".into());
        }
        Ok(())
    }

    fn end(&self) -> Result<(), String> {
        match self.pcs.iter().position(|pc| *pc != Pc::Done) {
            Some(t) => Err(format!("thread {t} cannot move from {:?}", self.pcs[t])),
            None => Ok(()),
        }
    }

    fn steps(&self, t: usize) -> Vec<World> {
        let mut w = self.clone();
        let next = match self.pcs[t] {
            Pc::Take { waited, woken } => {
                // The first take of the lock may find it kept by the scrubber.
                let mut gave_up = self.clone();
                gave_up.pcs[t] = Pc::Done;
                w.pcs[t] = w.take(t, waited);
                return if waited || woken {
                    vec![w]
                } else {
                    vec![w, gave_up]
                };
            }
            Pc::Waiting { signalled } => {
                // The timer can always end it; a signal, once sent. Either
                // way the lock may be kept by the scrubber.
                let mut gave_up = self.clone();
                gave_up.waiting -= 1;
                gave_up.pcs[t] = Pc::Done;
                let mut out = vec![gave_up];
                for by_timer in [true, false] {
                    if !by_timer && !signalled {
                        continue;
                    }
                    let mut w = self.clone();
                    w.waiting -= 1;
                    w.pcs[t] = if w.cfg.look_after_unlock {
                        Pc::Take {
                            waited: by_timer,
                            woken: !by_timer,
                        }
                    } else {
                        w.take(t, by_timer)
                    };
                    out.push(w);
                }
                return out;
            }
            Pc::Clear => {
                let (_, _, pieces) = w.grant[t].clone().expect("a grant");
                for &(s, l, k) in &pieces {
                    if k == Kind::Dirty {
                        w.touch(t, s, l);
                    }
                }
                Pc::Clearing
            }
            Pc::Clearing => {
                let (start, len, pieces) = w.grant[t].clone().expect("a grant");
                for &(s, l, k) in &pieces {
                    if k == Kind::Dirty {
                        w.untouch(s, l, true);
                    }
                }
                if !w.zero[pages(start, len)].iter().all(|&z| z) {
                    w.fail(format!(
                        "calloc's grant {start:#x}+{len:#x} to thread {t} is not zero"
                    ));
                }
                Pc::Write
            }
            Pc::Write => {
                let (s, l, _) = w.grant[t].clone().expect("a grant");
                w.touch(t, s, l);
                Pc::Writing
            }
            Pc::Writing => {
                let (s, l, _) = w.grant[t].clone().expect("a grant");
                w.untouch(s, l, false);
                Pc::Free
            }
            Pc::Free => {
                let (s, ..) = w.grant[t].take().expect("a grant");
                // The lock kept by the scrubber: the block is left.
                let mut left = w.clone();
                left.held.insert(s, LEFT);
                left.left.push(s);
                left.signal_all();
                left.pcs[t] = Pc::Done;
                w.free_left();
                w.held.remove(&s);
                if w.with(|b| b.free(s, NOW)).is_none() {
                    w.fail(format!("thread {t}'s free of {s:#x} refused"));
                }
                w.pcs[t] = w.free_tail(t);
                return vec![w, left];
            }
            Pc::Discard(s, l, then) => {
                w.touch(t, s, l);
                Pc::Discarding(s, l, then)
            }
            Pc::Discarding(s, l, then) => {
                // The kernel drops the pages, or keeps them (mlock).
                let mut out = Vec::new();
                for dropped in [true, false] {
                    let mut w = self.clone();
                    let zero = dropped || w.zero[pages(s, l)].iter().all(|&z| z);
                    w.untouch(s, l, zero);
                    w.busy_end(s, if dropped { Kind::Fresh } else { Kind::Dirty });
                    w.pcs[t] = match (then, dropped) {
                        (Then::Free, true) => w.free_tail(t),
                        (Then::Free, false) => {
                            w.signal_all();
                            Pc::Done
                        }
                        (Then::Scrub, true) => w.scrub_loop(t),
                        (Then::Scrub, false) => w.scrub_rest(t),
                    };
                    out.push(w);
                }
                return out;
            }
            Pc::Yield | Pc::Idle => w.scrub_loop(t),
            Pc::Scrub(s, l) => {
                w.touch(t, s, l);
                Pc::Scrubbing(s, l)
            }
            Pc::Scrubbing(s, l) => {
                w.untouch(s, l, true);
                w.busy_end(s, Kind::Clean);
                w.scrub_loop(t)
            }
            Pc::Fork => {
                if let Err(e) = w.check_child() {
                    w.fail(e);
                }
                Pc::Done
            }
            Pc::Done => return Vec::new(),
        };
        w.pcs[t] = next;
        vec![w]
    }

    fn threads(&self) -> usize {
        self.roles.len()
    }
}

fn config(cap: usize, idle: bool) -> Config {
    Config {
        cap,
        idle,
        look_after_unlock: false,
    }
}

fn check(cfg: Config, roles: &[Role]) {
    let states = explore(World::new(cfg, roles));
    eprintln!("{roles:?}, {cfg:?}: {states} states");
}

#[test]
fn a_request_waits_for_a_busy_block_and_is_woken_when_it_ends() {
    check(config(PAGES * PAGE, false), &[Requester, Scrubber]);
    check(
        config(PAGES * PAGE, false),
        &[Requester, Requester, Scrubber],
    );
}

#[test]
fn memory_given_back_outside_the_lock_is_no_one_elses() {
    check(config(PAGE, false), &[Requester, Scrubber, Freer]);
    check(config(PAGES * PAGE, true), &[Requester, Scrubber, Freer]);
}

#[test]
fn a_fork_at_any_point_leaves_the_child_consistent() {
    check(config(PAGE, false), &[Requester, Scrubber, Forker]);
    check(config(PAGE, true), &[Freer, Scrubber, Forker]);
}

/// The checker finds what it is for: with the wake-up and the look in two
/// critical sections, the scrubber could take the next part of the block in
/// between, and the request found it Busy again.
#[test]
#[should_panic(expected = "before a woken request looked")]
fn a_look_after_the_lock_was_let_go_lets_the_scrubber_in() {
    let cfg = Config {
        look_after_unlock: true,
        ..config(PAGES * PAGE, false)
    };
    explore(World::new(cfg, &[Requester, Scrubber]));
}
