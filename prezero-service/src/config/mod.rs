//! What `prezero serve` is told ([`ServerConfig`], its pools and its reuse
//! rule), and the checks it must pass before anything touches the system;
//! the pools as they run, each placed on a node with its amounts in bytes
//! ([`PlacedPool`]). A pool's target and cap are an [`Amount`] (`amount.rs`):
//! bytes, or a share of its node's memory.

mod amount;
mod file;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use super::charged::Verify;
use super::ledger::Shape;
use super::protocol::MAX_POOLS;
use super::replace_file::tmp_beside;
use super::DEFAULT_SOCKET;
use crate::{Error, Result};
pub use amount::Amount;
pub use file::{parse_pool_flag, ConfigError, ConfigFile, ConfigPrepare};
use prezero::numa::{Node, Topology};
use prezero::pool::ScrubPriority;
use prezero::region::PageKind;

/// Where a pool's pages are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PoolNode {
    /// One such pool on every NUMA node with memory (the default; on a
    /// machine of one node, one pool).
    #[default]
    All,
    /// On this node only.
    Node(u32),
}

/// One pool of the daemon as configured: segments of one page size and one
/// length (a page size may have several pools, one per shape of VM, say),
/// on one NUMA node or one per node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// `Huge2M` or `Huge1G`.
    pub page: PageKind,
    /// Bytes per segment (a multiple of the page size): the unit handed out.
    pub segment_size: usize,
    /// Zeroed memory to keep ready; more is created in the background, and
    /// ready memory beyond it goes back to the hugetlb pool. A share of the
    /// node's memory is rounded down to whole segments, and held within the
    /// cap.
    pub target: Amount,
    /// Most memory of this pool in all states together. A share of the
    /// node's memory is rounded down to whole segments, one at least.
    pub cap: Amount,
    /// The node its pages are on; with [`PoolNode::All`], target and cap are
    /// each node's.
    pub node: PoolNode,
}

/// A pool as the daemon runs it: on one node, its target and cap in bytes
/// ([`ServerConfig::placed_pools`] makes them, after every check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacedPool {
    /// `Huge2M` or `Huge1G`.
    pub page: PageKind,
    /// Bytes per segment, a multiple of the page size.
    pub segment_size: usize,
    /// Zeroed bytes to keep ready, at most `cap`.
    pub target: usize,
    /// Most bytes in all states, at least one segment.
    pub cap: usize,
    /// The NUMA node its pages are on.
    pub node: u32,
}

/// Everything `prezero serve` is told.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where the socket is created (default `/run/prezero/prezero.sock`).
    pub socket: PathBuf,
    /// The pools: any number per page size (at most [`MAX_POOLS`] in all), no
    /// two of the same page and segment size.
    pub pools: Vec<PoolConfig>,
    /// Uids that may connect, besides root and the daemon's own uid.
    pub allow_uids: Vec<u32>,
    /// Groups whose members (primary or supplementary) may connect.
    pub allow_gids: Vec<u32>,
    /// Most bytes one uid may hold plus have in quarantine (`None`: no cap).
    pub uid_cap: Option<usize>,
    /// How scrubbed segments are checked.
    pub verify: Verify,
    /// Scrub in place for the same uid, or fresh pages always.
    pub reuse: Reuse,
    /// The worker's scheduling.
    pub scrub_priority: ScrubPriority,
    /// How often quarantined segments are checked for other holders.
    pub recheck: Duration,
    /// Most connections one uid may have open at once.
    pub max_conns_per_uid: usize,
    /// Where the daemon records its segments, for the next instance (default:
    /// the socket path with `.ledger` appended).
    pub ledger: Option<PathBuf>,
    /// Where to keep the counters in the Prometheus text format (for
    /// node_exporter's textfile collector), rewritten atomically every
    /// `metrics_interval`.
    pub metrics_textfile: Option<PathBuf>,
    /// How often the metrics file is rewritten.
    pub metrics_interval: Duration,
    /// Memory prepared for tenant cgroups named here, as a launcher's
    /// `PREPARE` would ask: faulted in from inside each cgroup (charged to
    /// it) and handed to its tenants only.
    pub prepare: Vec<Prepare>,
}

/// Memory prepared for a tenant cgroup (`prezero serve --prepare`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepare {
    /// The cgroup's path in the daemon's hierarchy ("/machine.slice/vm1.scope").
    pub cgroup: PathBuf,
    /// Bytes to keep there.
    pub bytes: usize,
    /// Pages of this kind (2MB or 1GB).
    pub page: prezero::region::PageKind,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            socket: PathBuf::from(DEFAULT_SOCKET),
            pools: Vec::new(),
            allow_uids: Vec::new(),
            allow_gids: Vec::new(),
            uid_cap: None,
            verify: Verify::Full,
            reuse: Reuse::SameUid,
            scrub_priority: ScrubPriority::Idle,
            recheck: Duration::from_millis(20),
            max_conns_per_uid: 64,
            ledger: None,
            metrics_textfile: None,
            metrics_interval: Duration::from_secs(5),
            prepare: Vec::new(),
        }
    }
}

impl ServerConfig {
    /// Checks the configuration without touching the system ([`Server::start`]
    /// does it too): callers that reserve hugetlb pages for it check first.
    ///
    /// [`Server::start`]: super::Server::start
    pub fn validate(&self) -> Result<()> {
        self.placed_pools(&Topology::read()).map(|_| ())
    }

    /// The pools as the daemon runs them, each on one node of `topology`
    /// ([`PoolNode::All`] made one per node with memory), their shares of a
    /// node's memory made bytes, after every check of
    /// [`ServerConfig::validate`]. A node that does not exist, is offline or
    /// has no memory is an error here, never a pool placed elsewhere.
    pub fn placed_pools(&self, topology: &Topology) -> Result<Vec<PlacedPool>> {
        if self.pools.is_empty() {
            return Err(Error::invalid("no pools configured"));
        }
        let mut placed = Vec::new();
        for p in &self.pools {
            match p.node {
                PoolNode::All => placed.extend(
                    topology
                        .memory_nodes()
                        .into_iter()
                        .filter_map(|n| topology.node(n))
                        .map(|n| p.placed_on(n)),
                ),
                PoolNode::Node(n) => match topology.memory_node(n) {
                    Ok(node) => placed.push(p.placed_on(node)),
                    Err(e) => {
                        let why = match e {
                            prezero::Error::InvalidArgument(m) => m,
                            e => e.to_string(),
                        };
                        return Err(Error::invalid(format!("pool {}: {why}", p.page.name())));
                    }
                },
            }
        }
        if placed.len() > MAX_POOLS {
            return Err(Error::invalid(format!(
                "{} pools configured (node=all makes one per NUMA node); at most {MAX_POOLS}",
                placed.len()
            )));
        }
        let mut seen = HashSet::new();
        for p in &placed {
            let name = p.page.name();
            if !p.page.is_hugetlb() {
                return Err(Error::invalid(format!(
                    "pool {name}: the service serves hugetlb pages (2MB or 1GB)"
                )));
            }
            if !seen.insert((p.page, p.segment_size, p.node)) {
                return Err(Error::invalid(format!(
                    "two pools of page size {name} and segments of {} bytes on one node",
                    p.segment_size
                )));
            }
            let page = p.page.page_size();
            if p.segment_size == 0 || !p.segment_size.is_multiple_of(page) {
                return Err(Error::invalid(format!(
                    "pool {name}: segment size {} is not a positive multiple of the page size",
                    p.segment_size
                )));
            }
            if p.cap < p.segment_size || p.target > p.cap {
                return Err(Error::invalid(format!(
                    "pool {name} with segments of {} bytes on node {}: need segment <= cap and \
                     target <= cap (target {} bytes, cap {} bytes)",
                    p.segment_size, p.node, p.target, p.cap
                )));
            }
        }
        if self.max_conns_per_uid == 0 {
            return Err(Error::invalid("max_conns_per_uid must be at least 1"));
        }
        if let Verify::Sampled { one_in: 0 } = self.verify {
            return Err(Error::invalid("sampled verification needs one_in >= 1"));
        }
        if self.metrics_interval.is_zero() || self.metrics_interval > MAX_METRICS_INTERVAL {
            return Err(Error::invalid(format!(
                "metrics_interval must be positive and at most {} s",
                MAX_METRICS_INTERVAL.as_secs()
            )));
        }
        if let Some(m) = &self.metrics_textfile {
            let ledger = self.ledger_path();
            let taken = [&self.socket, &ledger]
                .iter()
                .flat_map(|p| [p.to_path_buf(), tmp_beside(p)])
                .any(|p| p == *m || tmp_beside(m) == p);
            if taken {
                return Err(Error::invalid(format!(
                    "the metrics file {} would take the place of the socket or the ledger",
                    m.display()
                )));
            }
        }
        Ok(placed)
    }

    pub(super) fn ledger_path(&self) -> PathBuf {
        self.ledger.clone().unwrap_or_else(|| {
            let mut p = self.socket.clone().into_os_string();
            p.push(".ledger");
            PathBuf::from(p)
        })
    }
}

impl PoolConfig {
    /// This pool on `node`: a share of the node's memory made whole
    /// segments, a cap one segment at least and a target within it; bytes
    /// as given (the checks of [`ServerConfig::placed_pools`] follow).
    fn placed_on(&self, node: &Node) -> PlacedPool {
        let segment = self.segment_size;
        let mut cap = self.cap.on_node(node.mem_total, segment);
        if self.cap.is_share() {
            cap = cap.max(segment);
        }
        let mut target = self.target.on_node(node.mem_total, segment);
        if self.target.is_share() {
            target = target.min(cap);
        }
        PlacedPool {
            page: self.page,
            segment_size: segment,
            target,
            cap,
            node: node.id,
        }
    }
}

impl PlacedPool {
    /// Its shape, as the ledger knows it.
    pub(super) fn shape(&self) -> Shape {
        Shape {
            page: self.page.page_size(),
            segment: self.segment_size,
            node: self.node,
            target: self.target,
            cap: self.cap,
        }
    }
}

/// Which memory a released segment may come back as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// Scrubbed in place (streaming stores) for the uid that held it; fresh
    /// pages when another uid needs it. A pin the uid kept past the release
    /// can reach only that uid's later hand-outs.
    SameUid,
    /// Fresh pages after every release.
    Fresh,
}

/// The longest metrics interval accepted: an hour.
pub const MAX_METRICS_INTERVAL: Duration = Duration::from_secs(3600);
