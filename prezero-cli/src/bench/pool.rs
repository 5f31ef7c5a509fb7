//! `prezero bench pool`: the pre-zeroed pool beside what the kernel and glibc do.
//!
//! - handout: latency of getting 2 MiB of zeroed, usable memory;
//! - sustained: alloc -> touch k lines per 4 KiB -> free, with W chunks in flight
//!   (a FIFO ring: W = 1 is hot reuse, W = 64 a 128 MiB working set), in GB/s of
//!   zeroed memory handed out; the kernel rows host-warm, and host-cold for k = 1;
//! - interference: a CPU-bound foreground on every core, alone and while the
//!   scrubber has a backlog.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use prezero::{Chunk, PageKind, Pool, Region, ScrubPriority};

use super::hugetlb::hugetlb_for_run;
use super::memory::touch_lines;
use crate::rows::{self, PoolCase, Row};
use crate::stats::{gbps, round3, Sorted, Stats};
use crate::table::Table;
use crate::units::{fmt_size, human_size, parse_size};

const CHUNK: usize = 2 << 20;
/// Quantiles of the hand-out latency reported in `--json` (for the report's CDF).
const CDF_POINTS: [f64; 12] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 1.0,
];

#[derive(clap::Args)]
pub struct Args {
    /// Cases, comma-separated: handout, sustained, interference (default: all).
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
    /// Cache lines touched per 4 KiB page in the sustained case.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
    lines: Vec<usize>,
    /// Chunks in flight in the sustained case.
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    inflight: Vec<usize>,
    /// Bytes handed out per sustained row (K/M/G).
    #[arg(long, default_value = "2G")]
    volume: String,
    /// Hand-outs timed per source in the handout case.
    #[arg(long, default_value_t = 512)]
    samples: usize,
    /// Seconds to wait before a host-cold kernel row (0: no host-cold rows).
    #[arg(long, default_value_t = 5)]
    host_cold_wait: u64,
    /// Dirty memory waiting for the scrubber in the interference case (K/M/G).
    #[arg(long, default_value = "2G")]
    backlog: String,
    /// Seconds of CPU-bound work per foreground thread in the interference case.
    #[arg(long, default_value_t = 1.0)]
    foreground: f64,
    /// Reserve hugetlb 2 MiB pages for the hugetlb rows (restored afterwards). Needs root.
    #[arg(long)]
    reserve: bool,
    /// One JSON object per row.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Source {
    PoolWarm,
    PoolScrub,
    PoolNoScrub,
    MmapThp,
    MmapHugetlb,
    Calloc,
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Source::PoolWarm => "pool-warm",
            Source::PoolScrub => "pool-scrub",
            Source::PoolNoScrub => "pool-noscrub",
            Source::MmapThp => "mmap-thp",
            Source::MmapHugetlb => "mmap-hugetlb",
            Source::Calloc => "calloc",
        }
    }

    fn is_kernel(self) -> bool {
        matches!(self, Source::MmapThp | Source::MmapHugetlb | Source::Calloc)
    }
}

/// 2 MiB of zeroed memory from one of the sources; gives it back when dropped.
enum Item {
    Chunk(Chunk),
    Region(Region),
    Calloc(*mut u8),
}

impl Item {
    fn bytes(&mut self) -> &mut [u8] {
        match self {
            Item::Chunk(c) => c,
            Item::Region(r) => r.as_mut_slice(),
            // SAFETY: calloc returned CHUNK bytes, owned by this item.
            Item::Calloc(p) => unsafe { std::slice::from_raw_parts_mut(*p, CHUNK) },
        }
    }
}

impl Drop for Item {
    fn drop(&mut self) {
        if let Item::Calloc(p) = self {
            // SAFETY: allocated by calloc, freed once.
            unsafe { libc::free(p.cast()) };
        }
    }
}

/// Makes items of one source. Kernel sources populate nothing ahead: the
/// touches fault their pages in, which is the cost being compared.
struct Maker {
    source: Source,
    pool: Option<Pool>,
}

impl Maker {
    fn new(source: Source, capacity_chunks: usize) -> Result<Maker> {
        let pool = match source {
            Source::PoolWarm | Source::PoolScrub | Source::PoolNoScrub => {
                let b = Pool::builder()
                    .chunk_size(CHUNK)
                    .backing(PageKind::Thp)
                    .capacity(capacity_chunks * CHUNK);
                let b = match source {
                    Source::PoolNoScrub => b.scrubbers(0),
                    Source::PoolWarm => b.prefill(capacity_chunks).hot_window(0),
                    _ => b,
                };
                Some(b.build()?)
            }
            _ => None,
        };
        Ok(Maker { source, pool })
    }

    fn make(&self) -> Result<Item> {
        Ok(match self.source {
            Source::MmapThp => Item::Region(Region::new(CHUNK, PageKind::Thp)?),
            Source::MmapHugetlb => Item::Region(Region::new(CHUNK, PageKind::Huge2M)?),
            Source::Calloc => {
                // SAFETY: plain calloc; null is checked.
                let p = unsafe { libc::calloc(1, CHUNK) }.cast::<u8>();
                if p.is_null() {
                    bail!("calloc failed");
                }
                Item::Calloc(p)
            }
            _ => Item::Chunk(
                self.pool
                    .as_ref()
                    .expect("pool sources have a pool")
                    .alloc_zeroed()?,
            ),
        })
    }
}

pub fn run(args: &Args) -> Result<()> {
    let volume = parse_size(&args.volume)?;
    let backlog = parse_size(&args.backlog)?.div_ceil(CHUNK);
    if !(args.foreground > 0.0 && args.foreground.is_finite()) {
        bail!("--foreground must be a positive number of seconds");
    }
    let all = ["handout", "sustained", "interference"];
    let cases: Vec<&str> = if args.cases.is_empty() {
        all.to_vec()
    } else {
        args.cases.iter().map(String::as_str).collect()
    };
    if let Some(bad) = cases.iter().find(|c| !all.contains(c)) {
        bail!("unknown case '{bad}' (known: {})", all.join(", "));
    }
    let max_w = args.inflight.iter().copied().max().unwrap_or(1);
    let hugetlb_pages = (max_w + 8).max(args.samples.min(64));
    let wants_hugetlb = cases.iter().any(|c| *c != "interference");
    let hugetlb = match hugetlb_for_run(PageKind::Huge2M, hugetlb_pages * CHUNK, args.reserve) {
        Ok(r) => Some(r),
        Err(e) => {
            if wants_hugetlb {
                super::not_measured("the hugetlb rows", &crate::message(&e));
            }
            None
        }
    };
    let sources = |pool_sources: &[Source]| {
        let mut v = pool_sources.to_vec();
        v.push(Source::MmapThp);
        if hugetlb.is_some() {
            v.push(Source::MmapHugetlb);
        }
        v.push(Source::Calloc);
        v
    };
    if cases.contains(&"handout") {
        handout(args, &sources(&[Source::PoolWarm]))?;
    }
    if cases.contains(&"sustained") {
        sustained(
            args,
            volume,
            &sources(&[Source::PoolScrub, Source::PoolNoScrub]),
        )?;
    }
    if cases.contains(&"interference") {
        interference(args, backlog)?;
    }
    Ok(())
}

fn handout(args: &Args, sources: &[Source]) -> Result<()> {
    let table = Table::new(" ").left(14).right(9).right(9).right(9);
    if !args.json {
        println!(
            "\n# pool: 2 MiB hand-out latency (zeroed, usable memory), {} samples",
            args.samples
        );
        table.print(&["source", "p50 us", "p99 us", "max us"]);
    }
    for &source in sources {
        let n = args.samples.max(1);
        let batch = 64.min(n);
        let maker = Maker::new(source, batch)?;
        let mut lat = Vec::with_capacity(n);
        // Warm up once (page tables, the host's backing of the memory).
        drop(
            (0..batch)
                .map(|_| maker.make())
                .collect::<Result<Vec<_>, _>>()?,
        );
        while lat.len() < n {
            if source == Source::PoolWarm {
                wait_scrubbed(
                    maker.pool.as_ref().expect("pool"),
                    batch,
                    Duration::from_secs(30),
                );
            }
            let mut held = Vec::with_capacity(batch);
            for _ in 0..batch.min(n - lat.len()) {
                let t = Instant::now();
                let mut item = maker.make()?;
                if source.is_kernel() {
                    // Usable means populated: what the pool hands out already is.
                    populate(&mut item)?;
                }
                lat.push(t.elapsed().as_secs_f64() * 1e6);
                held.push(item);
            }
        }
        let lat = Sorted::new(lat);
        let q = |p: f64| lat.percentile(p);
        let (p50, p99, max) = (q(0.50), q(0.99), q(1.0));
        if args.json {
            Row::Pool(PoolCase::Handout(rows::PoolHandout {
                source: source.name().to_string(),
                p50_us: round3(p50),
                p99_us: round3(p99),
                max_us: round3(max),
                cdf: CDF_POINTS.iter().map(|&p| (round3(q(p)), p)).collect(),
            }))
            .print();
        } else {
            table.print(&[
                source.name().to_string(),
                format!("{p50:.2}"),
                format!("{p99:.2}"),
                format!("{max:.2}"),
            ]);
        }
    }
    Ok(())
}

/// Populates a kernel item for writing (the pool's chunks are populated already).
fn populate(item: &mut Item) -> Result<()> {
    match item {
        Item::Region(r) => Ok(prezero::prefault(r, 1).map(drop)?),
        Item::Calloc(_) => {
            touch_lines(item.bytes(), 1);
            Ok(())
        }
        Item::Chunk(_) => Ok(()),
    }
}

/// Waits, `at_most` this long, until the pool holds `n` zeroed chunks again
/// (the warm state).
pub(super) fn wait_scrubbed(pool: &Pool, n: usize, at_most: Duration) {
    let t = Instant::now();
    while pool.stats().zeroed < n && t.elapsed() < at_most {
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn sustained(args: &Args, volume: usize, sources: &[Source]) -> Result<()> {
    let ops = (volume / CHUNK).max(1);
    let table = args
        .lines
        .iter()
        .fold(Table::new("").left(20), |t, _| t.right(12));
    for &w in &args.inflight {
        if !args.json {
            println!("\n# pool: sustained alloc -> touch k lines per 4 KiB -> free, W = {w} in flight, GB/s of zeroed memory handed out");
            let head: Vec<String> = std::iter::once("source".to_string())
                .chain(args.lines.iter().map(|k| format!("k={k}")))
                .collect();
            table.print(&head);
        }
        for &source in sources {
            let mut hosts = vec!["warm"];
            if source.is_kernel() && args.host_cold_wait > 0 {
                hosts.push("cold");
            }
            for host in hosts {
                let label = if source.is_kernel() {
                    format!("{} host-{host}", source.name())
                } else {
                    source.name().to_string()
                };
                let mut cells = vec![label];
                let lines: &[usize] = if host == "cold" {
                    &args.lines[..1]
                } else {
                    &args.lines
                };
                for &k in lines {
                    let maker = Maker::new(source, w + 8)?;
                    let (gbps, stdev) = if host == "cold" {
                        std::thread::sleep(Duration::from_secs(args.host_cold_wait));
                        // Only the first pass meets host-cold memory: time that pass alone.
                        ring(&maker, k, w, (w + 8).min(ops), 0)?
                    } else {
                        ring(&maker, k, w, ops, w + 8)?
                    };
                    if args.json {
                        Row::Pool(PoolCase::Sustained(rows::PoolSustained {
                            source: source.name().to_string(),
                            host: source.is_kernel().then(|| host.to_string()),
                            inflight: w as u64,
                            lines: k as u64,
                            gbps: round3(gbps),
                            stdev_pct: round3(stdev),
                        }))
                        .print();
                    } else {
                        cells.push(format!("{gbps:.1}+-{stdev:.0}%"));
                    }
                }
                if !args.json {
                    table.print(&cells);
                }
            }
        }
    }
    Ok(())
}

/// `ops` hand-outs through a FIFO ring of `w` items after `warm` untimed ones;
/// returns GB/s over the whole run and the spread between its fifths.
fn ring(maker: &Maker, k: usize, w: usize, ops: usize, warm: usize) -> Result<(f64, f64)> {
    let mut ring: VecDeque<Item> = VecDeque::with_capacity(w + 1);
    let step = |ring: &mut VecDeque<Item>| -> Result<()> {
        let mut item = maker.make()?;
        touch_lines(item.bytes(), k);
        ring.push_back(item);
        while ring.len() >= w.max(1) {
            ring.pop_front();
        }
        Ok(())
    };
    for _ in 0..warm {
        step(&mut ring)?;
    }
    let parts = 5.min(ops);
    let mut rates = Vec::with_capacity(parts);
    let start = Instant::now();
    for p in 0..parts {
        let n = ops * (p + 1) / parts - ops * p / parts;
        let t = Instant::now();
        for _ in 0..n {
            step(&mut ring)?;
        }
        rates.push(gbps(n * CHUNK, t.elapsed()));
    }
    let total = gbps(ops * CHUNK, start.elapsed());
    Ok((total, Stats::of(&rates).stdev_pct))
}

/// A fixed amount of integer work, the same on every call.
fn spin(iterations: u64) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..iterations {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    x
}

fn foreground(threads: usize, iterations: u64) -> Duration {
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| std::hint::black_box(spin(iterations)));
        }
    });
    t.elapsed()
}

/// The foreground alone and beside a scrubber holding `backlog_chunks` dirty chunks.
fn interference(args: &Args, backlog_chunks: usize) -> Result<()> {
    let threads = prezero::cpu().logical_cpus;
    let t = Instant::now();
    std::hint::black_box(spin(10_000_000));
    let iterations = (10_000_000.0 * args.foreground / t.elapsed().as_secs_f64()) as u64;
    // The last column, on the scrubber's rows only, says how much it did.
    let table = Table::new(" ")
        .left(30)
        .right(10)
        .right(10)
        .gap("   ")
        .left(0);
    if !args.json {
        println!(
            "\n# pool: interference — a CPU-bound foreground on all {threads} CPUs, alone and with {} waiting to be scrubbed",
            fmt_size(backlog_chunks * CHUNK)
        );
        table.print(&["scrubber", "time s", "slowdown"]);
    }
    let alone: Vec<f64> = (0..3)
        .map(|_| foreground(threads, iterations).as_secs_f64())
        .collect();
    let base = Stats::of(&alone).median;
    if !args.json {
        table.print(&[
            "none (foreground alone)",
            format!("{base:.3}").as_str(),
            "-",
        ]);
    }
    for priority in [ScrubPriority::Idle, ScrubPriority::Normal] {
        let pool = Pool::builder()
            .chunk_size(CHUNK)
            .capacity(backlog_chunks * CHUNK)
            .hot_window(0)
            .scrub_priority(priority)
            .build()?;
        // Take the whole capacity, dirty it, and free it at once: a backlog.
        let mut held = Vec::with_capacity(backlog_chunks);
        for _ in 0..backlog_chunks {
            let mut c = pool.alloc_zeroed()?;
            c.fill(0x5a);
            held.push(c);
        }
        drop(held);
        let with = foreground(threads, iterations).as_secs_f64();
        let scrubbed_during = pool.stats().bytes_scrubbed;
        let slowdown = (with / base - 1.0) * 100.0;
        let name = pool.stats().scrubber_priority;
        if args.json {
            Row::Pool(PoolCase::Interference(rows::Interference {
                scrubber: name.to_string(),
                alone_s: round3(base),
                with_s: round3(with),
                slowdown_pct: round3(slowdown),
                scrubbed_bytes_during: scrubbed_during,
            }))
            .print();
        } else {
            table.print(&[
                name.to_string(),
                format!("{with:.3}"),
                format!("{slowdown:.1}%"),
                format!(
                    "({} scrubbed meanwhile)",
                    human_size(scrubbed_during as usize)
                ),
            ]);
        }
    }
    Ok(())
}
