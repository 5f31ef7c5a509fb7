//! `prezero serve` and its clients: a node-wide service that keeps hugetlb
//! memory populated and zero, hands it out as memfds over a unix socket, and
//! scrubs what comes back in the background (the scrubd of Linux's "Prezeroing
//! V2", for whole machines). A 64 GiB VM's memory then costs page-table set-up, not zeroing.
//!
//! * [`Client`] / [`ServiceMemory`]: ask for memory; it arrives mapped,
//!   populated and zero, or from a local fallback that says why.
//! * [`Server`]: the daemon (`prezero serve`), with the `daemon` feature (on
//!   by default). Without it the crate is the client and the protocol alone,
//!   as the C ABI links it.
//! * [`protocol`]: the wire format (`docs/PROTOCOL.md`).
//! * [`metrics`]: the counters in the Prometheus text format (`daemon`).
//!
//! Built on the `prezero` library (regions, NUMA placement, prefault) and
//! the OS layer `prezero-sys`, neither of which imports this crate.

#![warn(missing_docs)]

#[cfg(feature = "daemon")]
mod cgroup;
#[cfg(feature = "daemon")]
mod charged;
mod client;
#[cfg(feature = "daemon")]
mod config;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "daemon")]
mod ledger;
#[cfg(feature = "daemon")]
mod listen;
#[cfg(feature = "daemon")]
pub mod metrics;
pub mod protocol;
#[cfg(feature = "daemon")]
mod replace_file;
#[cfg(feature = "daemon")]
mod segment;
#[cfg(feature = "daemon")]
mod server;
#[cfg(feature = "daemon")]
mod tenant;
#[cfg(feature = "daemon")]
mod worker;

#[cfg(feature = "daemon")]
pub use cgroup::charging_hierarchies;
#[cfg(feature = "daemon")]
pub use charged::Verify;
#[cfg(feature = "fuzzing")]
pub(crate) use client::tile;
pub use client::{AllocOptions, Client, NodeChoice, SegmentView, ServiceMemory, Source};
pub use client::{InheritedFile, SegmentFiles};
#[cfg(feature = "daemon")]
pub use config::{
    parse_pool_flag, Amount, ConfigError, ConfigFile, ConfigPrepare, PlacedPool, PoolConfig,
    PoolNode, Prepare, Reuse, ServerConfig, MAX_METRICS_INTERVAL,
};
pub use error::{Error, Result};
#[cfg(feature = "fuzzing")]
pub(crate) use ledger::{ledger_text, parse_ledger, world as ledger_world, Shape};
pub use protocol::{CgroupStats, Histogram, PoolCounters, Refusal, ServiceStats, TenantStats};
#[cfg(feature = "daemon")]
pub use server::Server;

/// Where `prezero serve` listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/prezero/prezero.sock";

/// The seals of every memfd the service hands out, and of the client's local
/// fallback file: no holder can truncate it (a SIGBUS in whoever maps it),
/// grow it past what was cleared and counted, or add a seal (one that would
/// stop the daemon's punch).
const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// One line of `prezero serve`'s log, on stderr.
#[cfg(feature = "daemon")]
fn log(msg: &str) {
    eprintln!("prezero serve: {msg}");
}
