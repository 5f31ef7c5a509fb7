//! `prezero bench clear`: every strategy beside the baselines (glibc memset,
//! page-at-a-time, the kernel's 8/32 MiB resched batches), hot and cold.
//!
//! hot:  one buffer per size, cleared again and again (it stays in cache if it fits).
//! cold: consecutive slices of a region of at least 8x LLC, so each clear meets
//!       memory last written long ago. The region is touched once before timing
//!       (a VM's first touch pays a host fault, which is not what is measured),
//!       and every slice not being cleared holds non-zero bytes, so the zero
//!       check after each figure proves the strategy wrote every byte.

use std::ops::ControlFlow;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use prezero::{Kernel, PageKind, Region, Strategy, Temperature};

use super::memory::verify_zero;
use super::progress::Progress;
use crate::rows::{self, Row};
use crate::stats::{gbps, round2, Stats};
use crate::table::Table;
use crate::units::{fmt_size, parse_sizes};

const DEFAULT_SIZES: &str = "4K,64K,1M,2M,8M,32M,64M,256M,1G";
/// Bytes one timed repetition aims to clear (many calls for small sizes), so
/// each repetition lasts milliseconds, far above the clock's resolution.
const REP_BYTES_HOT: usize = 256 << 20;
const REP_BYTES_COLD: usize = 64 << 20;
const DIRTY: u8 = 0xa5;

#[derive(clap::Args)]
pub struct Args {
    /// hot, cold or both.
    #[arg(long, default_value = "both", value_parser = ["hot", "cold", "both"])]
    mode: String,
    /// Sizes to measure, comma-separated (K/M/G suffixes).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_SIZES)]
    sizes: Vec<String>,
    /// Strategies to measure (default: every available one plus the baselines).
    #[arg(long, value_delimiter = ',')]
    strategies: Vec<String>,
    /// Timed repetitions per figure (after one warm-up).
    #[arg(long, default_value_t = 7)]
    reps: usize,
    /// One JSON object per figure instead of tables.
    #[arg(long)]
    json: bool,
}

/// One way of clearing a buffer, as the benchmark names it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Method {
    /// Auto, told the mode's temperature.
    Auto,
    /// Auto, told nothing (plain `prezero::clear`).
    AutoPlain,
    Kernel(Kernel),
    /// glibc memset through libc.
    Memset,
    /// One 4 KiB call per page: a kernel without extent clearing.
    PageAtATime,
    /// A kernel in chunks of this many bytes (`Kernel::os_baseline` in 8/32
    /// MiB: Linux's resched batches).
    Chunks(Kernel, usize),
    /// `clear_bounded` (Auto, told the temperature) with 1 MiB chunks.
    Bounded1M,
    /// `clear_parallel` (Auto, told the temperature) over this many threads.
    Parallel(usize),
}

impl Method {
    pub(crate) fn name(self) -> String {
        match self {
            Method::Auto => "auto".into(),
            Method::AutoPlain => "auto-plain".into(),
            Method::Kernel(k) => k.name().into(),
            Method::Memset => "memset".into(),
            Method::PageAtATime => "page-at-a-time".into(),
            Method::Chunks(k, n) => format!("{}-{}", k.name(), fmt_size(n).to_lowercase()),
            Method::Bounded1M => "bounded-1m".into(),
            Method::Parallel(n) if n == prezero::cpu().logical_cpus => "parallel".into(),
            Method::Parallel(n) => format!("parallel-{n}"),
        }
    }

    /// Single-thread strategies are the ones Auto is held against.
    fn single_thread(self) -> bool {
        !matches!(self, Method::Parallel(_))
    }

    pub(crate) fn all() -> Vec<Method> {
        let mut v = vec![Method::Auto, Method::AutoPlain];
        v.extend(Kernel::available().map(Method::Kernel));
        v.push(Method::Memset);
        v.push(Method::PageAtATime);
        let os = Kernel::os_baseline();
        if os != Kernel::Portable {
            v.push(Method::Chunks(os, 8 << 20));
            v.push(Method::Chunks(os, 32 << 20));
        }
        v.push(Method::Bounded1M);
        v.push(Method::Parallel(prezero::cpu().logical_cpus));
        v
    }

    fn run(self, buf: &mut [u8], temp: Temperature) {
        let page_kernel = Kernel::os_baseline();
        let r = match self {
            Method::Auto => prezero::clear_with(buf, temp),
            Method::AutoPlain => {
                prezero::clear(buf);
                Ok(())
            }
            Method::Kernel(k) => prezero::clear_with(buf, k),
            Method::Memset => {
                // SAFETY: `buf` is a valid, exclusively borrowed slice.
                unsafe { libc::memset(buf.as_mut_ptr().cast(), 0, buf.len()) };
                Ok(())
            }
            Method::PageAtATime => chunked(buf, page_kernel.into(), 4096),
            Method::Chunks(k, n) => chunked(buf, k.into(), n),
            Method::Bounded1M => chunked(buf, temp.into(), 1 << 20),
            Method::Parallel(n) => prezero::clear_parallel_with(buf, temp, n),
        };
        r.expect("strategies are only listed when available");
    }
}

fn chunked(buf: &mut [u8], s: Strategy, chunk: usize) -> prezero::Result<()> {
    prezero::clear_bounded_with(buf, s, chunk, |_| ControlFlow::Continue(())).map(drop)
}

fn parse_methods(names: &[String]) -> Result<Vec<Method>> {
    let all = Method::all();
    if names.is_empty() {
        return Ok(all);
    }
    names
        .iter()
        .map(|n| {
            all.iter()
                .copied()
                .find(|m| m.name() == *n)
                .with_context(|| {
                    let known: Vec<_> = all.iter().map(|m| m.name()).collect();
                    format!(
                        "unknown or unavailable strategy '{n}' (here: {})",
                        known.join(", ")
                    )
                })
        })
        .collect()
}

pub(crate) struct Figure {
    pub(crate) mode: &'static str,
    pub(crate) size: usize,
    pub(crate) method: Method,
    pub(crate) stats: Stats,
}

pub fn run(args: &Args) -> Result<()> {
    let sizes = parse_sizes(&args.sizes)?;
    let methods = parse_methods(&args.strategies)?;
    let modes: &[&'static str] = match args.mode.as_str() {
        "hot" => &["hot"],
        "cold" => &["cold"],
        _ => &["hot", "cold"],
    };
    let figures = collect(modes, &sizes, &methods, args.reps, |f| {
        if args.json {
            print_json(f)
        }
    })?;
    if !args.json {
        for &mode in modes {
            print_table(mode, &sizes, &methods, &figures);
        }
    }
    Ok(())
}

/// Measures every method at every size in every mode; `each` sees every figure
/// as soon as it is known.
pub(crate) fn collect(
    modes: &[&'static str],
    sizes: &[usize],
    methods: &[Method],
    reps: usize,
    mut each: impl FnMut(&Figure),
) -> Result<Vec<Figure>> {
    if reps == 0 {
        bail!("--reps must be at least 1");
    }
    warm_up();
    let mut progress = Progress::new((modes.len() * sizes.len() * reps) as u64);
    let mut figures = Vec::new();
    for &mode in modes {
        let mut bench = match mode {
            "hot" => Bench::hot(),
            _ => Bench::cold(sizes)?,
        };
        for &size in sizes {
            bench.prepare(size)?;
            // Repetitions go round the methods, so that every method meets the
            // same drift of this shared machine (clock, neighbours) over time,
            // each round starting one method later: no method always follows
            // the same one (on a 2-vCPU VM the first clear after the 2-thread
            // one ran up to 25% slow, in every round).
            let mut samples = vec![Vec::with_capacity(reps); methods.len()];
            for rep in 0..reps {
                progress.step(format!("{mode} {}", fmt_size(size)));
                for j in 0..methods.len() {
                    let i = (j + rep) % methods.len();
                    samples[i].push(bench.rep(size, methods[i], rep + 1 == reps)?);
                }
            }
            for (&m, s) in methods.iter().zip(&samples) {
                let fig = Figure {
                    mode,
                    size,
                    method: m,
                    stats: Stats::of(s),
                };
                each(&fig);
                figures.push(fig);
            }
        }
    }
    progress.finish();
    Ok(figures)
}

/// Half a second of clearing before the first figure, so the first strategy
/// measured does not pay for the core leaving a low-power state.
fn warm_up() {
    let mut buf = vec![DIRTY; 2 << 20];
    let t = Instant::now();
    while t.elapsed().as_millis() < 500 {
        prezero::clear(&mut buf);
    }
}

/// The cold region of the last cold run, kept for the next one.
static COLD_REGION: std::sync::Mutex<Option<Region>> = std::sync::Mutex::new(None);

/// Where the benchmark's buffers live for one mode.
enum Bench {
    /// One region per size, reused by every method.
    Hot { region: Option<Region> },
    /// One large region, walked slice after slice; `cursor` is the next slice's offset.
    Cold { region: Region, cursor: usize },
}

impl Bench {
    fn hot() -> Bench {
        Bench::Hot { region: None }
    }

    fn cold(sizes: &[usize]) -> Result<Bench> {
        let max = sizes.iter().copied().max().unwrap_or(0);
        let want = (8 * prezero::cpu().llc()).max(4 * max);
        // Touching gigabytes for the first time is slow on a VM (host faults):
        // a later run in this process reuses the region (all of it dirty).
        let cached = COLD_REGION.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(region) = cached.filter(|r| r.len() >= want) {
            return Ok(Bench::Cold { region, cursor: 0 });
        }
        let mut region = Region::new(want, PageKind::Thp)?;
        eprintln!(
            "prezero: cold region {} (8x LLC or 4x the largest size), touching it once",
            fmt_size(region.len())
        );
        region.as_mut_slice().fill(DIRTY);
        Ok(Bench::Cold { region, cursor: 0 })
    }

    fn prepare(&mut self, size: usize) -> Result<()> {
        if let Bench::Hot { region } = self {
            *region = None;
            let mut r = Region::new(size, PageKind::Thp)?;
            r.as_mut_slice().fill(DIRTY);
            *region = Some(r);
        }
        Ok(())
    }

    /// One timed repetition of `m`, in GB/s. Hot: the buffer is first written
    /// with ordinary stores (so it is in cache and non-zero), then cleared
    /// `inner` times; checked zero after the last repetition. Cold: one untimed
    /// clear, then `inner` slices; every slice is checked zero and dirtied again.
    fn rep(&mut self, size: usize, m: Method, last: bool) -> Result<f64> {
        match self {
            Bench::Hot { region } => {
                let r = region.as_mut().expect("prepared");
                let buf = &mut r.as_mut_slice()[..size];
                if last {
                    // Every byte non-zero, so the final check proves every byte written.
                    buf.fill(DIRTY);
                }
                // The previous method may have left the buffer out of cache
                // (streaming stores evict): make it hot, and dirty, first.
                make_hot(buf);
                let inner = (REP_BYTES_HOT / size).max(1);
                let t = Instant::now();
                for _ in 0..inner {
                    m.run(buf, Temperature::Hot);
                }
                let g = gbps(size * inner, t.elapsed());
                if last {
                    verify_zero(buf, &format!("hot {} {}", fmt_size(size), m.name()))?;
                }
                Ok(g)
            }
            Bench::Cold { region, cursor } => {
                let slices = region.len() / size;
                let inner = (REP_BYTES_COLD / size).max(1).min(slices - 1);
                let buf = region.as_mut_slice();
                let first = *cursor / size;
                let mut next = first;
                let mut clear_next = |count: usize| {
                    for _ in 0..count {
                        m.run(&mut buf[next * size..][..size], Temperature::Cold);
                        next = (next + 1) % slices;
                    }
                };
                clear_next(1);
                let t = Instant::now();
                clear_next(inner);
                let g = gbps(size * inner, t.elapsed());
                for i in 0..=inner {
                    let s = &mut buf[(first + i) % slices * size..][..size];
                    verify_zero(s, &format!("cold {} {}", fmt_size(size), m.name()))?;
                    s.fill(DIRTY);
                }
                *cursor = next * size;
                Ok(g)
            }
        }
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Bench::Cold { region, .. } = self {
            // Every slice is dirty again (each figure re-dirties what it cleared).
            let r = std::mem::replace(region, Region::new(1, PageKind::Base).expect("one page"));
            *COLD_REGION.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        }
    }
}

/// Writes one non-zero byte per cache line with ordinary stores: every line is
/// then in cache (as far as it fits) and owned, as the caller's data would be.
fn make_hot(buf: &mut [u8]) {
    for line in buf.chunks_mut(64) {
        // SAFETY: `line` is a valid, exclusively borrowed, non-empty slice; the
        // volatile store keeps the compiler from turning the loop into memset.
        unsafe { std::ptr::write_volatile(line.as_mut_ptr(), DIRTY) };
    }
}

fn print_json(f: &Figure) {
    let kernel = matches!(f.method, Method::Auto | Method::AutoPlain).then(|| {
        let temp = match (f.method, f.mode) {
            (Method::AutoPlain, _) => Temperature::Unknown,
            (_, "hot") => Temperature::Hot,
            _ => Temperature::Cold,
        };
        prezero::auto_kernel(f.size, temp).name().to_string()
    });
    Row::Clear(rows::Clear {
        mode: f.mode.to_string(),
        size: f.size as u64,
        strategy: f.method.name(),
        gbps: round2(f.stats.mean),
        stdev_pct: round2(f.stats.stdev_pct),
        median_gbps: round2(f.stats.median),
        kernel,
    })
    .print();
}

fn print_table(mode: &str, sizes: &[usize], methods: &[Method], figs: &[Figure]) {
    let get = |size, m| {
        figs.iter()
            .find(|f| f.mode == mode && f.size == size && f.method == m)
            .map(|f| f.stats)
    };
    println!("\n# bench clear, {mode} — GB/s (mean +- stdev%); auto/best compares medians");
    let table = sizes
        .iter()
        .fold(Table::new("").left(16), |t, _| t.right(14));
    let row = |label: String, cell: &dyn Fn(usize) -> String| {
        let cells: Vec<String> = std::iter::once(label)
            .chain(sizes.iter().map(|&s| cell(s)))
            .collect();
        table.print(&cells);
    };
    row("strategy".into(), &|s| fmt_size(s));
    for &m in methods {
        row(m.name(), &|s| match get(s, m) {
            Some(st) => format!("{:.1} +-{:.0}%", st.mean, st.stdev_pct),
            None => "-".into(),
        });
    }
    // Auto against the best single-thread strategy measured in the same run,
    // by medians: one descheduled repetition on a shared VM moves a mean a lot.
    if methods.contains(&Method::Auto) {
        row("auto/best".into(), &|s| {
            let auto = get(s, Method::Auto).map_or(0.0, |st| st.median);
            let best = methods
                .iter()
                .filter(|m| m.single_thread())
                .filter_map(|&m| get(s, m).map(|st| (st.median, m)))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            match best {
                Some((b, bm)) if b > 0.0 => format!("{:.2} {}", auto / b, short(bm)),
                _ => "-".into(),
            }
        });
        let temp = if mode == "hot" {
            Temperature::Hot
        } else {
            Temperature::Cold
        };
        row("auto runs".into(), &|s| {
            prezero::auto_kernel(s, temp).name().to_string()
        });
    }
}

/// A short label for the best strategy in the ratio row.
fn short(m: Method) -> String {
    let n = m.name();
    n.chars().take(8).collect()
}
