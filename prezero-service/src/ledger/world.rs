//! The ledger model in a world that checks it: every event the event loop
//! and the worker can apply, applied as the server would, with what each
//! segment holds tracked beside the ledger (zero or not, whose bytes it may
//! still have) and checked at every hand-out. The exhaustive test
//! (`tests.rs`) explores every short sequence of events, the fuzz target
//! `ledger` long arbitrary ones.

use super::{Clean, Ledger, Shape, State};

/// Who had a segment's pages last without fresh pages since, in the
/// model: an adopted segment's holder is a guess.
const UNKNOWN: u32 = 999;

/// Tenants: odd connections are uid 10's, even ones uid 20's.
fn uid_of(conn: u64) -> u32 {
    if conn.is_multiple_of(2) {
        20
    } else {
        10
    }
}

/// Cgroups: connection 3 is a tenant of cgroup 1 (uid 10, as connection 1,
/// which is in none the daemon charges through); the others of none.
fn cg_of(conn: u64) -> Option<u64> {
    (conn == 3).then_some(1)
}

/// Every event the event loop and the worker can apply.
#[derive(Debug, Clone, Copy)]
pub enum Event {
    /// A new segment of the pool, if it wants one.
    Create(usize),
    /// A new segment of the pool placed in the cgroup (prepared for it: a
    /// target of 2 bytes), if it wants one.
    CreateIn(usize, u64),
    /// A previous instance's segment of the pool, held by the uid.
    Adopt(usize, u32),
    /// Adopted with a length its pool no longer has (configured otherwise).
    AdoptOdd(usize, u32),
    /// `(conn, bytes, node)`: a request of `bytes`, for that node only if any.
    Alloc(u64, u64, Option<u32>),
    /// `(conn, id)`
    Release(u64, u64),
    /// Two ids at once: all or none.
    ReleaseTwo(u64, u64, u64),
    /// The connection closes.
    Disconnect(u64),
    /// The segment goes to the worker; `true`: fresh pages always.
    StartClean(u64, bool),
    /// A ready segment of the pool, of other uids', made fresh for the uid.
    MakeFresh(usize, u32),
    /// The worker finishes what it was given; `false`: the pages could
    /// not be had (or verification failed), the segment is destroyed.
    Finish(u64, bool),
    /// The worker reports the other cleaning than it was sent for.
    FinishOtherwise(u64),
    /// The pool's ready segments beyond its target go.
    Trim(usize),
}

/// The ledger, what the worker holds, and per segment id: whether it is
/// zero, and the uid whose bytes it may still hold.
#[derive(Clone)]
pub(crate) struct World {
    pub(crate) ledger: Ledger<u64>,
    uid_cap: Option<usize>,
    /// Most segments at once: creations and adoptions beyond do not apply.
    most: usize,
    worker: Vec<Option<(u64, Clean)>>,
    zero: Vec<bool>,
    dirty_by: Vec<Option<u32>>,
}

impl World {
    /// Pools of `shapes` (page sizes of 1: requests are in pages), no
    /// segment yet.
    pub(crate) fn new(shapes: Vec<Shape>, uid_cap: Option<usize>, most: usize) -> World {
        World {
            ledger: Ledger::new(shapes, uid_cap),
            uid_cap,
            most,
            worker: Vec::new(),
            zero: Vec::new(),
            dirty_by: Vec::new(),
        }
    }

    /// A segment just made: its slots.
    fn made(&mut self, id: u64, zero: bool, dirty_by: Option<u32>) {
        let i = id as usize;
        if self.zero.len() <= i {
            self.worker.resize(i + 1, None);
            self.zero.resize(i + 1, false);
            self.dirty_by.resize(i + 1, None);
        }
        self.zero[i] = zero;
        self.dirty_by[i] = dirty_by;
    }

    fn leased_on(&self, conn: u64, id: u64) -> bool {
        self.ledger
            .get(id)
            .is_some_and(|e| matches!(e.state, State::Leased { conn: c, .. } if c == conn))
    }

    /// Applies `e` as the server would; false if it does not apply here.
    pub(crate) fn apply(&mut self, e: Event) -> bool {
        let l = &mut self.ledger;
        match e {
            Event::Create(pool) => {
                if l.entries().count() >= self.most || !l.wants_growth(pool) {
                    return false;
                }
                let seg = l.shapes()[pool].segment;
                let id = l.add_ready(pool, 0, seg, (0, 0), None);
                self.made(id, true, None);
            }
            Event::CreateIn(pool, cg) => {
                if l.entries().count() >= self.most || !l.wants_growth_in(pool, cg, 2) {
                    return false;
                }
                let seg = l.shapes()[pool].segment;
                let id = l.add_ready(pool, 0, seg, (0, 0), Some(cg));
                self.made(id, true, None);
            }
            Event::Adopt(pool, uid) | Event::AdoptOdd(pool, uid) => {
                if l.entries().count() >= self.most {
                    return false;
                }
                let odd = matches!(e, Event::AdoptOdd(..));
                let seg = l.shapes()[pool].segment + usize::from(odd);
                let id = l.adopt(pool, 0, seg, (0, 0), uid);
                self.made(id, false, Some(UNKNOWN));
            }
            Event::Alloc(conn, bytes, node) => return self.alloc(conn, bytes, node),
            Event::Release(conn, id) => {
                let expect = self.leased_on(conn, id);
                let r = self.ledger.release(conn, &[id]);
                assert_eq!(r.is_ok(), expect, "{e:?}");
                // Naming a held id twice is refused whole.
                if expect {
                    assert_eq!(self.ledger.release(conn, &[id, id]), Err(id));
                }
                return expect;
            }
            Event::ReleaseTwo(conn, a, b) => {
                let (ha, hb) = (self.leased_on(conn, a), self.leased_on(conn, b));
                if ha == hb {
                    // Both or neither: the single releases cover it.
                    return false;
                }
                assert!(self.ledger.release(conn, &[a, b]).is_err(), "{e:?}");
                assert_eq!(
                    (self.leased_on(conn, a), self.leased_on(conn, b)),
                    (ha, hb),
                    "a refused release changes nothing"
                );
            }
            Event::Disconnect(conn) => {
                if !l
                    .entries()
                    .any(|(_, e)| matches!(e.state, State::Leased { conn: c, .. } if c == conn))
                {
                    return false;
                }
                l.disconnect(conn);
            }
            Event::StartClean(id, fresh) => match l.start_clean(id, fresh) {
                Some((seg, how)) => {
                    let i = id as usize;
                    assert!(how == Clean::Fresh || !(fresh || self.dirty_by[i] == Some(UNKNOWN)));
                    self.worker[i] = Some((seg, how));
                }
                None => return false,
            },
            Event::MakeFresh(pool, uid) => {
                let batch = l.make_fresh_for(pool, uid, None, 1);
                if batch.is_empty() {
                    return false;
                }
                for (id, seg) in batch {
                    self.worker[id as usize] = Some((seg, Clean::Fresh));
                }
            }
            Event::Finish(id, ok) => return self.finish(id, ok),
            Event::FinishOtherwise(id) => return self.finish_otherwise(id),
            Event::Trim(pool) => {
                let extra = l.surplus(pool);
                if extra.is_empty() {
                    return false;
                }
                for id in extra {
                    assert!(
                        matches!(l.get(id).map(|e| e.state), Some(State::Ready { .. })),
                        "trimmed a segment that is not ready"
                    );
                    assert!(l.remove(id).is_some(), "ready segments are home");
                }
            }
        }
        true
    }

    /// A request of `bytes` by `conn`, on `node` only if any: every segment handed out must be
    /// zero, of the pool chosen, placed for the connection's cgroup or lent to it, and not
    /// hold another uid's bytes.
    fn alloc(&mut self, conn: u64, bytes: u64, node: Option<u32>) -> bool {
        let l = &mut self.ledger;
        let uid = uid_of(conn);
        let nodes = node.map(|n| [n]);
        let cg = cg_of(conn);
        let Ok(g) = l.choose_on(uid, cg, bytes, 1, nodes.as_ref().map(|n| &n[..])) else {
            return false;
        };
        let shape = l.shapes()[g.pool];
        assert_eq!(
            g.ids.len(),
            (bytes as usize).div_ceil(shape.segment),
            "{g:?}"
        );
        assert!(
            node.is_none_or(|n| n == shape.node),
            "{g:?} not on node {node:?}"
        );
        let mut lent = 0;
        for &id in &g.ids {
            assert_eq!(l.get(id).map(|e| e.pool), Some(g.pool));
            let place = l.get(id).and_then(|e| e.place);
            assert!(
                place.is_none_or(|p| Some(p) == cg),
                "segment {id} placed in cgroup {place:?} handed to one of {cg:?}"
            );
            if cg.is_some() && place.is_none() {
                lent += l.get(id).map_or(0, |e| e.len);
            }
            assert!(self.zero[id as usize], "segment {id} handed out not zero");
            assert!(
                self.dirty_by[id as usize].is_none_or(|u| u == uid),
                "uid {uid} got segment {id}, last written by {:?} without fresh pages",
                self.dirty_by[id as usize]
            );
        }
        assert_eq!(g.lent, lent, "{g:?}");
        let before = cg.map(|c| l.lent(c));
        l.lease(&g, conn, uid, cg);
        assert_eq!(cg.map(|c| l.lent(c)), before.map(|b| b + lent));
        assert!(
            self.uid_cap.is_none_or(|c| l.uid_used(uid) <= c),
            "uid {uid} past its cap"
        );
        for id in g.ids {
            self.zero[id as usize] = false;
            self.dirty_by[id as usize] = Some(uid);
        }
        true
    }

    /// The worker finishes `id`: zero again, or destroyed when `ok` is false (or it is of
    /// another shape than its pool's).
    fn finish(&mut self, id: u64, ok: bool) -> bool {
        let l = &mut self.ledger;
        let Some((seg, how)) = self.worker.get_mut(id as usize).and_then(Option::take) else {
            return false;
        };
        let e = l.get(id).expect("the worker's segments are known");
        let odd = e.len != l.shapes()[e.pool].segment;
        if !ok {
            assert!(l.remove(id).is_none(), "the worker had it");
        } else if l.cleaned(id, seg, how).is_ok() {
            assert!(!odd, "a segment of another shape came back ready");
            self.zero[id as usize] = true;
            if how == Clean::Fresh {
                self.dirty_by[id as usize] = None;
            }
        } else {
            assert!(odd && l.get(id).is_none(), "a wanted segment was refused");
        }
        true
    }

    /// The worker reports the other cleaning than `id` was sent for: refused, and the
    /// segment destroyed.
    fn finish_otherwise(&mut self, id: u64) -> bool {
        let l = &mut self.ledger;
        let Some((seg, how)) = self.worker.get_mut(id as usize).and_then(Option::take) else {
            return false;
        };
        let other = match how {
            Clean::Fresh => Clean::InPlace,
            Clean::InPlace => Clean::Fresh,
        };
        assert!(
            l.cleaned(id, seg, other).is_err(),
            "cleaned otherwise, accepted"
        );
        assert!(l.get(id).is_none());
        true
    }
}
