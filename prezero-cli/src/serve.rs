//! `prezero serve`: the node-wide service, configured by a TOML file
//! (read by `prezero_service::ConfigFile`) and flags.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};

use prezero::{HugetlbReservation, PageKind};
use prezero_service::{parse_pool_flag, ConfigFile, ConfigPrepare};
use prezero_service::{PlacedPool, PoolNode, Server, ServerConfig};

use crate::units::fmt_size;

#[derive(clap::Args)]
pub struct Args {
    /// TOML configuration file (see packaging/prezero.toml); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Socket path [default: /run/prezero/prezero.sock].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// A pool, PAGE:target=AMOUNT,cap=AMOUNT,segment=SIZE,node=N|all (e.g.
    /// 2MB:target=8G,cap=16G,segment=256M). An amount is a size or a share of
    /// the node's memory (1/8, 12.5%), made whole segments on each node
    /// (a cap one at least, a target within it). Repeatable, also for one page size
    /// with other segment sizes (one pool per shape of VM: a request takes the
    /// pool whose segment fits it exactly, else the one needing the fewest
    /// segments); replaces the file's pools. node=all (the default) makes one
    /// such pool on every NUMA node with memory, each with this target and
    /// cap; node=N puts it on node N only. [default: 2MB:target=1G,cap=4G,segment=256M]
    #[arg(long = "pool")]
    pools: Vec<String>,
    /// A uid that may connect (root and the daemon's own uid always may). Repeatable.
    #[arg(long = "allow-uid")]
    allow_uids: Vec<u32>,
    /// A group whose members may connect. Repeatable.
    #[arg(long = "allow-gid")]
    allow_gids: Vec<u32>,
    /// Most memory one uid may hold plus have in quarantine (e.g. 64G).
    #[arg(long)]
    uid_cap: Option<String>,
    /// How scrubbed memory is checked: full (default), or sample:N (one cache
    /// line in every N 4 KiB pages).
    #[arg(long)]
    verify: Option<String>,
    /// Scrubber scheduling: idle (default), nice19 or normal. It runs at
    /// normal priority on every core while clients are refused for want of
    /// ready memory, until the pools are back at their targets.
    #[arg(long)]
    scrub_priority: Option<String>,
    /// What a released segment comes back as: same-uid (default: scrubbed in
    /// place with streaming stores for the uid that held it, fresh pages when
    /// another uid needs it) or fresh (fresh pages after every release, so
    /// not even a pin its own uid kept past the release reaches the next
    /// hand-out; ~8x the CPU).
    #[arg(long)]
    reuse: Option<String>,
    /// Most connections one uid may have open at once [default: 64].
    #[arg(long)]
    max_conns_per_uid: Option<usize>,
    /// Where the daemon records its segments, so that after a restart it finds
    /// the ones still held and charges their uids [default: the socket path
    /// with .ledger appended].
    #[arg(long)]
    ledger: Option<PathBuf>,
    /// Keep the counters in this file in the Prometheus text format, rewritten
    /// atomically (for node_exporter's textfile collector: a *.prom file in
    /// its --collector.textfile.directory).
    #[arg(long)]
    metrics_textfile: Option<PathBuf>,
    /// How often the metrics file is rewritten, in seconds [default: 5].
    #[arg(long)]
    metrics_interval: Option<f64>,
    /// Memory prepared for a tenant cgroup, CGROUP=SIZE[:PAGE] (e.g.
    /// /machine.slice/vm1.scope=4G:2MB): faulted in from inside that cgroup,
    /// so its counters and limits hold it, and handed to its tenants only
    /// (a cgroup that does not exist yet is looked for every second).
    /// Repeatable, after the file's [[prepare]] tables.
    #[arg(long = "prepare", value_name = "CGROUP=SIZE[:PAGE]")]
    prepare: Vec<String>,
    /// Grow the hugetlb pools so every pool's cap fits, and restore them on
    /// exit (root). Without it the daemon takes what the admin reserved.
    #[arg(long)]
    reserve: bool,
    /// Check the configuration and the flags, say the pools as they would be
    /// placed on this machine's nodes, and exit without serving (status 0:
    /// they pass).
    #[arg(long, conflicts_with = "reserve")]
    check: bool,
}

/// The file, then the flags over it.
fn config(args: &Args) -> Result<ServerConfig> {
    let mut file = match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read the config {}", p.display()))?;
            ConfigFile::parse(&text).with_context(|| format!("the config {}", p.display()))?
        }
        None => ConfigFile::default(),
    };
    let flag_pools = args
        .pools
        .iter()
        .map(|p| parse_pool_flag(p))
        .collect::<Result<_, _>>()?;
    file.socket = args.socket.clone().or(file.socket);
    file.allow_uids.extend(&args.allow_uids);
    file.allow_gids.extend(&args.allow_gids);
    file.uid_cap = args.uid_cap.clone().or(file.uid_cap);
    file.verify = args.verify.clone().or(file.verify);
    file.scrub_priority = args.scrub_priority.clone().or(file.scrub_priority);
    file.reuse = args.reuse.clone().or(file.reuse);
    file.max_conns_per_uid = args.max_conns_per_uid.or(file.max_conns_per_uid);
    file.ledger = args.ledger.clone().or(file.ledger);
    file.metrics_textfile = args.metrics_textfile.clone().or(file.metrics_textfile);
    file.metrics_interval = args.metrics_interval.or(file.metrics_interval);
    for p in &args.prepare {
        file.prepare.push(ConfigPrepare::from_flag(p)?);
    }
    Ok(file.config(flag_pools)?)
}

pub fn run(args: &Args) -> Result<()> {
    let cfg = config(args)?;
    // Before any hugetlb page is reserved for it: every pool placed on a
    // node, a share of the node's memory said as asked and as placed.
    let placed = cfg.placed_pools(&prezero::numa::Topology::read())?;
    for p in cfg
        .pools
        .iter()
        .filter(|p| p.target.is_share() || p.cap.is_share())
    {
        let whose = match p.node {
            PoolNode::Node(n) => format!("node {n}'s"),
            PoolNode::All => "each node's".into(),
        };
        eprintln!(
            "prezero serve: pool {} of {} segments: target {}, cap {} (of {whose} memory)",
            p.page,
            fmt_size(p.segment_size),
            p.target,
            p.cap
        );
    }
    for p in &placed {
        eprintln!(
            "prezero serve: pool {} on node {}: segments of {}, target {}, cap {}",
            p.page,
            p.node,
            fmt_size(p.segment_size),
            fmt_size(p.target),
            fmt_size(p.cap)
        );
    }
    if args.check {
        eprintln!("prezero serve: the configuration passes its checks");
        return Ok(());
    }
    // Dropped after the server stops (on SIGINT, SIGTERM or SIGHUP): the pools go back.
    let _reservations = if args.reserve {
        reserve(&placed)?
    } else {
        Vec::new()
    };
    let server = Server::start(cfg)?;
    Ok(server.run()?)
}

/// Grows each node's hugetlb pool so every pool placed on it fits its cap:
/// one reservation per page size, for all its pools on all nodes.
fn reserve(placed: &[PlacedPool]) -> Result<Vec<HugetlbReservation>> {
    let mut pages_of: BTreeMap<usize, (PageKind, BTreeMap<u32, usize>)> = BTreeMap::new();
    for p in placed {
        let node = p.node;
        let page = p.page.page_size();
        *pages_of
            .entry(page)
            .or_insert((p.page, BTreeMap::new()))
            .1
            .entry(node)
            .or_default() += p.cap.next_multiple_of(p.segment_size) / page;
    }
    pages_of
        .into_iter()
        .map(|(page, (kind, per_node))| {
            let mut want: Vec<(u32, usize)> = per_node.into_iter().collect();
            match HugetlbReservation::ensure_free_on_nodes(page, &want) {
                // Short: take what each node can find; its pool logs the rest.
                Err(prezero::Error::HugetlbShortage { .. }) => {
                    for w in &mut want {
                        let got = grown_to(page, w.0, w.1);
                        if got < w.1 {
                            eprintln!(
                                "prezero serve: --reserve {kind}: the kernel found {got} of {} pages on node {}",
                                w.1, w.0
                            );
                        }
                        w.1 = got;
                    }
                    HugetlbReservation::ensure_free_on_nodes(page, &want)
                }
                r => r,
            }
            .with_context(|| format!("--reserve {kind}"))
        })
        .collect()
}

/// The free pages of `page` size `node` can have, up to `pages`: what the
/// kernel finds when its pool is grown that far (given back at once).
fn grown_to(page: usize, node: u32, pages: usize) -> usize {
    match HugetlbReservation::ensure_free_on_nodes(page, &[(node, pages)]) {
        Ok(_) => pages,
        Err(prezero::Error::HugetlbShortage { free, .. }) => free,
        Err(_) => 0,
    }
}
