//! `prezero serve`: one event loop owns every segment and connection; a worker
//! thread scrubs and creates segments. See `docs/PROTOCOL.md` for the wire side.
//!
//! The segments' states, who is charged, which pool serves a request, and
//! every transition are in [`super::ledger`] (pure data, explored
//! exhaustively in its tests); this loop moves messages and descriptors and
//! calls those transitions. Beyond them:
//!
//! * Only the event loop changes states; the worker owns a segment's memory
//!   only while it is `Scrubbing`, and hands it back by message.
//! * A segment that fails verification, or whose pages cannot be had, is
//!   destroyed, never handed out.
//! * Every segment is in the ledger file, so that a restarted daemon finds the
//!   ones still held (start-up only: [`adopt`]), takes them over as
//!   `Quarantined`, and charges their holders' uids. A segment the file cannot
//!   be made to list (a full disk) is destroyed, never handed out.
//!
//! Here the [`Server`], its start-up and its loop; accepting connections in
//! `accept.rs`, answering requests in `handle.rs`, the pools' upkeep (the
//! quarantine, the worker's jobs and results, growth and trimming) in
//! `pools.rs`, the counters and what `STATS` shows of them in `stats.rs`, a
//! shortage of hugetlb pages said once with what would end it in
//! `shortage.rs`, what a start takes over and fills first in `start.rs`.

mod accept;
mod cgroups;
mod charge;
mod handle;
mod pools;
mod prepare;
mod shortage;
mod start;
mod stats;

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::{PlacedPool, Prepare, ServerConfig};
use super::ledger::Ledger;
use super::listen::{bind, prepare_dir, refuse_if_served, restrict_socket};
use super::log;
use super::metrics::MetricsFile;
use super::protocol;
use super::segment::{check_leases_work, Home, Segment};
use super::worker::{Done, Worker};
use crate::{Error, Result};
use cgroups::Cgroups;
use prezero::fmt_size;
use prezero::numa::Topology;
use prezero::region::PageKind;
use prezero_sys::{self as sys, UnixAddr};
use start::{fill, record_filled, taken_over};
use stats::Counters;

struct Conn {
    sock: OwnedFd,
    pidfd: Option<OwnedFd>,
    pid: i32,
    /// The tenant it counts as (see [`tenant_uid`](super::tenant::tenant_uid)).
    uid: u32,
    /// Its own uid: segments leased on it are lent to this uid, whose
    /// programs open them by name.
    peer_uid: u32,
    /// The cgroup it is a tenant of (its key in [`Cgroups`]; `None` where no
    /// hierarchy charges), read when it connected; or why it could not be.
    cg: std::result::Result<Option<u64>, String>,
}

struct PoolRun {
    cfg: PlacedPool,
    /// Its node and the CPUs that fill it.
    home: Home,
    creating: bool,
    /// After a failed creation (hugetlb shortage), no retry before this.
    retry_at: Option<Instant>,
    /// Its last segment could not be made for want of hugetlb pages on its
    /// node (cleared once one is made, or the pool wants none).
    hugetlb_short: bool,
    handouts: u64,
}

/// The daemon. [`Server::start`] creates the pools and the socket; [`Server::run`]
/// serves until SIGINT, SIGTERM or SIGHUP.
pub struct Server {
    cfg: ServerConfig,
    listener: OwnedFd,
    pools: Vec<PoolRun>,
    ledger: Ledger<Segment>,
    conns: HashMap<u64, Conn>,
    next_conn: u64,
    counters: Counters,
    worker: Worker,
    done: Receiver<Done>,
    wake: Arc<OwnedFd>,
    signals: OwnedFd,
    last_check: Instant,
    /// Set while accept(2) fails for want of descriptors.
    accept_paused_until: Option<Instant>,
    /// The daemon's effective uid (always allowed to connect).
    my_uid: u32,
    /// Per uid: when a line it caused was last logged, and lines not logged since.
    log_last: HashMap<u32, (Instant, u64)>,
    ledger_file: PathBuf,
    /// The worker could not be raised once already (logged then).
    told_no_escalation: bool,
    /// Segments could not be lent to a tenant's uid once already (logged then).
    told_no_chown: bool,
    /// The hugetlb shortage of the pools now was said (once per shortage).
    told_shortage: bool,
    /// The ledger file could not be written the last time (logged then).
    ledger_unwritten: bool,
    /// The metrics file's writer, and when it is next due.
    metrics: Option<(MetricsFile, Instant)>,
    /// Per node with pools: the other nodes with pools, nearest first (what a
    /// request that allows other nodes falls back to).
    nearest: HashMap<u32, Vec<u32>>,
    /// The tenant cgroups known, and what was done for each.
    cgroups: Cgroups,
    /// Configured preparations whose cgroups could not be opened yet.
    pending_prepare: Vec<Prepare>,
    /// When the cgroups were last looked at (see `prepare.rs`).
    last_cgroup_look: Instant,
}

/// A placed pool's name in the log: page, segment and node.
/// A pool of hugetlb pages needs a kernel that has pages of its size: said
/// before any pool fills, not as the first segment of that pool fails.
fn check_page_size(page: PageKind) -> Result<()> {
    if !matches!(page, PageKind::Huge2M | PageKind::Huge1G) {
        return Ok(());
    }
    let nr = prezero::mm::HugetlbPool::nr_path(page.page_size());
    if std::path::Path::new(&nr).exists() {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "a pool of {} pages: this kernel has no hugetlb pages of that size (no {nr})",
        page.name()
    )))
}

fn pool_name(p: &PlacedPool) -> String {
    format!(
        "{}/{} on node {}",
        p.page.name(),
        fmt_size(p.segment_size),
        p.node
    )
}

impl Server {
    /// Checks the configuration, blocks SIGINT/SIGTERM/SIGHUP in the calling
    /// thread (they arrive through a signalfd and stop [`Server::run`]), creates
    /// and populates each pool's initial segments, and only then creates the
    /// socket, so a client that can connect finds memory ready. A hugetlb
    /// shortage is logged and leaves a smaller pool.
    pub fn start(cfg: ServerConfig) -> Result<Server> {
        let topology = Topology::read();
        let pools = cfg.placed_pools(&topology)?;
        let homes: Vec<Home> = pools.iter().map(|p| Home::of(&topology, p.node)).collect();
        // Fail before populating gigabytes, not after: the socket, its
        // directory, the pools' page sizes (below: the ledger).
        UnixAddr::new(&cfg.socket).map_err(|e| Error::invalid(e.to_string()))?;
        refuse_if_served(&cfg.socket)?;
        prepare_dir(&cfg.socket)?;
        for p in &pools {
            check_page_size(p.page)?;
        }
        let metrics = match &cfg.metrics_textfile {
            Some(path) => Some((MetricsFile::start(path)?, Instant::now())),
            None => None,
        };
        check_leases_work()?;
        // One descriptor per segment and two per connection: take the hard limit.
        let _ = sys::raise_nofile_limit();
        // Blocked here, before any thread starts, so every thread inherits it.
        let signals = sys::signals_to_fd(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP])
            .map_err(|e| Error::os("signalfd", e))?;
        // A lease break (someone opening a segment during the lease probe) would
        // send SIGIO, whose default action ends the process.
        let _ = sys::ignore_signal(libc::SIGIO);
        // Other uids cannot reach our descriptors through /proc/PID/fd.
        let _ = sys::set_dumpable(false);
        let wake = Arc::new(sys::eventfd().map_err(|e| Error::os("eventfd", e))?);
        let (tx, done) = std::sync::mpsc::channel();
        let worker = Worker::spawn(cfg.scrub_priority, cfg.verify, tx, wake.clone())
            .map_err(|e| Error::os("spawn scrubber thread", e))?;

        let ledger_file = cfg.ledger_path();
        let mut ledger = taken_over(&ledger_file, &pools, &homes, cfg.uid_cap)?;
        let short = fill(&pools, &homes, &mut ledger)?;
        let ledger_unwritten = !record_filled(&ledger_file, &mut ledger);
        let retry_at = ledger_unwritten.then(|| Instant::now() + Duration::from_secs(5));
        let nearest = nearest_nodes(&topology, &pools);
        let listener = bind(&cfg.socket)?;
        restrict_socket(&cfg.socket, &cfg.allow_uids, &cfg.allow_gids);
        log(&format!(
            "listening on {} (protocol {})",
            cfg.socket.display(),
            protocol::VERSION
        ));
        let pending_prepare = cfg.prepare.clone();
        let mut server = Server {
            pools: pools
                .iter()
                .zip(homes)
                .zip(short)
                .map(|((&cfg, home), hugetlb_short)| PoolRun {
                    cfg,
                    home,
                    creating: false,
                    retry_at,
                    hugetlb_short,
                    handouts: 0,
                })
                .collect(),
            cfg,
            listener,
            ledger,
            conns: HashMap::new(),
            next_conn: 1,
            counters: Counters::new(),
            worker,
            done,
            wake,
            signals,
            last_check: Instant::now(),
            accept_paused_until: None,
            my_uid: sys::geteuid(),
            log_last: HashMap::new(),
            ledger_file,
            told_no_escalation: false,
            told_no_chown: false,
            told_shortage: false,
            ledger_unwritten,
            pending_prepare,
            metrics,
            nearest,
            cgroups: Cgroups::new(),
            last_cgroup_look: Instant::now() - prepare::LOOK_EVERY,
        };
        server.say_shortage();
        Ok(server)
    }

    /// Serves until SIGINT, SIGTERM or SIGHUP, then shuts down: connections close, the
    /// worker stops, the socket is removed. Segments clients hold stay valid for
    /// them (their own open file and mappings keep the pages).
    pub fn run(mut self) -> Result<()> {
        loop {
            self.maintain();
            self.write_metrics_if_due();
            let paused = self.accept_paused_until.filter(|&t| Instant::now() < t);
            let mut fds = vec![
                sys::pollfd_in(self.signals.as_raw_fd()),
                // A negative fd is skipped by poll: no accepting while out of descriptors.
                sys::pollfd_in(paused.map_or(self.listener.as_raw_fd(), |_| -1)),
                sys::pollfd_in(self.wake.as_raw_fd()),
            ];
            let mut owners = Vec::with_capacity(self.conns.len() * 2);
            for (&id, c) in &self.conns {
                fds.push(sys::pollfd_in(c.sock.as_raw_fd()));
                owners.push(id);
                if let Some(p) = &c.pidfd {
                    fds.push(sys::pollfd_in(p.as_raw_fd()));
                    owners.push(id);
                }
            }
            let timeout = if self.ledger.any_quarantined() || paused.is_some() {
                self.cfg.recheck.as_millis().max(1) as libc::c_int
            } else {
                // A pool that could not grow retries when its time comes, and
                // the metrics file is rewritten when due, whether or not a
                // client asks anything meanwhile.
                self.pools
                    .iter()
                    .filter_map(|p| p.retry_at)
                    .chain(self.metrics.as_ref().map(|m| m.1))
                    .min()
                    .map_or(-1, |t| {
                        t.saturating_duration_since(Instant::now())
                            .as_millis()
                            .clamp(1, i32::MAX as u128) as libc::c_int
                    })
            };
            match sys::poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::os("poll", e)),
            }
            if fds[0].revents != 0 {
                break;
            }
            if fds[2].revents != 0 {
                self.collect_done();
            }
            if fds[1].revents != 0 {
                self.accept_all();
            }
            for (pfd, &id) in fds[3..].iter().zip(&owners) {
                if pfd.revents == 0 || !self.conns.contains_key(&id) {
                    continue;
                }
                let c = &self.conns[&id];
                let is_pidfd = c.pidfd.as_ref().is_some_and(|p| p.as_raw_fd() == pfd.fd);
                if is_pidfd {
                    // The client process exited: whatever it held is released,
                    // even if a child inherited the socket.
                    self.disconnect(id);
                } else if pfd.revents & libc::POLLIN != 0 {
                    self.serve_conn(id);
                } else {
                    self.disconnect(id);
                }
            }
            if self.ledger.any_quarantined() && self.last_check.elapsed() >= self.cfg.recheck {
                self.check_quarantine();
            }
        }
        self.shutdown();
        Ok(())
    }

    fn shutdown(&mut self) {
        log(&format!(
            "stopping: {} connections, {} segments still with clients (they stay valid)",
            self.conns.len(),
            self.ledger.leased()
        ));
        self.conns.clear();
        self.worker.shutdown();
        self.ledger.clear();
        let _ = std::fs::remove_file(&self.cfg.socket);
        // The last counters, with nothing held by the daemon any more.
        let last = super::metrics::prometheus(&self.stats(0, None, true));
        if let Some((m, _)) = self.metrics.take() {
            m.write(last);
            m.stop();
        }
    }
}

/// For each online node (one without a pool too: a request may name it and
/// allow others), the other nodes with pools by distance (the kernel's
/// table), nearest first, ties by id.
fn nearest_nodes(topology: &Topology, pools: &[PlacedPool]) -> HashMap<u32, Vec<u32>> {
    let mut with_pools: Vec<u32> = pools.iter().map(|p| p.node).collect();
    with_pools.sort_unstable();
    with_pools.dedup();
    topology
        .nodes
        .iter()
        .map(|n| n.id)
        .map(|from| {
            let mut others: Vec<u32> = with_pools.iter().copied().filter(|&n| n != from).collect();
            others.sort_by_key(|&to| (topology.distance(from, to).unwrap_or(u32::MAX), to));
            (from, others)
        })
        .collect()
}

impl Drop for Server {
    fn drop(&mut self) {
        self.worker.shutdown();
    }
}
