//! One process of a program in one arm (its figures, peak RSS and the
//! preload's summary line), the random padding of every process's
//! environment, and the samples of an arm.

use std::ffi::OsString;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::programs::Program;

/// One process: its figures (nanoseconds), wall time, peak RSS and the
/// preload's summary line.
pub(super) struct Sample {
    pub(super) figures: Vec<(&'static str, f64)>,
    pub(super) maxrss: u64,
    pub(super) stats: Option<String>,
    /// The lowest MemAvailable seen while it ran (bytes).
    pub(super) low_available: u64,
}

/// MemAvailable, in bytes.
fn mem_available() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = m.lines().find(|l| l.starts_with("MemAvailable:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// A thread that reads MemAvailable every 20 ms (a read costs ~20 us:
/// 0.1% of a core) until stopped; the lowest it saw.
struct LowWater {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<u64>,
}

impl LowWater {
    fn start() -> LowWater {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut low = u64::MAX;
            loop {
                low = low.min(mem_available().unwrap_or(u64::MAX));
                match stopped.recv_timeout(std::time::Duration::from_millis(20)) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return low,
                }
            }
        });
        LowWater { stop, thread }
    }

    fn stop(self) -> u64 {
        let _ = self.stop.send(());
        self.thread.join().unwrap_or(u64::MAX)
    }
}

/// Runs `argv` to the end with `env` set and `remove` unset.
pub(super) fn run_once(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    remove: &[&str],
    program: Program,
) -> Result<Sample> {
    let shown = || {
        argv.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for r in remove {
        cmd.env_remove(r);
    }
    let low = LowWater::start();
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}", shown()))?;
    let mut err_pipe = child.stderr.take().expect("piped");
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err_pipe.read_to_end(&mut s);
        s
    });
    let mut out = Vec::new();
    let _ = child.stdout.take().expect("piped").read_to_end(&mut out);
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child (not reaped elsewhere: `child` is never
    // waited on) and fills locals.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
    let wall = start.elapsed();
    let low_available = low.stop();
    let err = err_reader.join().unwrap_or_default();
    if pid < 0 {
        bail!("wait4 for {}: {}", shown(), std::io::Error::last_os_error());
    }
    let out = String::from_utf8_lossy(&out);
    let err = String::from_utf8_lossy(&err);
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    let field = |k: &str| -> Option<f64> {
        out.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
    };
    if !ok || field("bad") != Some(0.0) {
        let how = if libc::WIFSIGNALED(status) {
            format!("killed by signal {}", libc::WTERMSIG(status))
        } else {
            format!("exit status {}", libc::WEXITSTATUS(status))
        };
        let tail: Vec<&str> = err.lines().rev().take(6).collect();
        bail!(
            "VERIFY FAILED or program failed: {} ({how}); stdout: {}; stderr: {}",
            shown(),
            out.trim(),
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    let need =
        |k: &str| field(k).with_context(|| format!("{}: no {k}= in \"{}\"", shown(), out.trim()));
    let mut figures = match program {
        Program::Numpy => {
            let (z, f, s) = (need("zeros_ns")?, need("first_ns")?, need("second_ns")?);
            vec![
                ("first_pass", f),
                ("first_pass_later", need("first_later_ns")?),
                ("zeros_plus_first", z + f),
                ("second_pass", s),
            ]
        }
        Program::Sparse => vec![("work", need("ns")?), ("rss_anon", need("rss_anon")?)],
        Program::Busy | Program::Exit => vec![("work", need("ns")?), ("worst", need("worst_ns")?)],
        _ => vec![("work", need("ns")?)],
    };
    figures.push(("process", wall.as_nanos() as f64));
    Ok(Sample {
        figures,
        // ru_maxrss is in KiB on Linux.
        maxrss: ru.ru_maxrss as u64 * 1024,
        stats: err
            .lines()
            .rfind(|l| l.starts_with("prezero-preload: "))
            .map(str::to_owned),
        low_available,
    })
}

/// A variable of random length (0-4 KiB) for every process of either arm.
/// Where the environment ends decides the alignment of the stack below it,
/// and that alone moved the small-allocation program by 3% here (one 100-byte
/// variable more: 674 -> 695 ms, no preload); the prezero arm's environment
/// is longer. Random in both arms, that luck spreads evenly over both instead
/// of favouring one (Mytkowicz et al., "Producing wrong data without doing
/// anything obviously wrong", ASPLOS 2009).
pub(super) struct Pad(u64);

impl Pad {
    pub(super) fn new() -> Pad {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Pad(seed | 1)
    }

    pub(super) fn next(&mut self) -> (OsString, OsString) {
        // xorshift64
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        let len = (self.0 % 4096) as usize;
        ("PREZERO_BENCH_PAD".into(), "x".repeat(len).into())
    }
}

/// "peak held A GiB beyond B GiB in use" from the preload's summary line.
fn peak_held(stats: &str) -> Option<(f64, f64)> {
    let rest = &stats[stats.find("peak held ")? + "peak held ".len()..];
    let mut w = rest.split_whitespace();
    let held: f64 = w.next()?.parse().ok()?;
    let in_use: f64 = w.nth(2)?.parse().ok()?;
    Some((held, in_use))
}

/// Every sample of one program in one arm.
#[derive(Default)]
pub(super) struct Samples {
    pub(super) samples: Vec<Sample>,
}

impl Samples {
    pub(super) fn figure(&self, name: &str) -> Vec<f64> {
        self.samples
            .iter()
            .filter_map(|s| s.figures.iter().find(|f| f.0 == name).map(|f| f.1))
            .collect()
    }

    pub(super) fn peak_rss(&self) -> u64 {
        self.samples.iter().map(|s| s.maxrss).max().unwrap_or(0)
    }

    /// The lowest MemAvailable any of its processes saw (`None`: unread).
    pub(super) fn low_available(&self) -> Option<u64> {
        self.samples
            .iter()
            .map(|s| s.low_available)
            .min()
            .filter(|&b| b != u64::MAX)
    }

    /// The largest (held beyond use, in use) any process reported, in GiB.
    pub(super) fn peak_held(&self) -> Option<(f64, f64)> {
        self.samples
            .iter()
            .filter_map(|s| peak_held(s.stats.as_deref()?))
            .reduce(|a, b| (a.0.max(b.0), a.1.max(b.1)))
    }
}

/// This process's peak RSS: a child's `ru_maxrss` counts the image it was
/// spawned from before its exec, so no figure reads below it.
pub(super) fn own_peak_rss() -> u64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: fills a local.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_maxrss as u64 * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_gives_the_memory_held() {
        let line = "prezero-preload: pid 7: 20 large blocks served (10.00 GiB, ...), gave back \
                    0.00 GiB, peak held 0.50 GiB beyond 0.75 GiB in use, 0 to the next allocator";
        assert_eq!(peak_held(line), Some((0.5, 0.75)));
        assert_eq!(peak_held("prezero-preload: pid 7: nothing"), None);
    }
}
