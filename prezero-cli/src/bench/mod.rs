//! `prezero bench ...`: which bench runs. Each lives in its own module; what
//! several share lives beside them: `rows` (the rows each prints with
//! `--json`, which the report reads back: a file per bench), `daemon` (the
//! `prezero serve` a bench talks to), `hugetlb` (pages for a run), `memory`
//! (touching and checking it), `progress`; statistics in `crate::stats`,
//! tables in `crate::table`.

use anyhow::Result;

mod all;
pub(crate) mod clear;
mod compare;
mod daemon;
mod faults;
mod hugetlb;
mod memory;
mod mmap;
mod pool;
mod programs;
mod progress;
mod run;
mod service;
pub(crate) mod template;

#[derive(clap::Subcommand)]
pub enum Which {
    /// GB/s by size x strategy, hot (same buffer) and cold (memory not in cache).
    Clear(clear::Args),
    /// perf's `bench mem mmap`: map + populate GB/s by page size and function.
    Mmap(mmap::Args),
    /// Linux's "Prezeroing V2" fault-rate table: by threads and by cache lines touched per page.
    Faults(faults::Args),
    /// The pre-zeroed pool: hand-out latency, sustained GB/s, interference.
    Pool(pool::Args),
    /// ZONE_DEVICE memmap init: per-field vs template + streaming vs the ceiling.
    Template(template::Args),
    /// prezero serve: hand-out latency, scrub GB/s, VM boot vs the kernel.
    Service(service::Args),
    /// Unmodified programs (numpy, C) with and without `prezero run`: speed-ups, peak memory.
    Run(run::Args),
    /// Real programs from Debian's packages plainly, under `prezero run` and `--lazy`: time, peak RSS.
    Programs(programs::Args),
    /// Ratio per row of two `--json` outputs, marking changes beyond the noise.
    Compare(compare::Args),
    /// Every benchmark in sequence; `--report report.html` for a self-contained report.
    All(all::Args),
}

pub fn run(which: Which) -> Result<()> {
    match which {
        Which::Clear(a) => clear::run(&a),
        Which::Mmap(a) => mmap::run(&a),
        Which::Faults(a) => faults::run(&a),
        Which::Pool(a) => pool::run(&a),
        Which::Template(a) => template::run(&a),
        Which::Service(a) => service::run(&a),
        Which::Run(a) => run::run(&a),
        Which::Programs(a) => programs::run(&a),
        Which::Compare(a) => compare::run(&a),
        Which::All(a) => all::run(&a),
    }
}

/// The line a bench prints on stderr for each row (or group of rows) it does
/// not measure here, and why: `bench all` keeps these for its report.
const NOT_MEASURED: &str = "prezero: not measured: ";

/// Says that `what` is not measured here, and why (one line on stderr).
fn not_measured(what: &str, why: &str) {
    eprintln!("{NOT_MEASURED}{what}: {why}");
}
