//! `prezero calibrate`: measure this machine and write the profile Auto follows.
//!
//! Per size class and temperature the fastest kernel; the elision knee of
//! `rep stos` (as Linux's huge-page clearing found on AMD Zen); the smallest
//! `clear_bounded` chunk that keeps within 10% of a full-extent clear; scaling with threads; and whether
//! streaming beats temporal stores for the pool's scrubber; and for template
//! fills, the streaming and temporal kernels and the size from which to
//! stream. Every figure the profile was derived from is stored with it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use prezero::profile::{self, ProfileFile, Scrubber, ThreadFigure};
use prezero::{
    CopyKernel, Kernel, SizeClass, SizeClasses, Temperature, TemplateChoice, MAX_CLASSES,
    PROFILE_FORMAT,
};

use crate::bench::clear::{collect, Figure, Method};
use crate::bench::template::{store_study, StoreFigure, STORE_SIZES};
use crate::stats::{round2, Stats};
use crate::units::{fmt_size, human_size, parse_size, parse_sizes};

const SIZES: &str = "512,2K,4K,64K,1M,2M,8M,32M,64M,256M,1G";

#[derive(clap::Args)]
pub struct Args {
    /// Where to write the profile (default: $XDG_CONFIG_HOME/prezero/profile.json).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Re-measure and report where the stored profile is off by more than 10%.
    #[arg(long)]
    check: bool,
    /// Size classes to measure (fewer: faster, coarser).
    #[arg(long, value_delimiter = ',', default_value = SIZES)]
    sizes: Vec<String>,
    /// Repetitions per figure.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Extent of the thread-scaling clears (the chunk study uses a quarter of
    /// it) and the largest template fill measured.
    #[arg(long, default_value = "1G")]
    large: String,
}

pub fn run(args: &Args) -> Result<()> {
    let path = match &args.out {
        Some(p) => p.clone(),
        None => profile::default_path().context("no HOME or XDG_CONFIG_HOME: pass --out PATH")?,
    };
    let sizes = parse_sizes(&args.sizes)?;
    if !args.check {
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        crate::output::check_writable(&path, "the profile")?;
    }
    let started = Instant::now();
    let large = parse_size(&args.large)?;
    let measured = measure(&sizes, args.reps, large)?;
    if args.check {
        return check(&path, &measured);
    }
    let (file, template) = derive(&measured);
    std::fs::write(&path, file.to_json())
        .with_context(|| format!("cannot write the profile {}", path.display()))?;
    summarise(&file, &template);
    println!(
        "wrote {} in {:.1} s",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Everything calibration measures.
struct Measurements {
    kernels: Vec<Kernel>,
    figures: Vec<Figure>,
    /// Cold 256 MiB clears: full extent and in chunks, per kernel.
    chunks: Vec<Figure>,
    /// Cold clears of the large extent with 1..=nproc threads.
    threads: Vec<Figure>,
    /// The extent of the chunk study.
    chunk_extent: usize,
    /// `template_fill_words` by kernel, size, hot and cold.
    template: Vec<StoreFigure>,
}

const CHUNKS: [usize; 6] = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20];

fn measure(sizes: &[usize], reps: usize, large: usize) -> Result<Measurements> {
    let chunk_extent = (large / 4).max(64 << 10);
    let kernels: Vec<Kernel> = Kernel::available().collect();
    let methods: Vec<Method> = kernels.iter().map(|&k| Method::Kernel(k)).collect();
    let figures = collect(&["hot", "cold"], sizes, &methods, reps, |_| ())?;
    let extent_kernels = contenders_at_largest(&figures, &kernels);
    let mut chunk_methods: Vec<Method> =
        extent_kernels.iter().map(|&k| Method::Kernel(k)).collect();
    for &k in &extent_kernels {
        chunk_methods.extend(CHUNKS.iter().map(|&c| Method::Chunks(k, c)));
    }
    let chunk_methods: Vec<Method> = chunk_methods
        .into_iter()
        .filter(|m| !matches!(m, Method::Chunks(_, c) if *c >= chunk_extent))
        .collect();
    let chunks = collect(&["cold"], &[chunk_extent], &chunk_methods, reps, |_| ())?;
    let thread_methods: Vec<Method> = (1..=prezero::cpu().logical_cpus)
        .map(Method::Parallel)
        .collect();
    let threads = collect(&["cold"], &[large], &thread_methods, reps, |_| ())?;
    let store_sizes: Vec<usize> = parse_sizes(STORE_SIZES.split(','))?
        .into_iter()
        .filter(|&s| s <= large)
        .collect();
    let template = store_study(&store_sizes, reps)?;
    Ok(Measurements {
        kernels,
        figures,
        chunks,
        threads,
        chunk_extent,
        template,
    })
}

/// The kernels a large cold clear would use: within 20% of the fastest on the
/// largest cold extent measured. Named by measurement, not by instruction set,
/// so `clzero` or `movnti` are studied wherever they keep up.
fn contenders_at_largest(figures: &[Figure], kernels: &[Kernel]) -> Vec<Kernel> {
    let largest = figures.iter().map(|f| f.size).max().unwrap_or(0);
    let at = |k: Kernel| median(figures, "cold", largest, Method::Kernel(k));
    let best = kernels.iter().map(|&k| at(k)).fold(0.0, f64::max);
    kernels
        .iter()
        .copied()
        .filter(|&k| at(k) >= 0.8 * best)
        .collect()
}

fn median(figs: &[Figure], mode: &str, size: usize, m: Method) -> f64 {
    figs.iter()
        .find(|f| f.mode == mode && f.size == size && f.method == m)
        .map_or(0.0, |f| f.stats.median)
}

/// The best kernel per size for `mode`. For "unknown" the built-in classes'
/// assumption holds (a buffer smaller than L2 is hot, a larger one cold), with
/// the winners measured here, so a profile never guesses worse than the defaults.
fn best_per_size(m: &Measurements, mode: &str, sizes: &[usize]) -> Vec<Kernel> {
    let builtin = prezero::SizeClasses::builtin(prezero::cpu());
    let temp = match mode {
        "hot" => Temperature::Hot,
        "cold" => Temperature::Cold,
        _ => Temperature::Unknown,
    };
    let mut prev: Option<Kernel> = None;
    sizes
        .iter()
        .map(|&size| {
            let score = |k: Kernel| -> f64 {
                let ratio = |md: &str| {
                    let best = m
                        .kernels
                        .iter()
                        .map(|&b| median(&m.figures, md, size, Method::Kernel(b)))
                        .fold(0.0, f64::max);
                    median(&m.figures, md, size, Method::Kernel(k)) / best.max(1e-9)
                };
                match mode {
                    "unknown" if size < prezero::cpu().l2() => ratio("hot"),
                    "unknown" => ratio("cold"),
                    md => ratio(md),
                }
            };
            let best = m.kernels.iter().map(|&k| score(k)).fold(0.0, f64::max);
            // Kernels within 3% of the best are ties on this noisy a machine: keep
            // the previous size's choice, else the built-in one, so that noise
            // does not cut the sizes into needless classes.
            let tied = |k: &Kernel| score(*k) >= 0.97 * best;
            let builtin_k = builtin.kernel_for(size, temp);
            let k = prev
                .filter(tied)
                .or(Some(builtin_k).filter(|k| m.kernels.contains(k) && tied(k)))
                .unwrap_or_else(|| {
                    *m.kernels
                        .iter()
                        .max_by(|a, b| score(**a).total_cmp(&score(**b)))
                        .expect("a kernel")
                });
            prev = Some(k);
            k
        })
        .collect()
}

/// Size classes from per-size winners: boundaries halfway (geometrically)
/// between measured sizes, neighbours with the same kernel merged, at most
/// MAX_CLASSES (the smallest classes merged first).
fn classes(sizes: &[usize], winners: &[Kernel]) -> Vec<(Option<usize>, Kernel)> {
    let mut out: Vec<(Option<usize>, Kernel)> = Vec::new();
    for (i, &k) in winners.iter().enumerate() {
        let below = sizes
            .get(i + 1)
            .map(|&next| ((sizes[i] as f64 * next as f64).sqrt()) as usize);
        match out.last_mut() {
            Some(last) if last.1 == k => last.0 = below,
            _ => out.push((below, k)),
        }
    }
    while out.len() > MAX_CLASSES {
        out.remove(0);
    }
    out
}

/// The classes as the profile holds them: the last one's bound is `usize::MAX`.
fn size_classes(c: &[(Option<usize>, Kernel)]) -> Vec<SizeClass> {
    c.iter()
        .map(|&(below, kernel)| SizeClass {
            below: below.unwrap_or(usize::MAX),
            kernel,
        })
        .collect()
}

/// A figure as the profile file keeps it.
fn file_figure(mode: &str, size: usize, method: String, stats: &Stats) -> profile::Figure {
    profile::Figure {
        mode: mode.into(),
        size,
        method,
        gbps_median: round2(stats.median),
        stdev_pct: round2(stats.stdev_pct),
    }
}

/// The profile file, and the template choice in it.
fn derive(m: &Measurements) -> (ProfileFile, TemplateChoice) {
    let mut sizes: Vec<usize> = m.figures.iter().map(|f| f.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let classes_for =
        |t: Temperature| size_classes(&classes(&sizes, &best_per_size(m, t.name(), &sizes)));
    let size_classes = SizeClasses {
        unknown: classes_for(Temperature::Unknown),
        hot: classes_for(Temperature::Hot),
        cold: classes_for(Temperature::Cold),
    };
    let knees = elision_knees(m, &sizes);
    let bounded = bounded_min_chunks(m);
    let threads: Vec<ThreadFigure> = m
        .threads
        .iter()
        .filter_map(|f| match f.method {
            Method::Parallel(n) => Some(ThreadFigure {
                threads: n,
                gbps: round2(f.stats.median),
            }),
            _ => None,
        })
        .collect();
    // The scrubber's question: on cold 2 MiB chunks, do streaming stores win?
    let at = |streaming: bool| {
        m.kernels
            .iter()
            .filter(|k| k.is_streaming() == streaming)
            .map(|&k| median(&m.figures, "cold", 2 << 20, Method::Kernel(k)))
            .fold(0.0, f64::max)
    };
    let cpu = prezero::cpu();
    let (template, template_figures) = derive_template(&m.template);
    let file = ProfileFile {
        format: PROFILE_FORMAT,
        cpu_model: cpu.model_name.clone(),
        cpu_id: cpu.identity(),
        date: utc_now(),
        classes: size_classes.to_rows(),
        template: Some(template.to_row()),
        measured: profile::Measured {
            microcode: prezero_sys::cpuinfo_field("microcode"),
            kernel_release: Some(prezero::memory().kernel_release),
            elision_knee: knees,
            bounded_min_chunk: bounded,
            threads,
            scrubber: Some(Scrubber {
                streaming_gbps: round2(at(true)),
                temporal_gbps: round2(at(false)),
                streaming_wins: at(true) >= at(false),
            }),
            figures: m
                .figures
                .iter()
                .chain(&m.chunks)
                .chain(&m.threads)
                .map(|f| file_figure(f.mode, f.size, f.method.name(), &f.stats))
                .collect(),
            template_figures,
        },
    };
    (file, template)
}

/// The elision knee of each temporal kernel: the smallest extent (from 1 MiB)
/// from which it keeps within 20% of the best streaming kernel on cold
/// memory, i.e. it no longer reads each line before writing it (seeds
/// 001/002: `rep stos` on AMD Zen above ~LLC size).
fn elision_knees(m: &Measurements, sizes: &[usize]) -> BTreeMap<String, Option<usize>> {
    let stream = |size: usize| {
        m.kernels
            .iter()
            .filter(|k| k.is_streaming())
            .map(|&k| median(&m.figures, "cold", size, Method::Kernel(k)))
            .fold(0.0, f64::max)
    };
    let big: Vec<usize> = sizes.iter().copied().filter(|&s| s >= 1 << 20).collect();
    m.kernels
        .iter()
        .filter(|k| !k.is_streaming())
        .map(|&k| {
            let keeps_up = |s: usize| {
                stream(s) > 0.0
                    && median(&m.figures, "cold", s, Method::Kernel(k)) >= 0.8 * stream(s)
            };
            let knee = big
                .iter()
                .copied()
                .find(|&s| big.iter().filter(|&&t| t >= s).all(|&t| keeps_up(t)));
            (k.name().to_string(), knee)
        })
        .collect()
}

/// The smallest chunk of each kernel's bounded form that keeps 90% of its
/// speed over the whole extent, on cold memory.
fn bounded_min_chunks(m: &Measurements) -> BTreeMap<String, Option<usize>> {
    m.chunks
        .iter()
        .filter_map(|f| match f.method {
            Method::Kernel(k) => Some(k),
            _ => None,
        })
        .map(|k| {
            let full = median(&m.chunks, "cold", m.chunk_extent, Method::Kernel(k));
            let min = CHUNKS.iter().copied().find(|&c| {
                median(&m.chunks, "cold", m.chunk_extent, Method::Chunks(k, c)) >= 0.9 * full
            });
            (k.name().to_string(), min)
        })
        .collect()
}

/// The template choice: the streaming kernel fastest on the largest cold
/// fill, the temporal kernel fastest on hot fills that fit in cache, and
/// streaming from the smallest size past which streaming loses less in its
/// worse case (hot or cold) at every size measured: a fill does not say
/// whether its destination is cached. Kernels within 3% are ties, and a tie
/// keeps the built-in choice. With it, the figures it was made from.
fn derive_template(figs: &[StoreFigure]) -> (TemplateChoice, Vec<profile::Figure>) {
    let builtin = TemplateChoice::builtin(prezero::cpu());
    let mut sizes: Vec<usize> = figs.iter().map(|f| f.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let g = |k: CopyKernel, mode: &str, size: usize| {
        figs.iter()
            .find(|f| f.kernel == k && f.mode == mode && f.size == size)
            .map_or(0.0, |f| f.stats.median)
    };
    let kernels: Vec<CopyKernel> = {
        let mut v: Vec<CopyKernel> = figs.iter().map(|f| f.kernel).collect();
        v.sort_by_key(|k| CopyKernel::ALL.iter().position(|a| a == k));
        v.dedup();
        v
    };
    let pick = |streaming: bool, score: &dyn Fn(CopyKernel) -> f64, builtin_k: CopyKernel| {
        let of_kind = kernels
            .iter()
            .copied()
            .filter(|k| k.is_streaming() == streaming);
        let best = of_kind.clone().map(score).fold(0.0, f64::max);
        if kernels.contains(&builtin_k) && score(builtin_k) >= 0.97 * best {
            return builtin_k;
        }
        of_kind
            .max_by(|a, b| score(*a).total_cmp(&score(*b)))
            .unwrap_or(builtin_k)
    };
    let largest = sizes.last().copied().unwrap_or(0);
    let stream = pick(true, &|k| g(k, "cold", largest), builtin.stream);
    let cached: Vec<usize> = sizes
        .iter()
        .copied()
        .filter(|&s| s < prezero::cpu().hot_capacity())
        .collect();
    let temporal = pick(
        false,
        &|k| {
            // Geometric mean over the hot fills that fit in cache.
            let logs: f64 = cached.iter().map(|&s| g(k, "hot", s).max(1e-9).ln()).sum();
            (logs / cached.len().max(1) as f64).exp()
        },
        builtin.temporal,
    );
    // Worse-case loss of kernel k at `size`: its time over the fastest's, hot or cold.
    let regret = |k: CopyKernel, size: usize| {
        ["hot", "cold"]
            .iter()
            .map(|&mode| {
                let best = kernels
                    .iter()
                    .map(|&b| g(b, mode, size))
                    .fold(0.0, f64::max);
                best / g(k, mode, size).max(1e-9)
            })
            .fold(1.0, f64::max)
    };
    let streams_at: Vec<bool> = sizes
        .iter()
        .map(|&size| {
            let (rs, rt) = (regret(stream, size), regret(temporal, size));
            if (rs - rt).abs() <= 0.03 * rs.min(rt) {
                size >= builtin.stream_from
            } else {
                rs < rt
            }
        })
        .collect();
    let from = (0..sizes.len())
        .find(|&i| streams_at[i..].iter().all(|&b| b))
        .map(|i| match i {
            0 => sizes[0],
            // Halfway (geometrically) between the last temporal and first streaming size.
            _ => ((sizes[i - 1] as f64 * sizes[i] as f64).sqrt()) as usize,
        });
    let figures = figs
        .iter()
        .map(|f| file_figure(f.mode, f.size, f.kernel.name().into(), &f.stats))
        .collect();
    let choice = TemplateChoice {
        stream,
        temporal,
        stream_from: from.unwrap_or(usize::MAX),
    };
    (choice, figures)
}

fn summarise(p: &ProfileFile, template: &TemplateChoice) {
    println!("profile for {}", p.cpu_model);
    for (name, rows) in p.classes.by_name() {
        let cls: Vec<String> = rows
            .iter()
            .map(|c| match c.below {
                None => format!("rest {}", c.kernel),
                // Class bounds lie between measured sizes (47453132): 3 figures.
                Some(b) => format!("<{} {}", human_size(b), c.kernel),
            })
            .collect();
        println!("  {name:<8} {}", cls.join(", "));
    }
    let m = &p.measured;
    for (k, v) in &m.elision_knee {
        match v {
            Some(knee) => println!(
                "  elision knee of {k}: {} (cold {k} keeps up with streaming stores from there)",
                fmt_size(*knee)
            ),
            None => println!("  elision knee of {k}: none (cold {k} stays below streaming stores at every extent)"),
        }
    }
    for (k, v) in &m.bounded_min_chunk {
        match v {
            Some(c) => println!(
                "  clear_bounded with {k}: chunks of {} keep within 10% of the full extent",
                fmt_size(*c)
            ),
            None => println!("  clear_bounded with {k}: no chunk size up to 64M keeps within 10%"),
        }
    }
    // GB/s with `{:?}`, as the file has them (20.0, not 20).
    let t: Vec<String> = m
        .threads
        .iter()
        .map(|t| format!("{}: {:?} GB/s", t.threads, t.gbps))
        .collect();
    println!("  cold large clears by threads: {}", t.join(", "));
    if let Some(s) = m.scrubber {
        println!(
            "  scrubber: streaming {:?} GB/s vs temporal {:?} GB/s on cold 2 MiB",
            s.streaming_gbps, s.temporal_gbps
        );
    }
    println!(
        "  template fills: {}",
        crate::info::template_choice(template)
    );
}

fn check(path: &std::path::Path, m: &Measurements) -> Result<()> {
    let stored =
        ProfileFile::read(path).with_context(|| format!("the profile {}", path.display()))?;
    let here = prezero::cpu().identity();
    if stored.cpu_id != here {
        bail!(
            "{} was measured on \"{}\", this CPU is {here}: nothing to compare (run calibrate without --check)",
            path.display(),
            stored.cpu_id
        );
    }
    let mut off = 0;
    let mut compared = 0;
    for f in m.figures.iter().chain(&m.chunks).chain(&m.threads) {
        let Some(old) = stored
            .measured
            .figures
            .iter()
            .find(|o| o.mode == f.mode && o.size == f.size && o.method == f.method.name())
        else {
            continue;
        };
        compared += 1;
        let was = old.gbps_median;
        let ratio = f.stats.median / was.max(1e-9);
        if !(0.9..=1.1).contains(&ratio) {
            off += 1;
            println!(
                "{:<5} {:>6} {:<18} stored {:>7.2} GB/s, now {:>7.2} GB/s ({:+.0}%)",
                f.mode,
                fmt_size(f.size),
                f.method.name(),
                was,
                f.stats.median,
                (ratio - 1.0) * 100.0
            );
        }
    }
    println!(
        "{off} of {compared} figures are off by more than 10% from {}",
        path.display()
    );
    Ok(())
}

/// Now as an ISO 8601 UTC timestamp (civil-from-days, no calendar crate needed).
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_merge_and_split_between_sizes() {
        let sizes = [4096, 65536, 1 << 20, 1 << 30];
        let w = [
            Kernel::Avx512,
            Kernel::Avx512,
            Kernel::RepStosb,
            Kernel::Avx512Stream,
        ];
        let c = classes(&sizes, &w);
        assert_eq!(c.len(), 3);
        assert_eq!(c[0], (Some(262_144), Kernel::Avx512));
        assert_eq!(c[2], (None, Kernel::Avx512Stream));
    }

    #[test]
    fn utc_dates() {
        let d = utc_now();
        assert_eq!(d.len(), 20);
        assert!(d.starts_with("20") && d.ends_with('Z'));
    }
}
