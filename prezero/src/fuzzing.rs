//! What the fuzz targets (`fuzz/`) reach that is not the library's API:
//! compiled only with the `fuzzing` feature, which nothing else turns on.

use std::collections::HashMap;

use crate::cpu::mask::{self, Arch};
use crate::cpu::Features;
use crate::json::Json;
use crate::profile::ProfileFile;
use crate::service::ledger_world::World;
use crate::service::Shape;

pub use crate::service::ledger_world::Event as LedgerEvent;

/// `text` applied to `detected` as [`cpu()`](crate::cpu()) applies
/// `PREZERO_CPU`, with the names of x86_64 or (`aarch64`) of aarch64;
/// `cpu_has` answers for the instructions a level requires that [`Features`]
/// does not carry.
pub fn cpu_mask(
    text: &str,
    detected: Features,
    aarch64: bool,
    cpu_has: impl Fn(&str) -> bool,
) -> Result<Features, String> {
    let arch = if aarch64 { Arch::Aarch64 } else { Arch::X86_64 };
    mask::apply(text, detected, arch, cpu_has)
}

/// Where each segment of an `ALLOC` answer of these lengths goes in a request
/// of `len` bytes on `page`-byte pages, as the client checks it before it maps
/// anything: `(offset, bytes mapped)`, or why the answer is not believed.
pub fn alloc_tile(lens: &[u64], len: usize, page: usize) -> Result<Vec<(usize, usize)>, String> {
    crate::service::tile(lens, len, page).map_err(|e| e.to_string())
}

/// A profile file's bytes, checked and read as [`ProfileFile::read`] reads a
/// file's (text that is not UTF-8 is an error).
pub fn profile(bytes: &[u8]) -> Result<ProfileFile, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("cannot read it: {e}"))?;
    ProfileFile::parse(text).map_err(|e| e.to_string())
}

/// `text` read by the profile's JSON reader and written as the profile is
/// (members sorted by key), then that read and written again: both texts,
/// or why `text` is not JSON.
pub fn json_twice(text: &str) -> Result<(String, String), String> {
    let written = Json::parse(text).map_err(|e| e.to_string())?.to_pretty();
    let again = match Json::parse(&written) {
        Ok(v) => v.to_pretty(),
        Err(e) => format!("not JSON when written: {e}"),
    };
    Ok((written, again))
}

/// A ledger file's text as a restarted daemon reads it in the boot `now`:
/// each segment's file with its page size, or why the file is ignored.
pub fn ledger_file(text: &str, now: Option<&str>) -> Result<HashMap<(u64, u64), usize>, String> {
    let files = crate::service::parse_ledger(text, now)?;
    Ok(files.into_iter().map(|(f, k)| (f, k.page_size())).collect())
}

/// The ledger file's text the daemon writes in the boot `boot` for these
/// segment files (`(dev, ino, page size)`).
pub fn ledger_file_text(boot: Option<&str>, files: &[(u64, u64, usize)]) -> String {
    crate::service::ledger_text(boot, files.iter().copied())
}

/// The daemon's segment ledger in a world that checks each transition as the
/// server applies it (`service/ledger/world.rs`, also the exhaustive test's).
pub struct LedgerWorld(World);

/// One pool of a [`LedgerWorld`], in pages of 1 byte: what a
/// [`ServerConfig`](crate::service::ServerConfig) that validates allows.
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
