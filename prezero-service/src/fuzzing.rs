//! What the fuzz targets (`fuzz/`) reach that is not the service's API:
//! compiled only with the `fuzzing` feature, which nothing else turns on.

use std::collections::HashMap;

use crate::ledger_world::World;
use crate::Shape;

pub use crate::ledger_world::Event as LedgerEvent;

/// Where each segment of an `ALLOC` answer of these lengths goes in a request
/// of `len` bytes on `page`-byte pages, as the client checks it before it maps
/// anything: `(offset, bytes mapped)`, or why the answer is not believed.
pub fn alloc_tile(lens: &[u64], len: usize, page: usize) -> Result<Vec<(usize, usize)>, String> {
    crate::tile(lens, len, page).map_err(|e| e.to_string())
}

/// A ledger file's text as a restarted daemon reads it in the boot `now`:
/// each segment's file with its page size, or why the file is ignored.
pub fn ledger_file(text: &str, now: Option<&str>) -> Result<HashMap<(u64, u64), usize>, String> {
    let files = crate::parse_ledger(text, now)?;
    Ok(files.into_iter().map(|(f, k)| (f, k.page_size())).collect())
}

/// The ledger file's text the daemon writes in the boot `boot` for these
/// segment files (`(dev, ino, page size)`).
pub fn ledger_file_text(boot: Option<&str>, files: &[(u64, u64, usize)]) -> String {
    crate::ledger_text(boot, files.iter().copied())
}

/// The daemon's segment ledger in a world that checks each transition as the
/// server applies it (`service/ledger/world.rs`, also the exhaustive test's).
pub struct LedgerWorld(World);

/// One pool of a [`LedgerWorld`], in pages of 1 byte: what a
/// [`ServerConfig`](crate::ServerConfig) that validates allows.
#[derive(Debug, Clone, Copy)]
pub struct LedgerPool {
    /// Bytes per segment, at least 1.
    pub segment: usize,
    /// Bytes to keep ready, at most `cap`.
    pub target: usize,
    /// Most bytes in all states, at least `segment`.
    pub cap: usize,
    /// Its NUMA node.
    pub node: u32,
}

impl LedgerWorld {
    /// A ledger of these pools (at least one: events name them), each uid's
    /// holdings capped at `uid_cap`, at most `most` segments at once.
    pub fn new(pools: &[LedgerPool], uid_cap: Option<usize>, most: usize) -> LedgerWorld {
        let shapes = pools
            .iter()
            .map(|p| Shape {
                page: 1,
                segment: p.segment,
                node: p.node,
                target: p.target,
                cap: p.cap,
            })
            .collect();
        LedgerWorld(World::new(shapes, uid_cap, most))
    }

    /// Applies `e` as the server would, checking what the server relies on;
    /// false if it does not apply now. Pools are named by their index.
    pub fn apply(&mut self, e: LedgerEvent) -> bool {
        self.0.apply(e)
    }

    /// Whether the ledger's invariant holds (`Ledger::check`).
    pub fn check(&self) -> bool {
        self.0.ledger.check()
    }
}
