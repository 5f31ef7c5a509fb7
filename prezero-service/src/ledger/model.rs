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
//!
//! Invariant ([`Ledger::check`], after every transition in debug builds and
//! in the exhaustive test):
//! * a segment's memory is home (`Some`) exactly when it is not `Scrubbing`
//!   (the worker owns it meanwhile);
//! * `charged[uid]` is the sum of the lengths of the segments `Leased`,
//!   `Quarantined` or `Scrubbing` on behalf of `uid`, and no uid is charged 0;
//! * every segment belongs to one of the ledger's pools, and every id is
//!   below `next_id` (ids are never reused, so a late message about a
//!   destroyed segment cannot reach a new one).

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
}

/// What [`Ledger::choose`] grants: `ids` of `pool`, in the order to map them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) pool: usize,
    pub(crate) ids: Vec<u64>,
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
            },
        );
        self.charge(state.charged(), len);
        id
    }

    /// A new, zero segment of `pool`, ready for anyone.
    pub(crate) fn add_ready(&mut self, pool: usize, seg: S, len: usize, file: (u64, u64)) -> u64 {
        self.insert(pool, seg, len, file, State::Ready { owner: None })
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

    /// Ready bytes and all bytes of `pool`.
    fn sizes(&self, pool: usize) -> (usize, usize) {
        let (mut ready, mut total) = (0, 0);
        for e in self.entries.values().filter(|e| e.pool == pool) {
            total += e.len;
            if matches!(e.state, State::Ready { .. }) {
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

    /// Ready segments of `pool` that `uid` may have: its own scrubbed ones
    /// first (they spare fresh ones for others), then fresh ones.
    fn ready_for(&self, pool: usize, uid: u32) -> Vec<u64> {
        let of = |owner| {
            self.entries
                .iter()
                .filter(move |(_, e)| e.pool == pool && e.state == State::Ready { owner })
                .map(|(&id, _)| id)
        };
        of(Some(uid)).chain(of(None)).collect()
    }

    /// Which segments serve `bytes` on `page`-byte pages for `uid`: from one
    /// pool of that page size, the one whose segment is exactly the request
    /// first, then the one needing the fewest segments, then the least bytes
    /// beyond the request; among those that have enough ready for `uid` and
    /// keep it within its cap. Pools that would more than double the request
    /// come after all others: a 300 MiB VM takes two 256 MiB segments, not a
    /// 4 GiB one the next 4 GiB VM needs. Nothing changes until [`Ledger::lease`].
    ///
    /// With `nodes`, among the pools on those nodes only, in that order of
    /// preference (the node asked for, then those allowed instead, nearest
    /// first): a pool on an earlier node that has enough ready wins over any
    /// on a later one. `None`: every pool, as if all were on one node.
    pub(crate) fn choose_on(
        &self,
        uid: u32,
        bytes: u64,
        page: u64,
        nodes: Option<&[u32]>,
    ) -> Result<Grant, Refused> {
        let refuse = |reason, errno, ready, message: String| {
            Err(Refused {
                reason,
                errno,
                ready,
                message,
                short: None,
            })
        };
        if bytes == 0 {
            return refuse(
                Refusal::BadRequest,
                libc::EINVAL,
                0,
                "zero bytes requested".into(),
            );
        }
        // Where a pool's node stands in the order asked for (0 for any).
        let rank_of = |i: usize| match nodes {
            None => Some(0),
            Some(ns) => ns.iter().position(|&n| n == self.shapes[i].node),
        };
        let any_of_page = (0..self.shapes.len()).any(|i| self.shapes[i].page as u64 == page);
        let of_page: Vec<usize> = (0..self.shapes.len())
            .filter(|&i| self.shapes[i].page as u64 == page && rank_of(i).is_some())
            .collect();
        if of_page.is_empty() && any_of_page {
            let mut on: Vec<u32> = self
                .shapes
                .iter()
                .filter(|s| s.page as u64 == page)
                .map(|s| s.node)
                .collect();
            on.sort_unstable();
            on.dedup();
            let on: Vec<String> = on.iter().map(u32::to_string).collect();
            let asked: Vec<String> = nodes.unwrap_or(&[]).iter().map(u32::to_string).collect();
            return refuse(
                Refusal::BadRequest,
                libc::EINVAL,
                0,
                format!(
                    "no pool of page size {page} on NUMA node {} (this daemon has them on nodes {})",
                    asked.join(", "),
                    on.join(", ")
                ),
            );
        }
        if of_page.is_empty() {
            let mut served: Vec<String> = self.shapes.iter().map(|s| s.page.to_string()).collect();
            served.dedup();
            return refuse(
                Refusal::BadRequest,
                libc::EINVAL,
                0,
                format!(
                    "no pool of page size {page} (this daemon serves page sizes {})",
                    served.join(", ")
                ),
            );
        }
        let rounded = usize::try_from(bytes)
            .ok()
            .and_then(|b| b.checked_next_multiple_of(page as usize));
        // A pool holds whole segments: its capacity is the cap rounded down.
        let mut ranked: Vec<(usize, bool, bool, usize, usize, usize)> = of_page
            .iter()
            .filter_map(|&i| {
                let s = self.shapes[i];
                let r = rounded?;
                let n = r.div_ceil(s.segment);
                let total = n.checked_mul(s.segment).filter(|&t| t <= s.cap)?;
                let waste = total - r;
                Some((rank_of(i)?, total != r || n != 1, waste > r, n, waste, i))
            })
            .collect();
        if ranked.is_empty() {
            let cap = of_page.iter().map(|&i| self.shapes[i].cap).max();
            return refuse(
                Refusal::PoolCap,
                libc::ENOMEM,
                0,
                format!(
                    "{bytes} bytes is more than the cap of every pool of page size {page} \
                     (the largest is {})",
                    cap.unwrap_or(0)
                ),
            );
        }
        ranked.sort_unstable();
        let used = self.uid_used(uid);
        let mut short: Option<(usize, usize, usize)> = None;
        let mut over_cap = None;
        for &(_, _, _, n, _, pool) in &ranked {
            let want = n * self.shapes[pool].segment;
            if let Some(cap) = self.uid_cap.filter(|&c| used.saturating_add(want) > c) {
                over_cap.get_or_insert((want, cap));
                continue;
            }
            let mut ready = self.ready_for(pool, uid);
            if ready.len() >= n {
                ready.truncate(n);
                return Ok(Grant { pool, ids: ready });
            }
            short.get_or_insert((
                pool,
                n - ready.len(),
                ready.len() * self.shapes[pool].segment,
            ));
        }
        match (short, over_cap) {
            (Some((pool, missing, ready)), _) => {
                let s = self.shapes[pool];
                let on = match nodes {
                    Some(_) => format!(" on NUMA node {}", s.node),
                    None => String::new(),
                };
                Err(Refused {
                    reason: Refusal::NotReady,
                    errno: libc::ENOMEM,
                    ready,
                    message: format!(
                        "{ready} bytes ready in the pool of {page}-byte pages and {}-byte \
                         segments{on}, {} asked",
                        s.segment,
                        rounded.unwrap_or(0).next_multiple_of(s.segment)
                    ),
                    short: Some((pool, missing)),
                })
            }
            (None, Some((want, cap))) => refuse(
                Refusal::UidCap,
                libc::EDQUOT,
                0,
                format!(
                    "uid {uid} holds or has in quarantine {used} bytes; {want} more would pass \
                     its cap of {cap}"
                ),
            ),
            (None, None) => unreachable!("every ranked pool is either short or over the cap"),
        }
    }

    /// Hands `grant` to `uid` on `conn`. The ids must come from [`Ledger::choose`]
    /// for the same uid, with nothing changed in between.
    pub(crate) fn lease(&mut self, grant: &Grant, conn: u64, uid: u32) {
        for &id in &grant.ids {
            let e = &self.entries[&id];
            assert!(
                matches!(e.state, State::Ready { owner } if owner.is_none_or(|o| o == uid)),
                "lease of segment {id} in {:?} to uid {uid}",
                e.state
            );
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
    /// the worker for fresh pages, for `uid`.
    pub(crate) fn make_fresh_for(&mut self, pool: usize, uid: u32, k: usize) -> Vec<(u64, S)> {
        let ids: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| {
                e.pool == pool && matches!(e.state, State::Ready { owner: Some(o) } if o != uid)
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

    /// Ready segments of `pool` beyond its target by a whole segment or more,
    /// those only one uid may have first (fresh ones serve anyone).
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
                State::Ready { owner } if e.pool == pool => Some((owner.is_none(), id)),
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

// The tests read the ledger's private fields, so they are a child of this
// module; their file is `ledger/tests.rs`, beside this one.
#[cfg(test)]
#[path = "tests.rs"]
mod tests;
