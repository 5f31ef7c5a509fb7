//! `prezero bench faults`: the fault-rate table of Linux's "Prezeroing V2". Rows by threads (each faulting its
//! own part) and by cache lines touched per 4 KiB, for fresh kernel pages (mmap
//! and touch: the kernel zeroes each page at its fault) against memory prezero
//! keeps mapped and clears itself before each pass.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use prezero::{PageKind, Region};

use super::hugetlb::hugetlb_for_run;
use super::memory::touch_lines;
use crate::rows;
use crate::table::Table;
use crate::units::{fmt_size, parse_size};

#[derive(clap::Args)]
pub struct Args {
    /// Bytes per pass (K/M/G suffixes).
    #[arg(short = 's', long = "size", default_value = "1G")]
    size: String,
    /// Passes per row (the seed's Rep).
    #[arg(short = 'r', long = "reps", default_value_t = 3)]
    reps: usize,
    /// Page kinds, comma-separated: 4KB, thp, 2MB (hugetlb), 1GB (hugetlb).
    #[arg(
        short = 'p',
        long = "page",
        value_delimiter = ',',
        default_value = "4KB,thp"
    )]
    pages: Vec<String>,
    /// Reserve hugetlb pages for the run (restored afterwards). Needs root.
    #[arg(long)]
    reserve: bool,
    /// One JSON object per row.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Source {
    /// mmap + touch: the kernel zeroes each page in its fault handler.
    Kernel,
    /// A region kept mapped; each thread clears its part with prezero, then touches.
    Prezero,
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Source::Kernel => "kernel",
            Source::Prezero => "prezero",
        }
    }
}

struct Row {
    threads: usize,
    lines: usize,
    user: Duration,
    system: Duration,
    wall: Duration,
    faults: usize,
}

pub fn run(args: &Args) -> Result<()> {
    let size = parse_size(&args.size)?;
    if args.reps == 0 {
        bail!("--reps must be at least 1");
    }
    let nproc = prezero::cpu().logical_cpus;
    for kind_name in &args.pages {
        let kind: PageKind = kind_name.parse()?;
        let size = size.next_multiple_of(kind.page_size());
        let _reservation = hugetlb_for_run(kind, size, args.reserve)?;
        let mut rows: Vec<(usize, usize)> = (1..=nproc).map(|t| (t, 1)).collect();
        rows.extend((1..=6).map(|s| (1, 1usize << s)));
        for source in [Source::Kernel, Source::Prezero] {
            if !args.json {
                println!(
                    "\n# faults: {} pages, {} ({}), lines touched per 4 KiB",
                    kind,
                    source.name(),
                    match source {
                        Source::Kernel => "mmap + touch: zeroed by the kernel at each fault",
                        Source::Prezero => "kept mapped, cleared by prezero::clear, then touched",
                    }
                );
                // Prezeroing V2's header as it printed it: over the rows' columns,
                // its labels left of the units.
                println!("  Gb Rep Threads CLine   User    System   Wall  flt/cpu/s  fault/wsec");
            }
            let mut kept = match source {
                Source::Prezero => {
                    let r = Region::new(size, kind)?;
                    prezero::prefault(&r, nproc)?;
                    Some(r)
                }
                Source::Kernel => None,
            };
            // One untimed pass, so the host has backed the memory (a VM's first touch).
            measure(source, kind, size, 1, nproc, 1, kept.as_mut())?;
            for &(threads, lines) in &rows {
                let r = measure(source, kind, size, args.reps, threads, lines, kept.as_mut())?;
                print_row(args.json, kind, source, size, args.reps, &r);
            }
        }
    }
    Ok(())
}

fn cpu_times() -> (Duration, Duration) {
    // RUSAGE_SELF: every thread's.
    let ru = prezero_sys::own_usage();
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// `reps` passes over `size` bytes with `threads` threads each touching `lines`
/// cache lines of every 4 KiB of its part.
fn measure(
    source: Source,
    kind: PageKind,
    size: usize,
    reps: usize,
    threads: usize,
    lines: usize,
    mut kept: Option<&mut Region>,
) -> Result<Row> {
    let (u0, s0) = cpu_times();
    let mut wall = Duration::ZERO;
    for _ in 0..reps {
        let mut fresh;
        let t = Instant::now();
        let buf = match (source, kept.as_deref_mut()) {
            (Source::Prezero, Some(r)) => r.as_mut_slice(),
            _ => {
                fresh = Region::new(size, kind)?;
                fresh.as_mut_slice()
            }
        };
        let part = (buf.len() / threads).next_multiple_of(kind.page_size());
        std::thread::scope(|s| {
            for chunk in buf.chunks_mut(part) {
                s.spawn(move || {
                    if source == Source::Prezero {
                        prezero::clear(chunk);
                    }
                    touch_lines(chunk, lines);
                });
            }
        });
        wall += t.elapsed();
    }
    let (u1, s1) = cpu_times();
    Ok(Row {
        threads,
        lines,
        user: u1 - u0,
        system: s1 - s0,
        wall,
        faults: reps * size / kind.page_size(),
    })
}

fn print_row(as_json: bool, kind: PageKind, source: Source, size: usize, reps: usize, r: &Row) {
    let cpu = (r.user + r.system).as_secs_f64().max(1e-9);
    let flt_cpu = r.faults as f64 / cpu;
    let flt_wall = r.faults as f64 / r.wall.as_secs_f64().max(1e-9);
    if as_json {
        rows::Row::Faults(rows::Faults {
            page: kind.name().to_string(),
            source: source.name().to_string(),
            size: size as u64,
            reps: reps as u64,
            threads: r.threads as u64,
            lines: r.lines as u64,
            user_s: r.user.as_secs_f64(),
            system_s: r.system.as_secs_f64(),
            wall_s: r.wall.as_secs_f64(),
            faults: r.faults as u64,
            flt_per_cpu_s: flt_cpu.round(),
            faults_per_wall_s: flt_wall.round(),
            gbps: (reps * size) as f64 / r.wall.as_secs_f64().max(1e-9) / 1e9,
        })
        .print();
    } else {
        let table = Table::new(" ")
            .right(4)
            .right(3)
            .right(7)
            .right(5)
            .right(7)
            .right(8)
            .right(7)
            .right(10)
            .right(11);
        let secs = |d: Duration| format!("{:.3}s", d.as_secs_f64());
        table.print(&[
            fmt_size(size),
            reps.to_string(),
            r.threads.to_string(),
            r.lines.to_string(),
            secs(r.user),
            secs(r.system),
            secs(r.wall),
            format!("{flt_cpu:.0}"),
            format!("{flt_wall:.0}"),
        ]);
    }
}
