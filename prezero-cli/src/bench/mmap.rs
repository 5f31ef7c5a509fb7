//! `prezero bench mmap`: perf's `bench mem mmap`, which the seeds measure with and
//! which the perf on these machines lacks. Each loop maps, populates and unmaps;
//! the map and the population are timed, the unmap is not (as perf does).

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use prezero::numa::NodePart;
use prezero::{PageKind, Region};

use super::daemon::{alloc, wait_ready, Daemon};
use super::hugetlb::hugetlb_for_run;
use super::memory::touch_pages;
use super::pool::wait_scrubbed;
use crate::rows::{self, Row};
use crate::stats::{gbps, round2, Stats};
use crate::units::{fmt_size, parse_size};

#[derive(clap::Args)]
pub struct Args {
    /// Page kinds, comma-separated: 4KB, thp, 2MB, 1GB (2MB/1GB are hugetlb).
    #[arg(
        short = 'p',
        long = "page",
        value_delimiter = ',',
        default_value = "4KB"
    )]
    pages: Vec<String>,
    /// Functions, comma-separated: demand, populate, populate-parallel, pool,
    /// service (default: all but service).
    #[arg(short = 'f', long = "function", value_delimiter = ',')]
    functions: Vec<String>,
    /// Bytes per loop (K/M/G suffixes).
    #[arg(short = 's', long = "size", default_value = "1G")]
    size: String,
    /// Loops per function.
    #[arg(short = 'l', long = "nr_loops", default_value_t = 5)]
    loops: usize,
    /// Threads for populate-parallel (default: every CPU).
    #[arg(short = 't', long = "threads")]
    threads: Option<usize>,
    /// NUMA nodes for populate-parallel, comma-separated: the region in that
    /// many parts, part i bound to node i and populated by threads on its
    /// CPUs (prezero::prefault_on_nodes); each loop checks where the pages
    /// landed. Without it, the threads run where the kernel puts them.
    #[arg(long, value_delimiter = ',')]
    nodes: Vec<u32>,
    /// Wait this long before each loop, so the guest has handed freed memory
    /// back to the host and the figure is the host-cold one (VMs only).
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "5")]
    host_cold: Option<u64>,
    /// Reserve the hugetlb pages the run needs, restoring the pool afterwards
    /// (also on error and on Ctrl-C). Needs root.
    #[arg(long)]
    reserve: bool,
    /// For `-f service`: the daemon at this socket, instead of a private one
    /// the run starts (with `--reserve` passed on).
    #[arg(long)]
    socket: Option<std::path::PathBuf>,
    /// One JSON object per figure.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Function {
    Demand,
    Populate,
    PopulateParallel,
    Pool,
    Service,
}

impl Function {
    const ALL: [Function; 5] = [
        Function::Demand,
        Function::Populate,
        Function::PopulateParallel,
        Function::Pool,
        Function::Service,
    ];

    fn name(self) -> &'static str {
        match self {
            Function::Demand => "demand",
            Function::Populate => "populate",
            Function::PopulateParallel => "populate-parallel",
            Function::Pool => "pool",
            Function::Service => "service",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Function::Demand => "Demand loaded mmap(): one write per page",
            Function::Populate => "mmap() + MADV_POPULATE_WRITE, one thread",
            Function::PopulateParallel => "mmap() + prezero::prefault over all threads",
            Function::Pool => "zeroed chunks from a warm prezero::Pool, scrubbed between loops",
            Function::Service => {
                "memfds from prezero serve: mapped, populated, one write per page; scrubbed between loops"
            }
        }
    }

    fn threads(self, parallel: usize) -> usize {
        if self == Function::PopulateParallel {
            parallel
        } else {
            1
        }
    }

    /// Maps and populates `size` bytes of `kind`: the timed part of one
    /// loop. With `nodes`, populate-parallel places a part on each.
    fn map_and_populate(
        self,
        size: usize,
        kind: PageKind,
        threads: usize,
        nodes: &[u32],
    ) -> prezero::Result<(Region, Vec<NodePart>)> {
        let mut r = Region::new(size, kind)?;
        match self {
            Function::Demand => touch_pages(r.as_mut_slice(), touch_stride(kind), 1),
            Function::PopulateParallel if !nodes.is_empty() => {
                let parts = prezero::prefault_on_nodes(&r, nodes, threads)?;
                return Ok((r, parts));
            }
            Function::Populate | Function::PopulateParallel => {
                prezero::prefault(&r, self.threads(threads))?;
            }
            Function::Pool | Function::Service => {
                unreachable!("the pool and service functions have their own loops")
            }
        }
        Ok((r, Vec::new()))
    }
}

/// Chunk size of the pool function: the page size, at least 2 MiB.
fn pool_chunk(kind: PageKind) -> usize {
    kind.page_size().max(2 << 20)
}

/// The `pool` function: a pool holding `size` bytes, prefilled (populated and
/// zero); each loop takes all of it as zeroed chunks (timed), gives it back,
/// and waits, untimed, for the scrubber to zero it again.
fn pool_loops(size: usize, kind: PageKind, loops: usize) -> Result<Vec<f64>> {
    let chunk = pool_chunk(kind);
    let n = size.div_ceil(chunk);
    let pool = prezero::Pool::builder()
        .backing(kind)
        .chunk_size(chunk)
        .capacity(n * chunk)
        .prefill(n)
        .hot_window(0)
        .build()?;
    let mut samples = Vec::with_capacity(loops);
    for _ in 0..loops {
        let t = Instant::now();
        let held = (0..n)
            .map(|_| pool.alloc_zeroed())
            .collect::<prezero::Result<Vec<_>>>()?;
        let d = t.elapsed();
        drop(held);
        samples.push(gbps(n * chunk, d));
        wait_scrubbed(&pool, n, Duration::from_secs(60));
    }
    Ok(samples)
}

/// The `service` function: a `prezero serve` holding `size` bytes ready; each
/// loop asks for all of it (mapped and populated into one range), writes one
/// byte per page as `demand` does (timed), gives it back, and waits, untimed,
/// for the daemon to scrub it.
fn service_loops(
    size: usize,
    kind: PageKind,
    loops: usize,
    socket: Option<&std::path::Path>,
    reserve: bool,
) -> Result<Vec<f64>> {
    if !kind.is_hugetlb() {
        bail!("-f service: page {kind}: the service serves 2MB or 1GB pages");
    }
    let daemon = Daemon::open(socket, kind, size, reserve)?;
    let c = &daemon.client;
    let mut samples = Vec::with_capacity(loops);
    for _ in 0..loops {
        let ready = wait_ready(c, kind, size)?;
        if ready < size {
            let log = daemon.log();
            bail!(
                "-f service: the service has {} ready, {} needed (rerun with --reserve, or reserve more hugetlb pages){log}",
                fmt_size(ready),
                fmt_size(size)
            );
        }
        let t = Instant::now();
        let mut m = alloc(c, size, kind)?;
        touch_pages(m.as_mut_slice(), kind.page_size(), 1);
        let d = t.elapsed();
        drop(m);
        samples.push(gbps(size, d));
    }
    Ok(samples)
}

/// Every page of each part of `r` (what `prefault_on_nodes` made) is on its
/// node: a figure for memory on the wrong node is no figure.
fn check_placed(r: &Region, parts: &[NodePart]) -> Result<()> {
    for part in parts {
        // SAFETY: the part lies inside the region.
        let at = unsafe { r.as_ptr().add(part.offset) };
        let p = prezero::numa::placement(at, part.len, r.kind().page_size())?;
        if !p.all_on(part.node) {
            bail!(
                "populate-parallel --nodes: the part for node {} is not all there: {:?} pages per node, {} absent",
                part.node, p.on, p.absent
            );
        }
    }
    Ok(())
}

/// Demand faults one write per page; THP regions are touched per base page so
/// that any part the kernel could not back with a huge page is faulted too.
fn touch_stride(kind: PageKind) -> usize {
    match kind {
        PageKind::Thp => PageKind::Base.page_size(),
        k => k.page_size(),
    }
}

pub fn run(args: &Args) -> Result<()> {
    let size = parse_size(&args.size)?;
    let kinds = args
        .pages
        .iter()
        .map(|p| p.parse::<PageKind>())
        .collect::<Result<Vec<_>, _>>()?;
    let functions = if args.functions.is_empty() {
        Function::ALL[..4].to_vec()
    } else {
        args.functions
                .iter()
                .map(|n| {
                    Function::ALL.into_iter().find(|f| f.name() == n).with_context(|| {
                    format!("unknown function '{n}' (known: demand, populate, populate-parallel, pool, service)")
                })
                })
                .collect::<Result<Vec<_>, _>>()?
    };
    if args.loops == 0 {
        bail!("--nr_loops must be at least 1");
    }
    let threads = args.threads.unwrap_or(prezero::cpu().logical_cpus);
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    let host = if args.host_cold.is_some() {
        "cold"
    } else {
        "warm"
    };
    for kind in kinds {
        let size = size.next_multiple_of(kind.page_size());
        let _reservation = hugetlb_for_run(kind, size, args.reserve)?;
        if !args.json {
            println!(
                "# Running 'mem/mmap' benchmark: page {kind}, {} per loop, {} loops, host-{host}",
                fmt_size(size),
                args.loops
            );
        }
        if args.host_cold.is_none() {
            // Host-warm: make sure the guest's memory is backed by the host before timing.
            drop(Function::PopulateParallel.map_and_populate(size, kind, threads, &args.nodes)?);
        }
        for &f in &functions {
            let mut samples = Vec::with_capacity(args.loops);
            if f == Function::Pool {
                samples = pool_loops(size, kind, args.loops)?;
            }
            if f == Function::Service {
                samples =
                    service_loops(size, kind, args.loops, args.socket.as_deref(), args.reserve)?;
            }
            while samples.len() < args.loops {
                if let Some(secs) = args.host_cold {
                    std::thread::sleep(Duration::from_secs(secs));
                }
                let t = Instant::now();
                let (r, parts) = f.map_and_populate(size, kind, threads, &args.nodes)?;
                let d = t.elapsed();
                check_placed(&r, &parts)?;
                drop(r);
                samples.push(gbps(size, d));
            }
            let s = Stats::of(&samples);
            if args.json {
                Row::Mmap(rows::Mmap {
                    page: kind.name().to_string(),
                    function: f.name().to_string(),
                    threads: f.threads(threads) as u64,
                    size: size as u64,
                    gbps: round2(s.mean),
                    stdev_pct: round2(s.stdev_pct),
                    host: host.to_string(),
                    nodes: (f == Function::PopulateParallel && !args.nodes.is_empty())
                        .then(|| args.nodes.clone()),
                })
                .print();
            } else {
                println!("# function '{}' ({})", f.name(), f.description());
                println!("# Copying {} bytes ...\n", fmt_size(size));
                println!("   {:>8.2} GB/sec +- {:.2}%\n", s.mean, s.stdev_pct);
            }
        }
    }
    Ok(())
}
