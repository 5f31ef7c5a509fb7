//! `prezero bench ...`: shared measurement plumbing (statistics, progress, output).

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use prezero::{HugetlbReservation, PageKind};

mod all;
pub(crate) mod clear;
mod compare;
mod faults;
mod mmap;
mod pool;
mod run;
mod service;
pub(crate) mod template;

#[derive(clap::Subcommand)]
pub enum Which {
    /// GB/s by size x strategy, hot (same buffer) and cold (memory not in cache).
    Clear(clear::Args),
    /// perf's `bench mem mmap`: map + populate GB/s by page size and function.
    Mmap(mmap::Args),
    /// Seed 003's fault-rate table: by threads and by cache lines touched per page.
    Faults(faults::Args),
    /// The pre-zeroed pool: hand-out latency, sustained GB/s, interference.
    Pool(pool::Args),
    /// Seed 004's memmap init: per-field vs template + streaming vs the ceiling.
    Template(template::Args),
    /// prezero serve: hand-out latency, scrub GB/s, VM boot vs the kernel.
    Service(service::Args),
    /// Unmodified programs (numpy, C) with and without `prezero run`: speed-ups, peak memory.
    Run(run::Args),
    /// Ratio per row of two `--json` outputs, marking changes beyond the noise.
    Compare(compare::Args),
    /// Every benchmark in sequence; `--report report.html` for a self-contained report.
    All(all::Args),
}

pub fn run(which: Which) -> Result<(), String> {
    match which {
        Which::Clear(a) => clear::run(&a),
        Which::Mmap(a) => mmap::run(&a),
        Which::Faults(a) => faults::run(&a),
        Which::Pool(a) => pool::run(&a),
        Which::Template(a) => template::run(&a),
        Which::Service(a) => service::run(&a),
        Which::Run(a) => run::run(&a),
        Which::Compare(a) => compare::run(&a),
        Which::All(a) => all::run(&a),
    }
}

/// For a hugetlb page kind, checks that `bytes` worth of pages are free, or with
/// `reserve` grows the pool for the run: the returned guard restores it when
/// dropped, and a Ctrl-C meanwhile restores it too before exiting.
pub fn hugetlb_for_run(
    kind: PageKind,
    bytes: usize,
    reserve: bool,
) -> Result<Option<HugetlbReservation>, String> {
    if !kind.is_hugetlb() {
        return Ok(None);
    }
    let page = kind.page_size();
    let pages = bytes.div_ceil(page);
    if !reserve {
        let free = prezero::cpu::hugetlb_pool(page).map_or(0, |p| p.free);
        if free < pages {
            return Err(format!(
                "page {kind}: {pages} hugetlb pages needed, {free} free; rerun with --reserve (as root) or: echo {pages} > {}",
                prezero::cpu::HugetlbPool::nr_path(page)
            ));
        }
        return Ok(None);
    }
    let r = HugetlbReservation::ensure_free(page, pages).map_err(|e| format!("--reserve: {e}"))?;
    interrupt::restore_on_interrupt(
        &prezero::cpu::HugetlbPool::nr_path(page),
        r.previous_total(),
    );
    Ok(Some(r))
}

/// Ctrl-C while the hugetlb pool is grown: put it back, then exit.
mod interrupt {
    use std::ffi::CString;
    use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

    static PATH: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());
    static VALUE: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());
    static VALUE_LEN: AtomicUsize = AtomicUsize::new(0);

    /// On SIGINT, SIGTERM or SIGPIPE, writes `value` to `path` and exits with status 130.
    pub fn restore_on_interrupt(path: &str, value: usize) {
        let p = CString::new(path).expect("sysfs paths have no NUL");
        let v = CString::new(value.to_string()).expect("digits have no NUL");
        VALUE_LEN.store(v.as_bytes().len(), Ordering::Release);
        // Leaked on purpose: the handler may run at any time until exit.
        PATH.store(p.into_raw(), Ordering::Release);
        VALUE.store(v.into_raw(), Ordering::Release);
        // SAFETY: `on_signal` only calls async-signal-safe functions (open, write,
        // close, _exit) on pointers published above.
        unsafe {
            libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
            libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
            libc::signal(libc::SIGPIPE, on_signal as *const () as libc::sighandler_t);
        }
    }

    extern "C" fn on_signal(_sig: libc::c_int) {
        let path = PATH.load(Ordering::Acquire);
        let value = VALUE.load(Ordering::Acquire);
        if !path.is_null() && !value.is_null() {
            // SAFETY: both point to leaked NUL-terminated strings; these calls are
            // async-signal-safe.
            unsafe {
                let fd = libc::open(path, libc::O_WRONLY);
                if fd >= 0 {
                    libc::write(fd, value.cast(), VALUE_LEN.load(Ordering::Acquire));
                    libc::close(fd);
                }
            }
        }
        // SAFETY: _exit is async-signal-safe and ends the process at once.
        unsafe { libc::_exit(130) };
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
