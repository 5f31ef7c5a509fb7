//! `prezero bench ...`: shared measurement plumbing (statistics, progress, output).

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

mod clear;

#[derive(clap::Subcommand)]
pub enum Which {
    /// GB/s by size x strategy, hot (same buffer) and cold (memory not in cache).
    Clear(clear::Args),
}

pub fn run(which: Which) -> Result<(), String> {
    match which {
        Which::Clear(a) => clear::run(&a),
    }
}

/// Summary of repeated measurements of one figure.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub mean: f64,
    pub stdev_pct: f64,
    pub median: f64,
}

impl Stats {
    pub fn of(samples: &[f64]) -> Stats {
        let n = samples.len().max(1) as f64;
        let mean = samples.iter().sum::<f64>() / n;
        let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let median = match sorted.len() {
            0 => 0.0,
            l if l % 2 == 1 => sorted[l / 2],
            l => (sorted[l / 2 - 1] + sorted[l / 2]) / 2.0,
        };
        Stats {
            mean,
            stdev_pct: if mean > 0.0 {
                var.sqrt() / mean * 100.0
            } else {
                0.0
            },
            median,
        }
    }
}

/// GB/s (10^9 bytes per second, as perf reports) of `bytes` in `d`.
pub fn gbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64().max(1e-12) / 1e9
}

/// A progress bar on stderr that stays hidden for the first second, so quick
/// runs print nothing extra.
pub struct Progress {
    bar: ProgressBar,
    start: Instant,
    shown: bool,
}

impl Progress {
    pub fn new(total: u64) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} {msg}")
                .expect("static template")
                .progress_chars("=> "),
        );
        Progress {
            bar,
            start: Instant::now(),
            shown: false,
        }
    }

    pub fn step(&mut self, msg: String) {
        if !self.shown && self.start.elapsed() > Duration::from_secs(1) {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown = true;
        }
        self.bar.set_message(msg);
        self.bar.inc(1);
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Fails loudly if `buf` is not all zero: a benchmark figure only counts if the
/// memory it claims to have cleared is clear.
pub fn verify_zero(buf: &[u8], what: &str) -> Result<(), String> {
    if prezero::is_zero(buf) {
        return Ok(());
    }
    let at = prezero::first_nonzero(buf).unwrap_or(0);
    Err(format!(
        "VERIFY FAILED: {what} left byte {at} of {} non-zero ({:#04x})",
        buf.len(),
        buf[at]
    ))
}
