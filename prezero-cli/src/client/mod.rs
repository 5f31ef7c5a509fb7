//! `prezero client`: talk to `prezero serve` by hand (and from the tests).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::json;

use prezero::PageKind;
use prezero_service::{AllocOptions, Client, NodeChoice, Refusal, ServiceStats, Source};

use crate::table::Table;
use crate::units::{fmt_size, parse_size};

pub(crate) mod cgroups;
mod exec;

#[derive(clap::Subcommand)]
pub enum Which {
    /// Ask for zeroed memory, check every byte, print which path served it.
    Alloc(AllocArgs),
    /// The service's counters.
    Stats(StatsArgs),
    /// Allocate and release random sizes for a while, checking every byte
    /// (stress for the service; exits non-zero if any byte was not zero).
    Churn(ChurnArgs),
    /// Take zeroed memory as memfds and exec PROGRAM with them inherited
    /// (`{path}`, `{fd}`, `{size}` in its arguments name them).
    Exec(exec::ExecArgs),
    /// Prepare memory inside a tenant cgroup before its tenant starts (as a
    /// VMM launcher would): charged to that cgroup, handed to its tenants only.
    Prepare(cgroups::PrepareArgs),
}

/// The options every `prezero client` command has (`#[command(flatten)]`).
#[derive(clap::Args)]
pub struct Common {
    /// Socket path [default: $PREZERO_SOCKET or /run/prezero/prezero.sock].
    #[arg(long)]
    socket: Option<PathBuf>,
}

/// Where the memory of `client alloc` and `client exec` must be.
#[derive(clap::Args)]
pub struct NodeArgs {
    /// The NUMA node the memory must be on: a node id, or any [default: the
    /// caller's: the one node its memory policy binds or prefers (numactl
    /// --membind/--preferred), else the one node of every CPU it may run on
    /// (numactl --cpunodebind, taskset), else any].
    #[arg(long)]
    node: Option<String>,
    /// When that node has too little ready, take another node's memory,
    /// nearest first (without it: local memory on the node).
    #[arg(long)]
    other_nodes: bool,
}

impl NodeArgs {
    /// `opts` with this node choice.
    pub(crate) fn apply(&self, opts: AllocOptions) -> Result<AllocOptions> {
        let node = match self.node.as_deref() {
            None => NodeChoice::Caller,
            Some("any") => NodeChoice::Any,
            Some(n) => NodeChoice::Node(
                n.parse()
                    .ok()
                    .with_context(|| format!("--node {n}: expected a NUMA node id or any"))?,
            ),
        };
        if self.other_nodes && node == NodeChoice::Any {
            bail!("--other-nodes needs a node (--node N, or the caller's)");
        }
        Ok(AllocOptions {
            node,
            other_nodes: self.other_nodes,
            ..opts
        })
    }
}

/// "node N" for a service allocation that names one.
pub(crate) fn on_node(node: Option<u32>) -> String {
    node.map_or(String::new(), |n| format!(" on node {n}"))
}

impl Common {
    pub(crate) fn client(&self) -> Result<Client> {
        Ok(match &self.socket {
            Some(p) => Client::connect(p),
            None => Client::connect_default(),
        }?)
    }
}

#[derive(clap::Args)]
pub struct AllocArgs {
    /// Bytes (K/M/G/T suffixes).
    size: String,
    /// 2MB or 1GB.
    #[arg(long, default_value = "2MB")]
    page: String,
    /// Keep the memory until stdin ends (Ctrl-D) or the process is killed.
    #[arg(long)]
    hold: bool,
    /// Fail rather than fall back to local memory.
    #[arg(long)]
    no_fallback: bool,
    /// Fill the memory with this byte before releasing it (to test scrubbing).
    #[arg(long, value_name = "BYTE")]
    fill: Option<u8>,
    #[command(flatten)]
    node: NodeArgs,
    #[command(flatten)]
    common: Common,
    /// One JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    common: Common,
    /// One JSON object.
    #[arg(long, conflicts_with = "prometheus")]
    json: bool,
    /// The Prometheus text exposition format (what `prezero serve
    /// --metrics-textfile` writes).
    #[arg(long)]
    prometheus: bool,
}

#[derive(clap::Args)]
pub struct ChurnArgs {
    /// How long.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Largest request (K/M/G suffixes); sizes are uniform in [page, max].
    #[arg(long, default_value = "64M")]
    max: String,
    /// 2MB or 1GB.
    #[arg(long, default_value = "2MB")]
    page: String,
    /// Seed of the size sequence.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    common: Common,
}

pub fn run(which: Which) -> Result<()> {
    match which {
        Which::Alloc(a) => alloc(&a),
        Which::Stats(a) => stats(&a),
        Which::Churn(a) => churn(&a),
        Which::Exec(a) => exec::run(&a),
        Which::Prepare(a) => cgroups::prepare(&a),
    }
}

fn alloc(args: &AllocArgs) -> Result<()> {
    let size = parse_size(&args.size)?;
    let page: PageKind = args.page.parse()?;
    let opts = args.node.apply(AllocOptions {
        fallback: !args.no_fallback,
        ..AllocOptions::default()
    })?;
    let client = args.common.client()?;
    let t = Instant::now();
    let mut mem = client.alloc_with(size, page, opts)?;
    let took = t.elapsed();
    let t = Instant::now();
    if let Some(off) = prezero::first_nonzero(mem.as_slice()) {
        bail!("byte {off} of the memory handed out is not zero");
    }
    let checked = t.elapsed();
    let (source, detail, node) = match mem.source() {
        Source::Service {
            segments,
            segment_size,
            node,
        } => (
            "service",
            format!(
                "{segments} segments of {}{}",
                fmt_size(*segment_size),
                on_node(*node)
            ),
            *node,
        ),
        Source::Local { reason } => ("local", reason.clone(), None),
    };
    if source == "local" {
        // Served all the same (`--no-fallback` makes it an error): said
        // where a script's log keeps it.
        eprintln!(
            "prezero: the service did not serve this ({detail}): local memory instead \
             (--no-fallback makes this an error)"
        );
    }
    if args.json {
        println!(
            "{}",
            json!({"source": source, "detail": detail, "bytes": mem.len(), "page": mem.page().name(),
                   "node": node,
                   "alloc_us": took.as_secs_f64() * 1e6, "verify_us": checked.as_secs_f64() * 1e6})
        );
    } else {
        println!(
            "{} on {} pages from {source} ({detail}) in {:.3} ms, {:.1} GB/s; all zero (checked in {:.1} ms)",
            fmt_size(mem.len()),
            mem.page(),
            took.as_secs_f64() * 1e3,
            mem.len() as f64 / took.as_secs_f64() / 1e9,
            checked.as_secs_f64() * 1e3
        );
    }
    if args.hold {
        println!("holding; end stdin (Ctrl-D) to release");
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    }
    if let Some(b) = args.fill {
        mem.as_mut_slice().fill(b);
    }
    Ok(())
}

/// Why `client` has no service, and what to do about it: start one (the
/// package's unit for the default socket, else `prezero serve` on that
/// path), or give the path of one that runs.
fn no_service(client: &Client) -> anyhow::Error {
    let path = client.path().display();
    let start = if client.path() == Path::new(prezero_service::DEFAULT_SOCKET) {
        "start it (systemctl start prezero, where the package is installed; or \
         prezero serve as root)"
            .to_string()
    } else {
        format!("start one there (prezero serve --socket {path})")
    };
    let why = match client.connect_errno() {
        Some(libc::ENOENT) => format!("no service at {path} (no socket there)"),
        Some(libc::ECONNREFUSED) => format!(
            "no service at {path} (a socket nobody listens on: its daemon stopped without \
             removing it)"
        ),
        Some(libc::EACCES) => {
            return anyhow!(
                "no service at {path} for this uid (permission denied): the daemon's \
                 allow_uids or allow_gids name who may connect"
            )
        }
        Some(e) => format!(
            "no service at {path} ({})",
            std::io::Error::from_raw_os_error(e)
        ),
        None => format!("no service at {path}"),
    };
    anyhow!("{why}: {start}, or name a running one with --socket PATH or PREZERO_SOCKET")
}

fn stats(args: &StatsArgs) -> Result<()> {
    let client = args.common.client()?;
    if !client.is_connected() {
        return Err(no_service(&client));
    }
    let s = client.stats()?;
    if args.json {
        println!("{}", stats_json(&s));
        return Ok(());
    }
    if args.prometheus {
        print!("{}", prezero_service::metrics::prometheus(&s));
        return Ok(());
    }
    print_pools(&s);
    print_counters(&s);
    for t in &s.tenants {
        println!(
            "tenant uid {}: {} connections, {} charged",
            t.uid,
            t.connections,
            fmt_size(t.charged as usize)
        );
    }
    cgroups::print_rows(&s);
    let cap = if s.uid_cap == u64::MAX {
        "none".to_string()
    } else {
        fmt_size(s.uid_cap as usize)
    };
    println!(
        "uid {}: {} held or in quarantine, cap {cap}",
        s.uid,
        fmt_size(s.uid_used as usize)
    );
    Ok(())
}

/// Each pool's sizes and segments by state, and the pools short of hugetlb pages.
fn print_pools(s: &ServiceStats) {
    let table = Table::new(" ")
        .right(5)
        .right(8)
        .right(4)
        .right(8)
        .right(8)
        .right(6)
        .right(6)
        .right(11)
        .right(9)
        .right(9);
    table.print(&[
        "page",
        "segment",
        "node",
        "target",
        "cap",
        "ready",
        "leased",
        "quarantined",
        "scrubbing",
        "hand-outs",
    ]);
    for p in &s.pools {
        let size = |b: u64| fmt_size(b as usize);
        table.print(&[
            size(p.page_size),
            size(p.segment_size),
            p.node.map_or("-".into(), |n| n.to_string()),
            size(p.target),
            size(p.cap),
            p.ready.to_string(),
            p.leased.to_string(),
            p.quarantined.to_string(),
            p.scrubbing.to_string(),
            p.handouts.to_string(),
        ]);
    }
    // What the daemon said once in its log, here for as long as it lasts.
    for p in s.pools.iter().filter(|p| p.short > 0) {
        let node = p.node.map_or(String::new(), |n| format!(" on node {n}"));
        let page = fmt_size(p.page_size as usize);
        println!(
            "pool {page}/{}{node}: {} short of its target for want of hugetlb pages \
             ({} more {page} pages{node} would fill it; the daemon's log names the command)",
            fmt_size(p.segment_size as usize),
            fmt_size(p.short as usize),
            p.short / p.page_size.max(1)
        );
    }
}

/// What the daemon has done: clients, hand-outs, refusals by reason, latency,
/// cleaning and verifying.
fn print_counters(s: &ServiceStats) {
    let rate = |b: u64, ns: u64| if ns == 0 { 0.0 } else { b as f64 / ns as f64 };
    let reasons: Vec<String> = Refusal::ALL
        .iter()
        .zip(&s.refusals_by_reason)
        .filter(|(_, &n)| n > 0)
        .map(|(r, n)| format!("{} {n}", r.name()))
        .collect();
    println!(
        "clients {}, hand-outs {}, refusals {}{}, protocol errors {}",
        s.clients,
        s.handouts,
        s.refusals,
        if reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", reasons.join(", "))
        },
        s.protocol_errors
    );
    if s.latency.count > 0 {
        println!(
            "hand-out latency: mean {:.0} us over {}",
            s.latency.sum_ns as f64 / s.latency.count as f64 / 1e3,
            s.latency.count
        );
    }
    let in_place = s.scrubbed_bytes - s.fresh_bytes.min(s.scrubbed_bytes);
    println!(
        "cleaned {} in place at {:.1} GB/s and {} with fresh pages at {:.1} GB/s; \
         verified {} at {:.1} GB/s, verify failures {}",
        fmt_size(in_place as usize),
        rate(in_place, s.scrub_ns.saturating_sub(s.fresh_ns)),
        fmt_size(s.fresh_bytes as usize),
        rate(s.fresh_bytes, s.fresh_ns),
        fmt_size(s.verified_bytes as usize),
        rate(s.verified_bytes, s.verify_ns),
        s.verify_failures
    );
}

pub fn stats_json(s: &ServiceStats) -> serde_json::Value {
    json!({
        "pools": s.pools.iter().map(|p| json!({
            "page_size": p.page_size, "segment_size": p.segment_size, "target": p.target,
            "cap": p.cap, "ready": p.ready, "leased": p.leased,
            "quarantined": p.quarantined, "scrubbing": p.scrubbing, "handouts": p.handouts,
            "node": p.node, "hugetlb_short": p.short,
        })).collect::<Vec<_>>(),
        "refusals_by_reason": Refusal::ALL.iter().zip(&s.refusals_by_reason)
            .map(|(r, &n)| (r.name().to_owned(), json!(n)))
            .collect::<serde_json::Map<_, _>>(),
        "handout_latency": json!({
            "bounds_ns": s.latency.bounds_ns, "counts": s.latency.counts,
            "sum_ns": s.latency.sum_ns, "count": s.latency.count,
        }),
        "fresh_bytes": s.fresh_bytes, "fresh_ns": s.fresh_ns,
        "tenants": s.tenants.iter().map(|t| json!({
            "uid": t.uid, "connections": t.connections, "charged": t.charged,
        })).collect::<Vec<_>>(),
        "tenants_omitted": s.tenants_omitted,
        "cgroups": cgroups::json_rows(s), "cgroups_omitted": s.cgroups_omitted,
        "clients": s.clients, "handouts": s.handouts, "refusals": s.refusals,
        "protocol_errors": s.protocol_errors, "scrubbed_bytes": s.scrubbed_bytes,
        "scrub_ns": s.scrub_ns, "verified_bytes": s.verified_bytes, "verify_ns": s.verify_ns,
        "verify_failures": s.verify_failures, "uid": s.uid, "uid_used": s.uid_used,
        "uid_cap": s.uid_cap,
    })
}

fn churn(args: &ChurnArgs) -> Result<()> {
    let page: PageKind = args.page.parse()?;
    let max = parse_size(&args.max)?.max(page.page_size());
    let client = args.common.client()?;
    if !client.is_connected() {
        return Err(no_service(&client));
    }
    let opts = AllocOptions {
        fallback: false,
        ..AllocOptions::default()
    };
    let mut rng = args.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let end = Instant::now() + Duration::from_secs_f64(args.seconds);
    let (mut served, mut refused, mut bytes) = (0u64, 0u64, 0usize);
    while Instant::now() < end {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let pages = max / page.page_size();
        let size = (1 + (rng as usize) % pages) * page.page_size();
        match client.alloc_with(size, page, opts) {
            Ok(mut m) => {
                if let Some(off) = prezero::first_nonzero(m.as_slice()) {
                    bail!("byte {off} of a {size}-byte hand-out is not zero");
                }
                m.as_mut_slice().fill(0xa5);
                served += 1;
                bytes += size;
            }
            Err(prezero_service::Error::Refused { errno, .. })
                if errno == libc::ENOMEM || errno == libc::EDQUOT =>
            {
                refused += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e.into()),
        }
    }
    println!(
        "{served} served ({} in all, every byte zero), {refused} refused for lack of ready memory",
        fmt_size(bytes)
    );
    Ok(())
}
