//! The service's ledger. The model (`service/ledger/model.rs`) driven by an
//! arbitrary sequence of the transitions the event loop and the worker make,
//! in the world its exhaustive test uses (`service/ledger/world.rs`: every
//! hand-out zero and no uid's bytes reaching another uid, no uid past its
//! cap, refused releases changing nothing), over pools of any shape a config
//! that validates allows; its invariant (`Ledger::check`) holds after each
//! transition. And the ledger file's reader (`service/ledger/file.rs`): any
//! bytes are a list of segment files or the reason the file is ignored, never
//! a panic, and a list read, written again, reads the same.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use prezero_service::fuzzing::{
    ledger_file, ledger_file_text, LedgerEvent, LedgerPool, LedgerWorld,
};

#[derive(Arbitrary, Debug)]
struct Pool {
    segment: usize,
    target: usize,
    cap: usize,
    node: u8,
}

#[derive(Arbitrary, Debug)]
enum Bytes {
    Small(u8),
    Any(u64),
}

/// [`LedgerEvent`]s, pools and connections by small numbers.
#[derive(Arbitrary, Debug)]
enum Event {
    Create(u8),
    CreateIn(u8, u8),
    Adopt(u8, u8),
    AdoptOdd(u8, u8),
    Alloc(u8, Bytes, Option<u8>),
    Release(u8, u8),
    ReleaseTwo(u8, u8, u8),
    Disconnect(u8),
    StartClean(u8, bool),
    MakeFresh(u8, u8),
    Finish(u8, bool),
    FinishOtherwise(u8),
    Trim(u8),
}

#[derive(Arbitrary, Debug)]
struct Input {
    pools: Vec<Pool>,
    uid_cap: Option<usize>,
    most: u8,
    events: Vec<Event>,
    file: Vec<u8>,
    boot: Option<String>,
}

/// Pools as a config that validates has them: segments of at least a page,
/// a cap of at least a segment, a target within the cap. Segments are
/// memory, so all of them together fit in the address space: each is at
/// most a 64th of it (at most 32 exist at once, each at most a byte longer
/// than its pool's).
fn pools(given: &[Pool]) -> Vec<LedgerPool> {
    let mut pools: Vec<LedgerPool> = given
        .iter()
        .take(4)
        .map(|p| {
            let segment = p.segment.clamp(1, usize::MAX / 64);
            let cap = p.cap.max(segment);
            LedgerPool {
                segment,
                target: p.target.min(cap),
                cap,
                node: u32::from(p.node % 3),
            }
        })
        .collect();
    if pools.is_empty() {
        pools.push(LedgerPool {
            segment: 1,
            target: 1,
            cap: 3,
            node: 0,
        });
    }
    pools
}

fn event(e: &Event, pools: usize) -> LedgerEvent {
    let pool = |p: &u8| usize::from(*p) % pools;
    let uid = |u: &u8| 10 + u32::from(*u % 3) * 10;
    let (conn, id) = (|c: &u8| u64::from(*c % 4), |i: &u8| u64::from(*i));
    match e {
        Event::Create(p) => LedgerEvent::Create(pool(p)),
        Event::CreateIn(p, cg) => LedgerEvent::CreateIn(pool(p), u64::from(cg % 3)),
        Event::Adopt(p, u) => LedgerEvent::Adopt(pool(p), uid(u)),
        Event::AdoptOdd(p, u) => LedgerEvent::AdoptOdd(pool(p), uid(u)),
        Event::Alloc(c, b, node) => {
            let bytes = match b {
                Bytes::Small(n) => u64::from(*n),
                Bytes::Any(n) => *n,
            };
            LedgerEvent::Alloc(conn(c), bytes, node.map(|n| u32::from(n % 3)))
        }
        Event::Release(c, i) => LedgerEvent::Release(conn(c), id(i)),
        Event::ReleaseTwo(c, a, b) => LedgerEvent::ReleaseTwo(conn(c), id(a), id(b)),
        Event::Disconnect(c) => LedgerEvent::Disconnect(conn(c)),
        Event::StartClean(i, fresh) => LedgerEvent::StartClean(id(i), *fresh),
        Event::MakeFresh(p, u) => LedgerEvent::MakeFresh(pool(p), uid(u)),
        Event::Finish(i, ok) => LedgerEvent::Finish(id(i), *ok),
        Event::FinishOtherwise(i) => LedgerEvent::FinishOtherwise(id(i)),
        Event::Trim(p) => LedgerEvent::Trim(pool(p)),
    }
}

fuzz_target!(|input: Input| {
    let pools = pools(&input.pools);
    let most = usize::from(input.most % 32) + 1;
    let mut world = LedgerWorld::new(&pools, input.uid_cap, most);
    for e in &input.events {
        let e = event(e, pools.len());
        world.apply(e);
        assert!(world.check(), "invariant broken after {e:?}");
    }

    // A boot id is one word, as the kernel's is.
    let now = input
        .boot
        .filter(|b| !b.is_empty() && b.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    let Ok(text) = std::str::from_utf8(&input.file) else {
        return;
    };
    let Ok(files) = ledger_file(text, now.as_deref()) else {
        return;
    };
    let list: Vec<(u64, u64, usize)> = files.iter().map(|(&(d, i), &p)| (d, i, p)).collect();
    let written = ledger_file_text(now.as_deref(), &list);
    assert_eq!(
        ledger_file(&written, now.as_deref()),
        Ok(files),
        "written as {written:?}"
    );
});
