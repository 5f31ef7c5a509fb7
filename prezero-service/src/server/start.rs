//! Start-up: the segments a previous instance handed out and some process
//! still holds, taken over; the pools filled toward their targets; the
//! ledger file written before any pool fills and after.

use std::path::Path;
use std::time::Instant;

use super::pool_name;
use crate::config::PlacedPool;
use crate::ledger::{adopt, write_ledger, Ledger, State};
use crate::log;
use crate::segment::{Home, Segment};
use crate::{Error, Result};
use prezero::fmt_size;
use prezero_sys as sys;

/// A ledger of `pools` with what a previous instance handed out and some
/// process still holds taken over (quarantined, charged to its holder),
/// written to `ledger_file` before any pool fills: a daemon that could not
/// list its segments would destroy what it made.
pub(super) fn taken_over(
    ledger_file: &Path,
    pools: &[PlacedPool],
    homes: &[Home],
    uid_cap: Option<usize>,
) -> Result<Ledger<Segment>> {
    let shapes = pools.iter().map(PlacedPool::shape).collect();
    let mut ledger = Ledger::new(shapes, uid_cap);
    for (mut seg, uid) in adopt(
        ledger_file,
        &pools.iter().map(|p| p.page).collect::<Vec<_>>(),
    ) {
        // Back to the pool of the node its pages are on: its cleaning with
        // fresh pages then takes them from that node's hugetlb pages.
        let Some(pool) = ledger.pool_for(seg.page_size(), seg.len(), seg.most_on()) else {
            continue;
        };
        // Cleaned with fresh pages before anyone has it: bound first, they
        // land on the pool's node.
        if let Err(e) = seg.place(homes[pool].clone()) {
            log(&format!(
                "a segment taken over cannot be placed ({e}); dropped"
            ));
            continue;
        }
        log(&format!(
            "segment of {} from a previous instance is still held by uid {uid}: \
             taken over in quarantine and charged to that uid",
            fmt_size(seg.len())
        ));
        let (len, file) = (seg.len(), (seg.dev, seg.ino));
        ledger.adopt(pool, seg, len, file, uid);
    }
    // The ledger written before any pool fills: a daemon that could not
    // list its segments would destroy what it made.
    write_ledger(ledger_file, &ledger).map_err(|e| {
        Error::invalid(format!(
            "cannot write the ledger {} ({e}): the daemon would not find its segments \
             after a restart (--ledger PATH puts it elsewhere)",
            ledger_file.display()
        ))
    })?;
    Ok(ledger)
}

/// Start-up: each pool filled toward its target (within its cap, less what
/// was taken over from a previous instance), each said in one line. Short of
/// hugetlb pages, memory or descriptors, a pool starts smaller and grows
/// while serving; which pools were short of hugetlb pages is returned (said
/// once for all, with what would end it: `shortage.rs`).
pub(super) fn fill(
    pools: &[PlacedPool],
    homes: &[Home],
    ledger: &mut Ledger<Segment>,
) -> Result<Vec<bool>> {
    let threads = sys::online_cpus();
    let mut short = vec![false; pools.len()];
    for (i, p) in pools.iter().enumerate() {
        let held: usize = ledger
            .entries()
            .filter(|(_, e)| e.pool == i)
            .map(|(_, e)| e.len)
            .sum();
        let want = p.target.min(p.cap.saturating_sub(held)) / p.segment_size;
        let t = Instant::now();
        let mut got = 0;
        let mut stopped = None;
        let threads = threads.min(homes[i].cpus.len().max(1));
        while got < want {
            let made = Segment::create(p.page, p.segment_size, homes[i].clone())
                .and_then(|seg| seg.repopulate(0, p.segment_size, threads).map(|()| seg))
                .and_then(|seg| seg.check_home().map(|()| seg));
            match made {
                Ok(seg) => {
                    let file = (seg.dev, seg.ino);
                    ledger.add_ready(i, seg, p.segment_size, file, None);
                    got += 1;
                }
                // The node's own pages ran out (the mapping is bound to it:
                // the fault fails rather than take another node's), or
                // memory or descriptors did: a smaller pool, which grows
                // toward its target while serving.
                Err(e)
                    if matches!(e, Error::Local(prezero::Error::HugetlbShortage { .. }))
                        || matches!(e.errno(), libc::ENOMEM | libc::EMFILE | libc::ENFILE) =>
                {
                    stopped = Some(e);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        let (name, s) = (pool_name(p), fmt_size(p.segment_size));
        let ready = fmt_size(got * p.segment_size);
        match stopped {
            None => log(&format!(
                "pool {name}: {got} segments of {s} ready ({ready}) in {:.2} s",
                t.elapsed().as_secs_f64()
            )),
            Some(Error::Local(prezero::Error::HugetlbShortage { .. })) => {
                short[i] = true;
                log(&format!(
                    "pool {name}: {got} of {want} segments of {s} ready ({ready} of {}): short \
                     of hugetlb pages on node {}",
                    fmt_size(p.target),
                    p.node
                ));
            }
            Some(e) => log(&format!(
                "pool {name}: {got} of {want} segments of {s} ready ({e}); it grows toward \
                 its target while serving"
            )),
        }
    }
    Ok(short)
}

/// Writes the ledger file after the start-up's fill; false if it cannot be.
/// A segment the file does not list, handed out, would not be found by a
/// restart: without the file (it could be written before the fill, and fails
/// now: a disk full meanwhile), the segments made go, and the pools grow
/// once it can be written.
pub(super) fn record_filled(ledger_file: &Path, ledger: &mut Ledger<Segment>) -> bool {
    match write_ledger(ledger_file, ledger) {
        Ok(()) => true,
        Err(e) => {
            let made: Vec<u64> = ledger
                .entries()
                .filter(|(_, e)| matches!(e.state, State::Ready { .. }))
                .map(|(id, _)| id)
                .collect();
            for id in made {
                drop(ledger.remove(id));
            }
            log(&format!(
                "cannot write the ledger {} ({e}): the segments made are destroyed, \
                 never handed out; the pools grow once it can be written",
                ledger_file.display()
            ));
            false
        }
    }
}
