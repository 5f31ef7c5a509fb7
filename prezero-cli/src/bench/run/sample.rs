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
pub(in crate::bench) struct Sample {
    pub(in crate::bench) figures: Vec<(&'static str, f64)>,
    pub(in crate::bench) maxrss: u64,
    pub(in crate::bench) stats: Option<String>,
    /// The lowest MemAvailable seen while it ran (bytes).
    pub(in crate::bench) low_available: u64,
}

impl Sample {
    /// `figures` of the process that `ended`, with its peak RSS and the
    /// preload's summary line.
    pub(in crate::bench) fn of(figures: Vec<(&'static str, f64)>, ended: &Ended) -> Sample {
        Sample {
            figures,
            maxrss: ended.maxrss,
            stats: (ended.err.lines())
                .rfind(|l| l.starts_with("prezero-preload: "))
                .map(str::to_owned),
            low_available: ended.low_available,
        }
    }
}

/// MemAvailable, in bytes.
fn mem_available() -> Option<u64> {
    prezero_sys::raw::meminfo(b"MemAvailable:").map(|b| b as u64)
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

/// `argv` as one line, for messages.
pub(in crate::bench) fn shown(argv: &[OsString]) -> String {
    argv.iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A process run to its end: what it printed, how it ended, its wall time
/// and its peak RSS.
pub(in crate::bench) struct Ended {
    pub(in crate::bench) out: String,
    pub(in crate::bench) err: String,
    /// The status `wait4` gave.
    pub(in crate::bench) status: i32,
    pub(in crate::bench) wall: std::time::Duration,
    /// `ru_maxrss` of `wait4`, in bytes: the largest peak of the process and
    /// of each descendant it waited for (a peak of one process, not a sum).
    pub(in crate::bench) maxrss: u64,
    /// The lowest MemAvailable seen while it ran (bytes).
    pub(in crate::bench) low_available: u64,
}

impl Ended {
    /// Whether it exited with status 0.
    pub(in crate::bench) fn succeeded(&self) -> bool {
        libc::WIFEXITED(self.status) && libc::WEXITSTATUS(self.status) == 0
    }

    /// "exit status N" or "killed by signal N".
    pub(in crate::bench) fn how(&self) -> String {
        if libc::WIFSIGNALED(self.status) {
            format!("killed by signal {}", libc::WTERMSIG(self.status))
        } else {
            format!("exit status {}", libc::WEXITSTATUS(self.status))
        }
    }

    /// The last `n` lines of its stderr, joined.
    pub(in crate::bench) fn err_tail(&self, n: usize) -> String {
        let tail: Vec<&str> = self.err.lines().rev().take(n).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }
}

/// Runs `argv` to the end with `env` set and `remove` unset, in `dir` (else
/// here), stdin from /dev/null.
pub(in crate::bench) fn run_to_end(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    remove: &[&str],
    dir: Option<&std::path::Path>,
) -> Result<Ended> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    for r in remove {
        cmd.env_remove(r);
    }
    let low = LowWater::start();
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}", shown(argv)))?;
    let mut err_pipe = child.stderr.take().expect("piped");
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err_pipe.read_to_end(&mut s);
        s
    });
    let mut out = Vec::new();
    let _ = child.stdout.take().expect("piped").read_to_end(&mut out);
    // Our own child, reaped here alone (`child` is never waited on).
    let waited = prezero_sys::wait_with_usage(child.id() as libc::pid_t);
    let wall = start.elapsed();
    let low_available = low.stop();
    let err = err_reader.join().unwrap_or_default();
    let (status, ru) = waited.with_context(|| format!("wait4 for {}", shown(argv)))?;
    Ok(Ended {
        out: String::from_utf8_lossy(&out).into_owned(),
        err: String::from_utf8_lossy(&err).into_owned(),
        status,
        wall,
        // ru_maxrss is in KiB on Linux.
        maxrss: ru.ru_maxrss as u64 * 1024,
        low_available,
    })
}

/// Runs one of `bench run`'s programs to the end with `env` set and `remove`
/// unset: its figures, checked.
pub(super) fn run_once(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    remove: &[&str],
    program: Program,
) -> Result<Sample> {
    let ended = run_to_end(argv, env, remove, None)?;
    let out = &ended.out;
    let field = |k: &str| -> Option<f64> {
        out.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
    };
    if !ended.succeeded() || field("bad") != Some(0.0) {
        bail!(
            "VERIFY FAILED or program failed: {} ({}); stdout: {}; stderr: {}",
            shown(argv),
            ended.how(),
            out.trim(),
            ended.err_tail(6)
        );
    }
    let need = |k: &str| {
        field(k).with_context(|| format!("{}: no {k}= in \"{}\"", shown(argv), out.trim()))
    };
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
    figures.push(("process", ended.wall.as_nanos() as f64));
    Ok(Sample::of(figures, &ended))
}

/// A variable of random length (0-4 KiB) for every process of either arm.
/// Where the environment ends decides the alignment of the stack below it,
/// and that alone moved the small-allocation program by 3% here (one 100-byte
/// variable more: 674 -> 695 ms, no preload); the prezero arm's environment
/// is longer. Random in both arms, that luck spreads evenly over both instead
/// of favouring one (Mytkowicz et al., "Producing wrong data without doing
/// anything obviously wrong", ASPLOS 2009).
pub(in crate::bench) struct Pad(u64);

impl Pad {
    pub(in crate::bench) fn new() -> Pad {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Pad(seed | 1)
    }

    pub(in crate::bench) fn next(&mut self) -> (OsString, OsString) {
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
pub(in crate::bench) struct Samples {
    pub(in crate::bench) samples: Vec<Sample>,
}

impl Samples {
    pub(in crate::bench) fn figure(&self, name: &str) -> Vec<f64> {
        self.samples
            .iter()
            .filter_map(|s| s.figures.iter().find(|f| f.0 == name).map(|f| f.1))
            .collect()
    }

    pub(in crate::bench) fn peak_rss(&self) -> u64 {
        self.samples.iter().map(|s| s.maxrss).max().unwrap_or(0)
    }

    /// The lowest MemAvailable any of its processes saw (`None`: unread).
    pub(in crate::bench) fn low_available(&self) -> Option<u64> {
        self.samples
            .iter()
            .map(|s| s.low_available)
            .min()
            .filter(|&b| b != u64::MAX)
    }

    /// The largest (held beyond use, in use) any process reported, in GiB.
    pub(in crate::bench) fn peak_held(&self) -> Option<(f64, f64)> {
        self.samples
            .iter()
            .filter_map(|s| peak_held(s.stats.as_deref()?))
            .reduce(|a, b| (a.0.max(b.0), a.1.max(b.1)))
    }
}

/// This process's peak RSS: a child's `ru_maxrss` counts the image it was
/// spawned from before its exec, so no figure reads below it.
pub(in crate::bench) fn own_peak_rss() -> u64 {
    prezero_sys::own_usage().ru_maxrss as u64 * 1024
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
