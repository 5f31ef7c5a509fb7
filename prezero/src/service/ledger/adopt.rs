//! Adoption: at start-up, taking over what a previous instance handed out and
//! some process still holds, found from the ledger file it left.

use std::path::Path;
use std::time::Instant;

use super::file::read_ledger;
use crate::service::log;
use crate::service::segment::{find_holders, Segment, ADOPT_BUDGET};
use crate::service::PoolConfig;

/// Takes over what a previous instance handed out and some process still
/// holds: `(segment, uid to charge)`. Segments of a page size no pool serves
/// now are left to their holders.
pub(crate) fn adopt(ledger: &Path, pools: &[PoolConfig]) -> Vec<(Segment, u32)> {
    let wanted = read_ledger(ledger);
    if wanted.is_empty() {
        return Vec::new();
    }
    // In a thread of its own, which passes on each file as it finds it, so
    // that a process whose descriptor blocks in stat or open (a FUSE file,
    // say) cannot hold the start-up past the budget, nor cost what was found.
    let deadline = Instant::now() + ADOPT_BUDGET;
    let (tx, rx) = std::sync::mpsc::channel();
    let looking = wanted.clone();
    let _ = std::thread::Builder::new()
        .name("prezero-serve-adopt".into())
        .spawn(move || find_holders(&looking, deadline, |key, f| drop(tx.send((key, f)))));
    let mut found = Vec::new();
    while let Ok(f) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        found.push(f);
    }
    if Instant::now() >= deadline {
        log(&format!(
            "looking for segments a previous instance handed out took over {} s: stopped; \
             what was not found is not charged",
            ADOPT_BUDGET.as_secs()
        ));
    }
    let mut adopted = Vec::new();
    for (key, f) in found {
        let page = wanted[&key];
        if !pools.iter().any(|p| p.page == page) {
            continue;
        }
        match Segment::adopt(f.file, page, f.uid) {
            Ok(seg) => adopted.push((seg, f.uid)),
            Err(e) => log(&format!(
                "a segment of the previous instance (held by uid {}) cannot be taken over: {e}",
                f.uid
            )),
        }
    }
    adopted
}
