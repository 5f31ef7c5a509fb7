//! The daemon's segment ledger: which segment is in which state, who is
//! charged for it, which pool a request is served from, and the transitions
//! between states. Pure data: no system calls and no descriptors (the segment
//! is a type parameter the ledger only holds), so every sequence of
//! transitions is explored in a test. The event loop (`server/`) moves
//! messages and descriptors and calls these transitions.
//!
//! A segment's life, and the rule that keeps tenants apart:
//!
//! ```text
//!   create ──> Ready(anyone) ──lease──> Leased(conn, uid) ──release / disconnect──> Quarantined(uid)
//!                ^      ^                    ^                                            │
//!                │      │ fresh pages        │ lease by uid     no other open file        │ start_clean
//!                │      │ (another uid       │                  description anywhere      v
//!                │      │  asked)       Ready(uid) <── cleaned in place ───────── Scrubbing(uid)
//!                │      └───────────────────┘                                             │
//!                └────────── cleaned with fresh pages (reuse = fresh, or adopted) ────────┘
//! ```
//!
//! * A segment passes to another uid only with fresh pages: `Ready(uid)` is
//!   leased to `uid` alone, and only [`Clean::Fresh`] makes `Ready(anyone)`.
//! * `Leased`, `Quarantined` and `Scrubbing` segments count against the uid
//!   that held them.
//! * A segment's pages are charged by the kernel to the cgroup whose process
//!   faulted them in: its `place` (a tenant cgroup's key, or `None`: the
//!   daemon's own, the shared pool). A segment placed in a cgroup is handed
//!   only to that cgroup's tenants; a shared one to anyone, and what a
//!   tenant holds of those is *lent* to its cgroup (`places.rs`), which the
//!   daemon counts against the cgroup's limits since the kernel does not.
//!
//! Invariant ([`Ledger::check`], after every transition in debug builds and
//! in the exhaustive test):
//! * a segment's memory is home (`Some`) exactly when it is not `Scrubbing`
//!   (the worker owns it meanwhile);
//! * `charged[uid]` is the sum of the lengths of the segments `Leased`,
//!   `Quarantined` or `Scrubbing` on behalf of `uid`, and no uid is charged 0;
//! * every segment belongs to one of the ledger's pools, and every id is
//!   below `next_id` (ids are never reused, so a late message about a
//!   destroyed segment cannot reach a new one);
//! * a `Ready` segment has no holder's cgroup.

use std::collections::{BTreeMap, HashMap};

use crate::protocol::Refusal;

/// How a segment is made zero again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Clean {
    /// Streaming stores over the pages it has: for the uid that held it.
    InPlace,
    /// Punched and repopulated: for anyone.
    Fresh,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Zero and verified; `owner`: only that uid may have it (scrubbed in place).
    Ready {
        owner: Option<u32>,
    },
    Leased {
        conn: u64,
        uid: u32,
    },
    Quarantined {
        uid: u32,
    },
    /// With the worker; `uid`: who is charged meanwhile (none for ready
    /// memory of one uid made fresh for another); `how`: the cleaning it was
    /// sent for, the only one [`Ledger::cleaned`] accepts back.
    Scrubbing {
        uid: Option<u32>,
        how: Clean,
    },
}

impl State {
    /// The uid this state charges.
    fn charged(self) -> Option<u32> {
        match self {
            State::Leased { uid, .. } | State::Quarantined { uid } => Some(uid),
            State::Scrubbing { uid, .. } => uid,
            State::Ready { .. } => None,
        }
    }
}

/// One pool's shape: its page and segment size, its NUMA node, and its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) page: usize,
    pub(crate) segment: usize,
    /// Every page of the pool's segments is on this node.
    pub(crate) node: u32,
    /// Bytes to keep ready.
    pub(crate) target: usize,
    /// Most bytes in all states together.
    pub(crate) cap: usize,
}

#[derive(Clone)]
pub(crate) struct Entry<S> {
    pub(crate) pool: usize,
    pub(crate) len: usize,
    pub(crate) state: State,
    /// `None` while the worker has it.
    seg: Option<S>,
    /// Taken over from a previous instance: who held it last is a guess, so
    /// it gets fresh pages.
    adopted: bool,
    /// The memfd's `(dev, ino)`: its line in the ledger file, also while the
    /// worker has the segment.
    pub(crate) file: (u64, u64),
    /// The cgroup its pages are charged to (`None`: the daemon's).
    pub(crate) place: Option<u64>,
    /// The cgroup of the tenant that holds or last held it, until it is
    /// ready again: where its scrub runs, and who it is lent to.
    pub(crate) holder: Option<u64>,
}

/// What [`Ledger::choose_on`] grants: `ids` of `pool`, in the order to map
/// them; `lent`: bytes of them not placed in the asker's cgroup (the kernel
/// charges them to the daemon).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) pool: usize,
    pub(crate) ids: Vec<u64>,
    pub(crate) lent: usize,
}

/// Why a request is refused, with what the answer says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) reason: Refusal,
    pub(crate) errno: i32,
    /// Bytes ready for the asker in the pool that would have served it.
    pub(crate) ready: usize,
    pub(crate) message: String,
    /// `(pool, segments)`: what the preferred pool lacks for this request,
    /// when only readiness stood in the way.
    pub(crate) short: Option<(usize, usize)>,
}

/// Segments per state in one pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) ready: usize,
    pub(crate) leased: usize,
    pub(crate) quarantined: usize,
    pub(crate) scrubbing: usize,
}

#[derive(Clone)]
pub(crate) struct Ledger<S> {
    shapes: Vec<Shape>,
    uid_cap: Option<usize>,
    entries: BTreeMap<u64, Entry<S>>,
    next_id: u64,
    charged: HashMap<u32, usize>,
}

impl<S> Ledger<S> {
    pub(crate) fn new(shapes: Vec<Shape>, uid_cap: Option<usize>) -> Ledger<S> {
        Ledger {
            shapes,
            uid_cap,
            entries: BTreeMap::new(),
            next_id: 1,
            charged: HashMap::new(),
        }
    }

    pub(crate) fn shapes(&self) -> &[Shape] {
        &self.shapes
    }

    fn charge(&mut self, uid: Option<u32>, len: usize) {
        if let Some(u) = uid {
            *self.charged.entry(u).or_insert(0) += len;
        }
    }

    fn uncharge(&mut self, uid: Option<u32>, len: usize) {
        if let Some(u) = uid {
            let c = self
                .charged
                .get_mut(&u)
                .expect("a charged uid has an entry");
            *c -= len;
            if *c == 0 {
                self.charged.remove(&u);
            }
        }
    }

    fn set(&mut self, id: u64, state: State) {
        let e = self.entries.get_mut(&id).expect("set on a known segment");
        let (old, len) = (e.state, e.len);
        e.state = state;
        self.uncharge(old.charged(), len);
        self.charge(state.charged(), len);
    }

    fn insert(&mut self, pool: usize, seg: S, len: usize, file: (u64, u64), state: State) -> u64 {
        self.insert_in(pool, seg, len, file, state, None)
    }

    fn insert_in(
        &mut self,
        pool: usize,
        seg: S,
        len: usize,
        file: (u64, u64),
        state: State,
        place: Option<u64>,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let adopted = matches!(state, State::Quarantined { .. });
        self.entries.insert(
            id,
            Entry {
                pool,
                len,
                state,
                seg: Some(seg),
                adopted,
                file,
                place,
                holder: None,
            },
        );
        self.charge(state.charged(), len);
        id
    }

    /// A new, zero segment of `pool` whose pages are charged to `place`
    /// (`None`: the daemon's), ready for anyone there.
    pub(crate) fn add_ready(
        &mut self,
        pool: usize,
        seg: S,
        len: usize,
        file: (u64, u64),
        place: Option<u64>,
    ) -> u64 {
        let ready = State::Ready { owner: None };
        self.insert_in(pool, seg, len, file, ready, place)
    }

    /// A segment a previous instance handed out and `uid` still holds:
    /// quarantined, charged to `uid`, cleaned with fresh pages.
    pub(crate) fn adopt(
        &mut self,
        pool: usize,
        seg: S,
        len: usize,
        file: (u64, u64),
        uid: u32,
    ) -> u64 {
        self.insert(pool, seg, len, file, State::Quarantined { uid })
    }

    /// The pool a segment of `page`-byte pages and `len` bytes, taken over from
    /// a previous instance, with most of its pages on `node`, belongs to: the
    /// one of that shape on that node, else of that shape, else any pool of
    /// the page size (it is destroyed once clean), else none.
    pub(crate) fn pool_for(&self, page: usize, len: usize, node: Option<u32>) -> Option<usize> {
        let of_page = |s: &Shape| s.page == page;
        let shaped = |s: &Shape| of_page(s) && s.segment == len;
        self.shapes
            .iter()
            .position(|s| shaped(s) && Some(s.node) == node)
            .or_else(|| self.shapes.iter().position(shaped))
            .or_else(|| self.shapes.iter().position(of_page))
    }

    pub(crate) fn get(&self, id: u64) -> Option<&Entry<S>> {
        self.entries.get(&id)
    }

    /// The segment's memory, if it is home.
    pub(crate) fn home(&self, id: u64) -> Option<&S> {
        self.entries.get(&id).and_then(|e| e.seg.as_ref())
    }

    pub(crate) fn entries(&self) -> impl Iterator<Item = (u64, &Entry<S>)> {
        self.entries.iter().map(|(&id, e)| (id, e))
    }

    /// Bytes `uid` holds or has in quarantine or being cleaned.
    pub(crate) fn uid_used(&self, uid: u32) -> usize {
        self.charged.get(&uid).copied().unwrap_or(0)
    }

    /// Every charged uid with its bytes.
    pub(crate) fn charged(&self) -> impl Iterator<Item = (u32, usize)> + '_ {
        self.charged.iter().map(|(&u, &b)| (u, b))
    }

    pub(crate) fn counts(&self, pool: usize) -> Counts {
        let mut c = Counts::default();
        for e in self.entries.values().filter(|e| e.pool == pool) {
            match e.state {
                State::Ready { .. } => c.ready += 1,
                State::Leased { .. } => c.leased += 1,
                State::Quarantined { .. } => c.quarantined += 1,
                State::Scrubbing { .. } => c.scrubbing += 1,
            }
        }
        c
    }

    /// Ready bytes of the shared pool (placed in no cgroup) and all bytes of `pool`.
    fn sizes(&self, pool: usize) -> (usize, usize) {
        let (mut ready, mut total) = (0, 0);
        for e in self.entries.values().filter(|e| e.pool == pool) {
            total += e.len;
            if matches!(e.state, State::Ready { .. }) && e.place.is_none() {
                ready += e.len;
            }
        }
        (ready, total)
    }

    pub(crate) fn any_quarantined(&self) -> bool {
        self.entries
            .values()
            .any(|e| matches!(e.state, State::Quarantined { .. }))
    }

    pub(crate) fn quarantined(&self) -> Vec<u64> {
        self.entries
            .iter()
            .filter(|(_, e)| matches!(e.state, State::Quarantined { .. }))
            .map(|(&id, _)| id)
            .collect()
    }

    pub(crate) fn leased(&self) -> usize {
        self.entries
            .values()
            .filter(|e| matches!(e.state, State::Leased { .. }))
            .count()
    }

    /// Ready segments of `pool` that `uid` of cgroup `cg` may have: those
    /// placed in `cg` first (the kernel already charges them there), then
    /// shared ones; of each, its own scrubbed ones first (they spare fresh
    /// ones for others), then fresh ones.
    fn ready_for(&self, pool: usize, uid: u32, cg: Option<u64>) -> Vec<u64> {
        let of = |owner, place| {
            self.entries
                .iter()
                .filter(move |(_, e)| {
                    e.pool == pool && e.state == State::Ready { owner } && e.place == place
                })
                .map(|(&id, _)| id)
        };
        let mine = cg.map(|c| of(Some(uid), Some(c)).chain(of(None, Some(c))));
        let shared = of(Some(uid), None).chain(of(None, None));
        mine.into_iter().flatten().chain(shared).collect()
    }

    /// Hands `grant` to `uid` of cgroup `cg` on `conn`. The ids must come
    /// from [`Ledger::choose_on`] for the same uid and cgroup, with nothing
    /// changed in between.
    pub(crate) fn lease(&mut self, grant: &Grant, conn: u64, uid: u32, cg: Option<u64>) {
        for &id in &grant.ids {
            let e = self
                .entries
                .get_mut(&id)
                .expect("granted segments are known");
            assert!(
                matches!(e.state, State::Ready { owner } if owner.is_none_or(|o| o == uid))
                    && e.place.is_none_or(|p| Some(p) == cg),
                "lease of segment {id} in {:?} of cgroup {:?} to uid {uid} of {cg:?}",
                e.state,
                e.place
            );
            e.holder = cg;
            self.set(id, State::Leased { conn, uid });
        }
        debug_assert!(self.check());
    }

    /// Takes back `ids` from `conn` into quarantine, all or none: each must be
    /// leased on `conn`, and named once.
    pub(crate) fn release(&mut self, conn: u64, ids: &[u64]) -> Result<(), u64> {
        for (i, id) in ids.iter().enumerate() {
            let held = self
                .entries
                .get(id)
                .is_some_and(|e| matches!(e.state, State::Leased { conn: c, .. } if c == conn));
            if !held || ids[..i].contains(id) {
                return Err(*id);
            }
        }
        for &id in ids {
            if let State::Leased { uid, .. } = self.entries[&id].state {
                self.set(id, State::Quarantined { uid });
            }
        }
        debug_assert!(self.check());
        Ok(())
    }

    /// Everything leased on `conn` goes to quarantine; which segments.
    pub(crate) fn disconnect(&mut self, conn: u64) -> Vec<u64> {
        let held: Vec<(u64, u32)> = self
            .entries
            .iter()
            .filter_map(|(&id, e)| match e.state {
                State::Leased { conn: c, uid } if c == conn => Some((id, uid)),
                _ => None,
            })
            .collect();
        for &(id, uid) in &held {
            self.set(id, State::Quarantined { uid });
        }
        debug_assert!(self.check());
        held.into_iter().map(|(id, _)| id).collect()
    }

    /// A quarantined segment nobody else holds goes to the worker: its memory,
    /// and how to clean it (in place for the uid that held it, unless the
    /// segment was adopted or `fresh_always`).
    pub(crate) fn start_clean(&mut self, id: u64, fresh_always: bool) -> Option<(S, Clean)> {
        let e = self.entries.get_mut(&id)?;
        let State::Quarantined { uid } = e.state else {
            return None;
        };
        let seg = e.seg.take().expect("quarantined segments are home");
        let how = if e.adopted || fresh_always {
            Clean::Fresh
        } else {
            Clean::InPlace
        };
        self.set(
            id,
            State::Scrubbing {
                uid: Some(uid),
                how,
            },
        );
        debug_assert!(self.check());
        Some((seg, how))
    }

    /// Up to `k` ready segments of `pool` that only other uids may have go to
    /// the worker for fresh pages, for `uid` of cgroup `cg`: shared ones, or
    /// ones placed in `cg` (their fresh pages are faulted in there again).
    pub(crate) fn make_fresh_for(
        &mut self,
        pool: usize,
        uid: u32,
        cg: Option<u64>,
        k: usize,
    ) -> Vec<(u64, S)> {
        let ids: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| {
                e.pool == pool
                    && (e.place.is_none() || e.place == cg)
                    && matches!(e.state, State::Ready { owner: Some(o) } if o != uid)
            })
            .map(|(&id, _)| id)
            .take(k)
            .collect();
        let mut batch = Vec::with_capacity(ids.len());
        for id in ids {
            let seg = self.entries.get_mut(&id).and_then(|e| e.seg.take());
            self.set(
                id,
                State::Scrubbing {
                    uid: None,
                    how: Clean::Fresh,
                },
            );
            batch.push((id, seg.expect("ready segments are home")));
        }
        debug_assert!(self.check());
        batch
    }

    /// The worker made segment `id` zero `how`: it is ready again (for the uid
    /// that held it, if cleaned in place). `Err(seg)`: the segment is no longer
    /// wanted (forgotten meanwhile, of another shape than its pool's since a
    /// restart, or cleaned otherwise than it was sent for): the caller destroys it.
    pub(crate) fn cleaned(&mut self, id: u64, seg: S, how: Clean) -> Result<(), S> {
        let Some(e) = self.entries.get(&id) else {
            return Err(seg);
        };
        let State::Scrubbing { uid, how: sent } = e.state else {
            return Err(seg);
        };
        if e.len != self.shapes[e.pool].segment || how != sent {
            self.remove(id);
            return Err(seg);
        }
        // In place keeps the pages the last holder may still reach: only that
        // uid may have them.
        let owner = match how {
            Clean::InPlace => uid,
            Clean::Fresh => None,
        };
        let e = self.entries.get_mut(&id).expect("checked above");
        e.seg = Some(seg);
        e.adopted = false;
        e.holder = None;
        self.set(id, State::Ready { owner });
        debug_assert!(self.check());
        Ok(())
    }

    /// Forgets segment `id`, whatever its state; its memory if it was home.
    pub(crate) fn remove(&mut self, id: u64) -> Option<S> {
        let e = self.entries.remove(&id)?;
        self.uncharge(e.state.charged(), e.len);
        debug_assert!(self.check());
        e.seg
    }

    /// Forgets every segment (shutdown: what clients hold stays theirs).
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.charged.clear();
    }

    /// Whether `pool` should grow by a segment: short of its target, with
    /// room under its cap.
    pub(crate) fn wants_growth(&self, pool: usize) -> bool {
        let s = self.shapes[pool];
        let (ready, total) = self.sizes(pool);
        ready < s.target && total + s.segment <= s.cap
    }

    /// Whether any pool has less ready than its target.
    pub(crate) fn any_short(&self) -> bool {
        (0..self.shapes.len()).any(|i| self.sizes(i).0 < self.shapes[i].target)
    }

    /// Shared ready segments of `pool` beyond its target by a whole segment
    /// or more, those only one uid may have first (fresh ones serve anyone).
    pub(crate) fn surplus(&self, pool: usize) -> Vec<u64> {
        let s = self.shapes[pool];
        // Ready bytes beyond the target: `target + segment` may not fit a usize.
        let beyond = self.sizes(pool).0.saturating_sub(s.target);
        if beyond < s.segment {
            return Vec::new();
        }
        let mut extra: Vec<(bool, u64)> = self
            .entries
            .iter()
            .filter_map(|(&id, e)| match e.state {
                State::Ready { owner } if e.pool == pool && e.place.is_none() => {
                    Some((owner.is_none(), id))
                }
                _ => None,
            })
            .collect();
        extra.sort_unstable();
        extra.truncate(beyond / s.segment);
        extra.into_iter().map(|(_, id)| id).collect()
    }

    /// The invariant of the module docs (no allocation: it runs after every
    /// transition in debug builds).
    pub(crate) fn check(&self) -> bool {
        for (&id, e) in &self.entries {
            let home_ok = e.seg.is_some() != matches!(e.state, State::Scrubbing { .. });
            if !home_ok || e.pool >= self.shapes.len() || id >= self.next_id {
                return false;
            }
            if matches!(e.state, State::Ready { .. }) && e.holder.is_some() {
                return false;
            }
            if e.state
                .charged()
                .is_some_and(|u| !self.charged.contains_key(&u))
            {
                return false;
            }
        }
        self.charged.iter().all(|(&u, &bytes)| {
            let sum: usize = self
                .entries
                .values()
                .filter(|e| e.state.charged() == Some(u))
                .map(|e| e.len)
                .sum();
            bytes > 0 && sum == bytes
        })
    }
}

// Which segments serve a request (`choose.rs`) and what is placed in or lent
// to each cgroup (`places.rs`) read the ledger's private fields, so they are
// children of this module, in files beside it; so are the tests.
#[path = "choose.rs"]
mod choose;
#[path = "places.rs"]
mod places;

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
