//! `prezero serve`: the node-wide service, configured by a TOML file and flags.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;

use std::collections::BTreeMap;

use prezero::service::{PoolConfig, PoolNode, Reuse, Server, ServerConfig, Verify};
use prezero::{HugetlbReservation, PageKind, ScrubPriority};

use crate::units::{fmt_size, parse_size};

#[derive(clap::Args)]
pub struct Args {
    /// TOML configuration file (see packaging/prezero.toml); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Socket path [default: /run/prezero/prezero.sock].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// A pool, PAGE:target=SIZE,cap=SIZE,segment=SIZE,node=N|all (e.g.
    /// 2MB:target=8G,cap=16G,segment=256M). Repeatable, also for one page size
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
    /// Grow the hugetlb pools so every pool's cap fits, and restore them on
    /// exit (root). Without it the daemon takes what the admin reserved.
    #[arg(long)]
    reserve: bool,
}

/// The configuration file. Sizes are strings like "256M" or "8G".
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    socket: Option<PathBuf>,
    #[serde(default)]
    allow_uids: Vec<u32>,
    #[serde(default)]
    allow_gids: Vec<u32>,
    uid_cap: Option<String>,
    verify: Option<String>,
    scrub_priority: Option<String>,
    reuse: Option<String>,
    max_conns_per_uid: Option<usize>,
    ledger: Option<PathBuf>,
    metrics_textfile: Option<PathBuf>,
    metrics_interval: Option<f64>,
    #[serde(default, rename = "pool")]
    pools: Vec<FilePool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePool {
    page: String,
    segment: Option<String>,
    target: String,
    cap: Option<String>,
    /// A node id, or "all".
    node: Option<FileNode>,
}

/// `node = 1` or `node = "all"`.
#[derive(Deserialize)]
#[serde(untagged)]
enum FileNode {
    Id(u32),
    Word(String),
}

impl FileNode {
    fn text(&self) -> String {
        match self {
            FileNode::Id(n) => n.to_string(),
            FileNode::Word(w) => w.clone(),
        }
    }
}

/// `all` or a node id.
fn pool_node(s: &str) -> Result<PoolNode> {
    if s == "all" {
        return Ok(PoolNode::All);
    }
    s.parse()
        .map(PoolNode::Node)
        .ok()
        .with_context(|| format!("pool node '{s}': expected a NUMA node id or all"))
}

fn page_kind(s: &str) -> Result<PageKind> {
    let k: PageKind = s.parse()?;
    if !k.is_hugetlb() {
        bail!("pool page '{s}': the service serves 2MB or 1GB pages");
    }
    Ok(k)
}

fn pool(
    page: &str,
    target: &str,
    cap: Option<&str>,
    segment: Option<&str>,
    node: Option<&str>,
) -> Result<PoolConfig> {
    let page = page_kind(page)?;
    let target = parse_size(target).context("pool target")?;
    let default_segment = page.page_size().max(256 << 20);
    let segment_size = segment
        .map_or(Ok(default_segment), parse_size)
        .context("pool segment")?;
    let cap = cap
        .map_or(Ok(target.max(segment_size)), parse_size)
        .context("pool cap")?;
    let node = node.map_or(Ok(PoolNode::All), pool_node)?;
    Ok(PoolConfig {
        page,
        segment_size,
        target,
        cap,
        node,
    })
}

/// `2MB:target=8G,cap=16G,segment=256M,node=1`
fn parse_pool_flag(s: &str) -> Result<PoolConfig> {
    let (page, rest) = s.split_once(':').unwrap_or((s, ""));
    let (mut target, mut cap, mut segment, mut node) = (None, None, None, None);
    for kv in rest.split(',').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--pool {s}: '{kv}' is not key=value"))?;
        match k {
            "target" => target = Some(v),
            "cap" => cap = Some(v),
            "segment" => segment = Some(v),
            "node" => node = Some(v),
            _ => {
                bail!("--pool {s}: unknown key '{k}' (target, cap, segment, node)")
            }
        }
    }
    pool(page, target.unwrap_or("1G"), cap, segment, node)
}

fn verify(s: &str) -> Result<Verify> {
    match s.split_once(':') {
        None if s == "full" => Ok(Verify::Full),
        Some(("sample", n)) => Ok(Verify::Sampled {
            one_in: n
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .with_context(|| format!("verify '{s}': N must be a positive integer"))?,
        }),
        _ => Err(anyhow!("verify '{s}': expected full or sample:N")),
    }
}

fn priority(s: &str) -> Result<ScrubPriority> {
    match s {
        "idle" => Ok(ScrubPriority::Idle),
        "nice19" => Ok(ScrubPriority::Nice19),
        "normal" => Ok(ScrubPriority::Normal),
        _ => Err(anyhow!(
            "scrub priority '{s}': expected idle, nice19 or normal"
        )),
    }
}

/// The file, then the flags over it.
fn config(args: &Args) -> Result<ServerConfig> {
    let file: File = match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read the config {}", p.display()))?;
            toml::from_str(&text).with_context(|| format!("the config {}", p.display()))?
        }
        None => File::default(),
    };
    let mut cfg = ServerConfig::default();
    if let Some(s) = args.socket.clone().or(file.socket) {
        cfg.socket = s;
    }
    cfg.pools = if !args.pools.is_empty() {
        args.pools
            .iter()
            .map(|p| parse_pool_flag(p))
            .collect::<Result<_, _>>()?
    } else if !file.pools.is_empty() {
        file.pools
            .iter()
            .map(|p| {
                let node = p.node.as_ref().map(FileNode::text);
                pool(
                    &p.page,
                    &p.target,
                    p.cap.as_deref(),
                    p.segment.as_deref(),
                    node.as_deref(),
                )
            })
            .collect::<Result<_, _>>()?
    } else {
        vec![parse_pool_flag("2MB:target=1G,cap=4G,segment=256M")?]
    };
    cfg.allow_uids = file.allow_uids;
    cfg.allow_uids.extend(&args.allow_uids);
    cfg.allow_gids = file.allow_gids;
    cfg.allow_gids.extend(&args.allow_gids);
    if let Some(c) = args.uid_cap.as_ref().or(file.uid_cap.as_ref()) {
        cfg.uid_cap = Some(parse_size(c).context("uid cap")?);
    }
    if let Some(v) = args.verify.as_ref().or(file.verify.as_ref()) {
        cfg.verify = verify(v)?;
    }
    if let Some(p) = args
        .scrub_priority
        .as_ref()
        .or(file.scrub_priority.as_ref())
    {
        cfg.scrub_priority = priority(p)?;
    }
    if let Some(r) = args.reuse.as_ref().or(file.reuse.as_ref()) {
        cfg.reuse = match r.as_str() {
            "same-uid" => Reuse::SameUid,
            "fresh" => Reuse::Fresh,
            _ => bail!("reuse '{r}': expected same-uid or fresh"),
        };
    }
    if let Some(n) = args.max_conns_per_uid.or(file.max_conns_per_uid) {
        cfg.max_conns_per_uid = n;
    }
    cfg.ledger = args.ledger.clone().or(file.ledger);
    cfg.metrics_textfile = args.metrics_textfile.clone().or(file.metrics_textfile);
    if let Some(secs) = args.metrics_interval.or(file.metrics_interval) {
        let most = prezero::service::MAX_METRICS_INTERVAL.as_secs_f64();
        if !(secs.is_finite() && (0.01..=most).contains(&secs)) {
            bail!("metrics interval {secs}: expected seconds, from 0.01 to {most}");
        }
        cfg.metrics_interval = std::time::Duration::from_secs_f64(secs);
    }
    Ok(cfg)
}

pub fn run(args: &Args) -> Result<()> {
    let cfg = config(args)?;
    // Before any hugetlb page is reserved for it: every pool placed on a node.
    let placed = cfg.placed_pools(&prezero::numa::Topology::read())?;
    for p in &placed {
        let node = match p.node {
            PoolNode::Node(n) => n.to_string(),
            PoolNode::All => "all".into(),
        };
        eprintln!(
            "prezero serve: pool {} on node {node}: segments of {}, target {}, cap {}",
            p.page,
            fmt_size(p.segment_size),
            fmt_size(p.target),
            fmt_size(p.cap)
        );
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
fn reserve(placed: &[PoolConfig]) -> Result<Vec<HugetlbReservation>> {
    let mut pages_of: BTreeMap<usize, (PageKind, BTreeMap<u32, usize>)> = BTreeMap::new();
    for p in placed {
        let PoolNode::Node(node) = p.node else {
            continue;
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_flags_parse() {
        let p = parse_pool_flag("2MB:target=8G,cap=16G,segment=256M").unwrap();
        assert_eq!(
            (p.page, p.target, p.cap, p.segment_size),
            (PageKind::Huge2M, 8 << 30, 16 << 30, 256 << 20)
        );
        let p = parse_pool_flag("1GB:target=2G").unwrap();
        assert_eq!((p.segment_size, p.cap), (1 << 30, 2 << 30));
        assert!(parse_pool_flag("4KB:target=1G").is_err());
        assert!(parse_pool_flag("2MB:size=1G").is_err());
        assert_eq!(
            parse_pool_flag("2MB:target=1G").unwrap().node,
            PoolNode::All
        );
        assert_eq!(parse_pool_flag("2MB:node=all").unwrap().node, PoolNode::All);
        assert_eq!(
            parse_pool_flag("2MB:node=3").unwrap().node,
            PoolNode::Node(3)
        );
        assert!(parse_pool_flag("2MB:node=-1").is_err());
        assert!(parse_pool_flag("2MB:node=one").is_err());
        assert!(verify("sample:0").is_err());
        assert_eq!(verify("sample:8").unwrap(), Verify::Sampled { one_in: 8 });
    }

    #[test]
    fn a_pools_node_in_the_file_is_an_id_or_all() {
        let nodes = |text: &str| -> Result<Vec<PoolNode>> {
            let f: File = toml::from_str(text)?;
            f.pools
                .iter()
                .map(|p| {
                    let node = p.node.as_ref().map(FileNode::text);
                    pool(&p.page, &p.target, None, None, node.as_deref()).map(|p| p.node)
                })
                .collect()
        };
        let text = "[[pool]]\npage = \"2MB\"\ntarget = \"1G\"\nnode = 1\n\n\
                    [[pool]]\npage = \"2MB\"\ntarget = \"1G\"\nnode = \"all\"\n\n\
                    [[pool]]\npage = \"2MB\"\ntarget = \"1G\"\n";
        assert_eq!(
            nodes(text).unwrap(),
            vec![PoolNode::Node(1), PoolNode::All, PoolNode::All]
        );
        assert!(nodes("[[pool]]\npage = \"2MB\"\ntarget = \"1G\"\nnode = \"one\"\n").is_err());
        assert!(nodes("[[pool]]\npage = \"2MB\"\ntarget = \"1G\"\nnode = -1\n").is_err());
    }

    #[test]
    fn the_packaged_config_parses() {
        let text = include_str!("../../packaging/prezero.toml");
        let f: File = toml::from_str(text).unwrap();
        assert!(!f.pools.is_empty());
        for p in &f.pools {
            let node = p.node.as_ref().map(FileNode::text);
            pool(
                &p.page,
                &p.target,
                p.cap.as_deref(),
                p.segment.as_deref(),
                node.as_deref(),
            )
            .unwrap();
        }
    }
}
