//! The ledger model's tests: every sequence of transitions up to a depth,
//! checked against the invariant and against tenants meeting each other's
//! bytes, and how a request picks its segments and says why it is refused.

use super::*;
use crate::ledger::world::{Event, World};

fn events() -> Vec<Event> {
    let mut v = vec![
        Event::Create(0),
        Event::Create(1),
        Event::CreateIn(0, 1),
        Event::Adopt(0, 20),
        Event::AdoptOdd(1, 10),
        Event::ReleaseTwo(1, 1, 2),
        Event::ReleaseTwo(2, 2, 3),
        Event::Trim(0),
        Event::Trim(1),
        Event::MakeFresh(0, 10),
        Event::MakeFresh(1, 20),
    ];
    for conn in 1..=3 {
        v.push(Event::Disconnect(conn));
        for bytes in 1..=3 {
            v.push(Event::Alloc(conn, bytes, None));
        }
    }
    for id in 1..=4 {
        v.push(Event::Release(1, id));
        v.push(Event::Release(2, id));
        v.push(Event::StartClean(id, false));
        v.push(Event::StartClean(id, true));
        v.push(Event::Finish(id, true));
        v.push(Event::Finish(id, false));
        v.push(Event::FinishOtherwise(id));
    }
    v
}

/// Two pools of page size 1, segments of 1 and 2; a uid cap of 3; at most 4
/// segments at once. Connections 1 and 3 are uid 10's, 2 is uid 20's.
fn world() -> World {
    let shapes = vec![
        Shape {
            page: 1,
            node: 0,
            segment: 1,
            target: 1,
            cap: 3,
        },
        Shape {
            page: 1,
            node: 0,
            segment: 2,
            target: 2,
            cap: 4,
        },
    ];
    World::new(shapes, Some(3), 4)
}

fn explore(w: &World, depth: usize, evs: &[Event], visited: &mut usize) {
    assert!(w.ledger.check(), "invariant broken");
    if depth == 0 {
        return;
    }
    for &e in evs {
        let mut next = w.clone();
        if next.apply(e) {
            *visited += 1;
            explore(&next, depth - 1, evs, visited);
        }
    }
}

/// How deep the exploration goes, and how many sequences that must reach:
/// Miri (scripts/miri.sh) is some thousand times slower than a native run, so
/// it explores shorter sequences.
const DEPTH: usize = if cfg!(miri) { 3 } else { 8 };
const AT_LEAST: usize = if cfg!(miri) { 150 } else { 500_000 };

#[test]
fn every_sequence_of_transitions_keeps_the_invariant_and_tenants_apart() {
    let mut visited = 0;
    explore(&world(), DEPTH, &events(), &mut visited);
    eprintln!("{visited} sequences of up to {DEPTH} transitions");
    assert!(visited > AT_LEAST, "explored only {visited} sequences");
}

#[test]
fn a_request_takes_an_exact_fit_first_then_the_fewest_segments() {
    let shape = |segment| Shape {
        page: 2,
        node: 0,
        segment,
        target: 0,
        cap: 64,
    };
    // Segments of 4, 16 and 8 units.
    let mut l: Ledger<()> = Ledger::new(vec![shape(4), shape(16), shape(8)], None);
    for pool in 0..3 {
        for _ in 0..4 {
            l.add_ready(pool, (), l.shapes[pool].segment, (0, 0), None);
        }
    }
    let pool_of = |l: &Ledger<()>, bytes| {
        let g = l.choose_on(1, None, bytes, 2, None).unwrap();
        (g.pool, g.ids.len())
    };
    assert_eq!(pool_of(&l, 8), (2, 1), "exact fit");
    assert_eq!(pool_of(&l, 16), (1, 1), "exact fit");
    assert_eq!(
        pool_of(&l, 7),
        (2, 1),
        "one segment, least beyond (rounded to 8)"
    );
    assert_eq!(pool_of(&l, 3), (0, 1), "one segment, least beyond");
    assert_eq!(pool_of(&l, 20), (1, 2), "fewest segments");
    // Without ready 16s, the 8s: three segments beat five 4s.
    let sixteens: Vec<u64> = l
        .entries()
        .filter(|(_, e)| e.pool == 1)
        .map(|(id, _)| id)
        .collect();
    for id in sixteens {
        l.remove(id);
    }
    assert_eq!(pool_of(&l, 20), (2, 3));
    let r = l.choose_on(1, None, 64, 2, None).unwrap_err();
    assert_eq!(r.reason, Refusal::NotReady);
    assert_eq!(
        r.short,
        Some((1, 4)),
        "the pool needing fewest segments grows"
    );
}

#[test]
fn a_pool_that_would_more_than_double_the_request_comes_last() {
    let shape = |segment| Shape {
        page: 2,
        node: 0,
        segment,
        target: 0,
        cap: 64,
    };
    let mut l: Ledger<()> = Ledger::new(vec![shape(16), shape(4)], None);
    for pool in 0..2 {
        for _ in 0..4 {
            l.add_ready(pool, (), l.shapes[pool].segment, (0, 0), None);
        }
    }
    let pool_of = |bytes| l.choose_on(1, None, bytes, 2, None).unwrap().pool;
    assert_eq!(pool_of(6), 1, "two 4s, not a 16 (10 beyond a request of 6)");
    assert_eq!(pool_of(10), 0, "one 16: 6 beyond a request of 10");
}

#[test]
fn refusals_say_why() {
    let mut l: Ledger<()> = Ledger::new(
        vec![Shape {
            page: 2,
            node: 0,
            segment: 4,
            target: 0,
            cap: 8,
        }],
        Some(8),
    );
    l.add_ready(0, (), 4, (0, 0), None);
    let why =
        |l: &Ledger<()>, bytes, page| l.choose_on(7, None, bytes, page, None).unwrap_err().reason;
    assert_eq!(why(&l, 0, 2), Refusal::BadRequest);
    assert_eq!(why(&l, 4, 4096), Refusal::BadRequest);
    assert_eq!(why(&l, 9, 2), Refusal::PoolCap);
    assert_eq!(
        why(&l, 6, 2),
        Refusal::NotReady,
        "two segments fit the cap of 8"
    );
    assert_eq!(why(&l, u64::MAX, 2), Refusal::PoolCap);
    let r = l.choose_on(7, None, 8, 2, None).unwrap_err();
    assert_eq!(
        (r.reason, r.ready, r.short),
        (Refusal::NotReady, 4, Some((0, 1)))
    );
    let g = l.choose_on(7, None, 4, 2, None).unwrap();
    l.lease(&g, 1, 7, None);
    l.add_ready(0, (), 4, (0, 0), None);
    l.add_ready(0, (), 4, (0, 0), None);
    assert_eq!(
        l.choose_on(7, None, 8, 2, None).unwrap_err().reason,
        Refusal::UidCap
    );
    assert!(
        l.choose_on(8, None, 8, 2, None).is_ok(),
        "the cap is per uid"
    );
}

/// Pools on two nodes: a request for a node takes only that node's pools,
/// and says so when they are short; with other nodes allowed it takes the
/// next in the order asked; a node without a pool of the page is a bad request.
#[test]
fn a_request_for_a_node_takes_only_its_pools_unless_others_are_allowed() {
    let shape = |node, segment| Shape {
        page: 2,
        segment,
        node,
        target: 0,
        cap: 64,
    };
    let mut l: Ledger<()> = Ledger::new(vec![shape(0, 4), shape(1, 4), shape(1, 16)], None);
    for _ in 0..2 {
        l.add_ready(0, (), 4, (0, 0), None);
        l.add_ready(1, (), 4, (0, 0), None);
    }
    assert_eq!(l.choose_on(1, None, 8, 2, Some(&[0])).unwrap().pool, 0);
    assert_eq!(l.choose_on(1, None, 8, 2, Some(&[1])).unwrap().pool, 1);
    // Node 1's 16-unit pool has nothing ready: the exact fit is short, the
    // 4-unit pool on the same node serves.
    assert_eq!(
        l.choose_on(1, None, 16, 2, Some(&[1, 0]))
            .unwrap_err()
            .reason,
        Refusal::NotReady
    );
    l.add_ready(0, (), 4, (0, 0), None);
    l.add_ready(0, (), 4, (0, 0), None);
    let r = l.choose_on(1, None, 16, 2, Some(&[1])).unwrap_err();
    assert_eq!(r.reason, Refusal::NotReady);
    assert!(r.message.contains("on NUMA node 1"), "{}", r.message);
    let (pool, _) = r.short.unwrap();
    assert_eq!(
        l.shapes[pool].node, 1,
        "the node asked for grows, not another"
    );
    assert_eq!(
        l.choose_on(1, None, 16, 2, Some(&[1, 0])).unwrap().pool,
        0,
        "then node 0"
    );
    assert_eq!(
        l.choose_on(1, None, 16, 2, None).unwrap().pool,
        0,
        "any node"
    );
    let r = l.choose_on(1, None, 4, 2, Some(&[2])).unwrap_err();
    assert_eq!((r.reason, r.errno), (Refusal::BadRequest, libc::EINVAL));
    assert!(r.message.contains("nodes 0, 1"), "{}", r.message);
}

/// Found by the fuzz target ledger: a pool whose target was within a segment
/// of `usize::MAX` overflowed `target + segment` (in a release build, every
/// ready segment was its surplus).
#[test]
fn a_target_near_the_end_of_the_address_space_has_no_surplus() {
    let shape = |target| Shape {
        page: 1,
        node: 0,
        segment: 2,
        target,
        cap: usize::MAX,
    };
    let mut l: Ledger<()> = Ledger::new(vec![shape(usize::MAX - 1), shape(usize::MAX)], None);
    for pool in 0..2 {
        l.add_ready(pool, (), 2, (0, 0), None);
        assert_eq!(l.surplus(pool), Vec::<u64>::new(), "pool {pool}");
    }
}

#[test]
fn a_cgroup_gets_its_own_segments_first_and_the_shared_ones_are_lent_to_it() {
    let shape = Shape {
        page: 2,
        node: 0,
        segment: 4,
        target: 4,
        cap: 64,
    };
    let mut l: Ledger<()> = Ledger::new(vec![shape], None);
    let shared = l.add_ready(0, (), 4, (0, 0), None);
    let mine = l.add_ready(0, (), 4, (0, 0), Some(7));
    // A tenant of another cgroup never gets cgroup 7's segment.
    let g = l.choose_on(1, Some(8), 8, 2, None).unwrap_err();
    assert_eq!(g.reason, Refusal::NotReady);
    let g = l.choose_on(1, Some(8), 4, 2, None).unwrap();
    assert_eq!((g.ids.clone(), g.lent), (vec![shared], 4));
    // A tenant of cgroup 7 gets its own first, then the shared one, lent.
    let g = l.choose_on(1, Some(7), 8, 2, None).unwrap();
    assert_eq!((g.ids.clone(), g.lent), (vec![mine, shared], 4));
    l.lease(&g, 1, 1, Some(7));
    assert_eq!((l.placed(7, None), l.lent(7)), (4, 4));
    assert_eq!(l.cgroups(), vec![7]);
    // The scrub of what it held runs in its cgroup; fresh pages for the
    // shared segment are the daemon's, done for cgroup 7.
    l.disconnect(1);
    assert_eq!(l.clean_work(shared, Clean::InPlace).run_in, Some(7));
    let fresh = l.clean_work(shared, Clean::Fresh);
    assert_eq!((fresh.run_in, fresh.for_cg), (None, Some(7)));
    assert_eq!(l.clean_work(mine, Clean::Fresh).run_in, Some(7));
    let (seg, how) = l.start_clean(shared, false).unwrap();
    l.cleaned(shared, seg, how).unwrap();
    assert_eq!(l.lent(7), 0, "a ready segment is lent to nobody");
}

#[test]
fn a_prepared_part_grows_to_its_target_and_goes_when_withdrawn() {
    let shape = Shape {
        page: 2,
        node: 0,
        segment: 4,
        target: 0,
        cap: 12,
    };
    let mut l: Ledger<()> = Ledger::new(vec![shape], None);
    assert!(l.wants_growth_in(0, 3, 8));
    l.add_ready(0, (), 4, (0, 0), Some(3));
    l.add_ready(0, (), 4, (0, 0), Some(3));
    assert!(!l.wants_growth_in(0, 3, 8), "at its target");
    assert!(!l.wants_growth(0), "the shared pool's target is 0");
    assert!(
        l.surplus(0).is_empty(),
        "a prepared part is not the shared pool's surplus"
    );
    assert_eq!(l.surplus_in(0, 3, 4).len(), 1);
    assert_eq!(l.surplus_in(0, 3, 0).len(), 2);
    l.add_ready(0, (), 4, (0, 0), None);
    assert!(!l.wants_growth_in(0, 4, 8), "the pool's cap holds");
}
