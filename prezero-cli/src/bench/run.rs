//! `prezero bench run`: unmodified programs with and without `prezero run`,
//! in one run, interleaved (each repetition runs every program plainly and
//! under the preload, alternating which goes first), each figure's median
//! and spread per arm and the speed-up (plain / prezero: above 1 is faster).
//!
//! The programs:
//! * numpy, the loop of issue 16: `a = np.zeros(64 << 20)` (512 MiB), `a += 1.0`
//!   (the first pass, where the kernel faults and zeroes every page),
//!   `a += 1.0` again (resident memory); each a mean of 10 per process. Skipped
//!   with a reason where `python3 -c "import numpy"` fails.
//! * `prezero-bench-alloc` (src/bench/c/alloc_programs.c, built by build.rs):
//!   calloc-big (64-512 MiB blocks calloc'd, checked zero, written, freed),
//!   calloc-mix (4 KiB-64 MiB, 8 live), small (16-256 B malloc/free/realloc:
//!   what the preload must not slow down; it runs three times as often, as
//!   its 3% bound needs) and realloc-grow (64 KiB grown by 1.5x to 1 GiB:
//!   the preload must stay within 10% of glibc's mremap growth).
//!
//! The prezero arm gets exactly the environment `prezero run` would set
//! (`run::environment`), plus `PREZERO_STATS=1`, whose summary line gives
//! the memory the cache held at peak beyond what the program used. Every
//! process of either arm gets a variable of random length ([`Pad`]), so the
//! stack's alignment is luck shared evenly, not one arm's. Every
//! process's peak RSS comes from `wait4`. A program that finds a calloc
//! block not zero or a realloc that lost bytes fails the bench.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use super::progress::Progress;
use super::rows::{self, Row};
use crate::run::Settings;
use crate::stats::{round3, Stats};
use crate::table::Table;
use crate::units::human_size;
use anyhow::{bail, Context, Result};

#[derive(clap::Args)]
pub struct Args {
    /// Repetitions: each program runs this many times in each arm,
    /// interleaved (the small-allocation program three times as many).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Only these programs (numpy, calloc-big, calloc-mix, small, realloc-grow).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Tiny sizes: checks that every row runs here; the figures mean little.
    #[arg(long)]
    smoke: bool,
    /// The prezero arm runs with these (as `prezero run` takes them).
    #[command(flatten)]
    settings: Settings,
    /// One JSON object per figure.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Program {
    Numpy,
    CallocBig,
    CallocMix,
    Small,
    ReallocGrow,
}

const ALL: [Program; 5] = [
    Program::Numpy,
    Program::CallocBig,
    Program::CallocMix,
    Program::Small,
    Program::ReallocGrow,
];

impl Program {
    fn name(self) -> &'static str {
        match self {
            Program::Numpy => "numpy",
            Program::CallocBig => "calloc-big",
            Program::CallocMix => "calloc-mix",
            Program::Small => "small",
            Program::ReallocGrow => "realloc-grow",
        }
    }

    /// What the program does, for the table.
    fn what(self, smoke: bool) -> &'static str {
        match (self, smoke) {
            (Program::Numpy, false) => "np.zeros(64<<20); a += 1.0 twice; mean of 10",
            (Program::Numpy, true) => "np.zeros(1<<20); a += 1.0 twice; mean of 2",
            (Program::CallocBig, false) => "8 x calloc 64-512 MiB, check + write, free",
            (Program::CallocBig, true) => "2 x calloc 4-8 MiB",
            (Program::CallocMix, false) => "200 x calloc 4K-64M (8 live), check + write",
            (Program::CallocMix, true) => "10 x calloc 4K-4M",
            (Program::Small, false) => "20M malloc/free/realloc of 16-256 B",
            (Program::Small, true) => "100K malloc/free/realloc of 16-256 B",
            (Program::ReallocGrow, false) => "2 x realloc x1.5 from 64K to 1G, writing",
            (Program::ReallocGrow, true) => "realloc x1.5 from 64K to 8M",
        }
    }

    /// The program's arguments after its interpreter or executable.
    fn args(self, smoke: bool) -> Vec<String> {
        let v: &[&str] = match (self, smoke) {
            (Program::Numpy, false) => &["67108864", "10"],
            (Program::Numpy, true) => &["1048576", "2"],
            (Program::CallocBig, false) => &["calloc-big", "8", "67108864", "536870912"],
            (Program::CallocBig, true) => &["calloc-big", "2", "4194304", "8388608"],
            (Program::CallocMix, false) => &["calloc-mix", "200", "67108864"],
            (Program::CallocMix, true) => &["calloc-mix", "10", "4194304"],
            (Program::Small, false) => &["small", "20000000"],
            (Program::Small, true) => &["small", "100000"],
            (Program::ReallocGrow, false) => &["realloc-grow", "2", "1073741824"],
            (Program::ReallocGrow, true) => &["realloc-grow", "1", "8388608"],
        };
        v.iter().map(|s| s.to_string()).collect()
    }

    /// Runs per repetition and arm.
    fn runs_per_rep(self) -> usize {
        if self == Program::Small {
            3
        } else {
            1
        }
    }
}

/// The numpy loop; prints mean nanoseconds per phase and `bad=` (arrays not
/// all 2.0 after the two passes, checked outside the timing). `first_later`:
/// the first pass without the first iteration, whose pages are also the
/// first this process takes from the host (0.1-1.1 s for 512 MiB here, in
/// either arm: the VM's noise, not the allocator's).
const NUMPY: &str = r#"
import sys, time
import numpy as np
n, iters = int(sys.argv[1]), int(sys.argv[2])
t = {"zeros": 0.0, "first": 0.0, "second": 0.0}
later = 0.0
bad = 0
for i in range(iters):
    t0 = time.perf_counter()
    a = np.zeros(n)
    t1 = time.perf_counter()
    a += 1.0
    t2 = time.perf_counter()
    a += 1.0
    t3 = time.perf_counter()
    t["zeros"] += t1 - t0
    t["first"] += t2 - t1
    t["second"] += t3 - t2
    if i > 0:
        later += t2 - t1
    if a.min() != 2.0 or a.max() != 2.0:
        bad += 1
    del a
t["first_later"] = later * iters / (iters - 1) if iters > 1 else t["first"]
print(" ".join(f"{k}_ns={v / iters * 1e9:.0f}" for k, v in t.items()), f"bad={bad}")
sys.exit(1 if bad else 0)
"#;

/// The Python with numpy (the interpreter itself, not a shim that would
/// start a shell first), or why not.
fn python_with_numpy() -> Result<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys, numpy; print(sys.executable); print(numpy.__version__)",
        ])
        .stdin(Stdio::null())
        .output()
        .context("cannot run python3")?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("").trim();
        bail!("python3 -c \"import numpy\" failed ({last}); install it with: pip install numpy");
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let exe = lines.next().unwrap_or("").trim();
    eprintln!(
        "prezero: numpy {} on {exe}",
        lines.next().unwrap_or("?").trim()
    );
    Ok(if exe.is_empty() {
        PathBuf::from("python3")
    } else {
        PathBuf::from(exe)
    })
}

/// `prezero-bench-alloc` in the cache directory, or why not.
#[cfg(bench_alloc)]
fn alloc_programs() -> Result<PathBuf> {
    static EXE: &[u8] = include_bytes!(env!("PREZERO_BENCH_ALLOC"));
    crate::run::cache_file(
        &format!("prezero-bench-alloc-{}", env!("PREZERO_BENCH_ALLOC_HASH")),
        EXE,
        0o700,
    )
}

#[cfg(not(bench_alloc))]
fn alloc_programs() -> Result<PathBuf> {
    bail!(
        "the C programs were {} when prezero was built; install a C compiler and rebuild",
        env!("PREZERO_BENCH_ALLOC")
    )
}

/// One process: its figures (nanoseconds), wall time, peak RSS and the
/// preload's summary line.
struct Sample {
    figures: Vec<(&'static str, f64)>,
    maxrss: u64,
    stats: Option<String>,
}

/// Runs `argv` to the end with `env` set and `remove` unset.
fn run_once(
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
    })
}

/// A variable of random length (0-4 KiB) for every process of either arm.
/// Where the environment ends decides the alignment of the stack below it,
/// and that alone moved the small-allocation program by 3% here (one 100-byte
/// variable more: 674 -> 695 ms, no preload); the prezero arm's environment
/// is longer. Random in both arms, that luck spreads evenly over both instead
/// of favouring one (Mytkowicz et al., "Producing wrong data without doing
/// anything obviously wrong", ASPLOS 2009).
struct Pad(u64);

impl Pad {
    fn new() -> Pad {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Pad(seed | 1)
    }

    fn next(&mut self) -> (OsString, OsString) {
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
struct Arm {
    samples: Vec<Sample>,
}

impl Arm {
    fn figure(&self, name: &str) -> Vec<f64> {
        self.samples
            .iter()
            .filter_map(|s| s.figures.iter().find(|f| f.0 == name).map(|f| f.1))
            .collect()
    }

    fn peak_rss(&self) -> u64 {
        self.samples.iter().map(|s| s.maxrss).max().unwrap_or(0)
    }

    /// The largest (held beyond use, in use) any process reported, in GiB.
    fn peak_held(&self) -> Option<(f64, f64)> {
        self.samples
            .iter()
            .filter_map(|s| peak_held(s.stats.as_deref()?))
            .reduce(|a, b| (a.0.max(b.0), a.1.max(b.1)))
    }
}

/// This process's peak RSS: a child's `ru_maxrss` counts the image it was
/// spawned from before its exec, so no figure reads below it.
fn own_peak_rss() -> u64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: fills a local.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_maxrss as u64 * 1024
}

/// What the issue asks of a row, to print beside it.
fn goal(program: Program, figure: &str) -> Option<(&'static str, f64)> {
    match (program, figure) {
        (Program::Numpy, "first_pass") => Some((">= 2x", 2.0)),
        (Program::Small, "work") => Some((">= 0.97x", 0.97)),
        (Program::ReallocGrow, "work") => Some((">= 0.91x", 1.0 / 1.1)),
        _ => None,
    }
}

pub fn run(args: &Args) -> Result<()> {
    for n in &args.only {
        if !ALL.iter().any(|p| p.name() == n) {
            bail!("unknown program \"{n}\" (numpy, calloc-big, calloc-mix, small, realloc-grow)");
        }
    }
    if args.reps == 0 {
        bail!("--reps must be at least 1");
    }
    let wanted: Vec<Program> = ALL
        .into_iter()
        .filter(|p| args.only.is_empty() || args.only.iter().any(|n| n == p.name()))
        .collect();
    // The prezero arm: what `prezero run` sets, and the summary line. When
    // this bench itself runs under `prezero run`, the plain arm drops it.
    let inherited = std::env::var_os("LD_PRELOAD");
    let marker = std::env::var_os(crate::run::MARKER);
    let nested =
        crate::run::already_preloaded(inherited.as_deref().unwrap_or_default(), marker.as_deref());
    if nested {
        eprintln!(
            "prezero: bench run is itself under prezero run: the plain arm runs without LD_PRELOAD"
        );
    }
    let mut with = crate::run::environment(
        &args.settings,
        if nested { None } else { inherited.as_deref() },
        if nested { None } else { marker.as_deref() },
    )?;
    with.push(("PREZERO_STATS".into(), "1".into()));
    let plain_remove: &[&str] = if nested {
        &["LD_PRELOAD", crate::run::MARKER]
    } else {
        &[]
    };
    let preload = with
        .iter()
        .find(|(k, _)| k == OsStr::new("LD_PRELOAD"))
        .map(|(_, v)| v.to_string_lossy().into_owned())
        .unwrap_or_default();
    eprintln!("prezero: the prezero arm preloads {preload}");

    // Which programs can run here.
    let mut argv: Vec<(Program, Vec<OsString>)> = Vec::new();
    let mut skipped: Vec<(Program, String)> = Vec::new();
    let python = wanted.contains(&Program::Numpy).then(python_with_numpy);
    let c = wanted
        .iter()
        .any(|&p| p != Program::Numpy)
        .then(alloc_programs);
    for &p in &wanted {
        let exe = match (p, &python, &c) {
            (Program::Numpy, Some(Ok(py)), _) => {
                let mut v: Vec<OsString> = vec![py.into(), "-c".into(), NUMPY.into()];
                v.extend(p.args(args.smoke).into_iter().map(OsString::from));
                argv.push((p, v));
                continue;
            }
            (Program::Numpy, Some(Err(why)), _) => Err(crate::message(why)),
            (_, _, Some(Ok(exe))) => Ok(exe.clone()),
            (_, _, Some(Err(why))) => Err(crate::message(why)),
            _ => unreachable!("every wanted program has its runner checked"),
        };
        match exe {
            Ok(exe) => {
                let mut v: Vec<OsString> = vec![exe.into()];
                v.extend(p.args(args.smoke).into_iter().map(OsString::from));
                argv.push((p, v));
            }
            Err(why) => skipped.push((p, why)),
        }
    }
    for (p, why) in &skipped {
        eprintln!("prezero: bench run: no {} row: {why}", p.name());
    }
    if argv.is_empty() {
        bail!("no program could run here (see above)");
    }

    // Interleaved: each repetition runs every program in both arms, the
    // order of the arms alternating.
    let total: usize = argv
        .iter()
        .map(|(p, _)| 2 * p.runs_per_rep() * args.reps)
        .sum();
    let mut progress = Progress::new(total as u64);
    let mut arms: Vec<[Arm; 2]> = argv.iter().map(|_| Default::default()).collect();
    let mut flip = false;
    let mut pads = Pad::new();
    for _ in 0..args.reps {
        for ((p, v), arm) in argv.iter().zip(&mut arms) {
            for _ in 0..p.runs_per_rep() {
                flip = !flip;
                for which in if flip { [0, 1] } else { [1, 0] } {
                    progress.step(format!("{} {}", p.name(), ["plain", "prezero"][which]));
                    let s = if which == 0 {
                        run_once(v, &[pads.next()], plain_remove, *p)
                    } else {
                        let mut env = with.clone();
                        env.push(pads.next());
                        run_once(v, &env, &[], *p)
                    }?;
                    arm[which].samples.push(s);
                }
            }
        }
    }
    progress.finish();
    let floor = own_peak_rss();

    let table = Table::new(" ")
        .left(13)
        .left(17)
        .right(17)
        .right(17)
        .right(9)
        .right(9)
        .gap("  ")
        .right(10)
        .right(10)
        .gap("  ")
        .right(15);
    if !args.json {
        println!(
            "# prezero bench run: {} repetitions, interleaved; medians (+- stdev%), speed-up = plain / prezero",
            args.reps
        );
        table.print(&[
            "program",
            "figure",
            "plain ms",
            "prezero ms",
            "speed-up",
            "goal",
            "RSS plain",
            "RSS prez.",
            "held at peak",
        ]);
    }
    let mut numpy_bound = None;
    for ((p, _), [plain, pz]) in argv.iter().zip(&arms) {
        if !args.json {
            println!("# {}: {}", p.name(), p.what(args.smoke));
        }
        let held = pz.peak_held();
        let figures: Vec<&'static str> = plain.samples[0].figures.iter().map(|f| f.0).collect();
        // What no allocator can beat while the array is far larger than the
        // caches: a first pass as fast as a resident one.
        let bound = (*p == Program::Numpy).then(|| {
            let m = |fig: &str| Stats::of(&plain.figure(fig)).median;
            m("first_pass_later") / m("second_pass").max(1.0)
        });
        numpy_bound = numpy_bound.or(bound);
        for fig in figures {
            let (a, b) = (Stats::of(&plain.figure(fig)), Stats::of(&pz.figure(fig)));
            let speedup = a.median / b.median.max(1.0);
            let goal = goal(*p, fig);
            if args.json {
                Row::Run(rows::Run {
                    program: p.name().to_string(),
                    figure: fig.to_string(),
                    runs: plain.samples.len() as u64,
                    plain_ms: round3(a.median / 1e6),
                    plain_stdev_pct: round3(a.stdev_pct),
                    prezero_ms: round3(b.median / 1e6),
                    prezero_stdev_pct: round3(b.stdev_pct),
                    speedup: round3(speedup),
                    goal: goal.map(|(text, _)| text.to_string()),
                    goal_met: goal.map(|(_, min)| speedup >= min),
                    plain_peak_rss_bytes: plain.peak_rss(),
                    prezero_peak_rss_bytes: pz.peak_rss(),
                    rss_floor_bytes: Some(floor),
                    smoke: args.smoke,
                    prezero_held_beyond_use_gib: held.map(|(held, _)| held),
                    prezero_peak_in_use_gib: held.map(|(_, in_use)| in_use),
                    bound_speedup: bound.filter(|_| fig == "first_pass_later").map(round3),
                })
                .print();
            } else {
                // Milliseconds and spread aligned within their cell.
                let ms = |s: &Stats| format!("{:>9.2} (+-{:>4.1}%)", s.median / 1e6, s.stdev_pct);
                let rss = |bytes: u64| human_size(bytes as usize);
                table.print(&[
                    p.name().to_string(),
                    fig.to_string(),
                    ms(&a),
                    ms(&b),
                    format!("{speedup:.2}x"),
                    match goal {
                        Some((t, min)) if speedup >= min => format!("{t} ok"),
                        Some((t, _)) => format!("{t} NO"),
                        None => String::new(),
                    },
                    rss(plain.peak_rss()),
                    rss(pz.peak_rss()),
                    held.map_or_else(
                        || "-".to_string(),
                        |(h, u)| format!("{:.2}G + {:.2}G", u, h),
                    ),
                ]);
            }
        }
    }
    if !args.json {
        if let Some(b) = numpy_bound {
            println!(
                "# numpy: first_pass_later: the iterations after the first. With an array \
                 far larger than the last-level cache a first pass cannot beat a pass over \
                 memory already resident: plain first_pass_later / plain second_pass = \
                 {b:.2}x (bound_speedup in --json) is the most any allocator can give this \
                 loop here (a block that fits the cache can beat it: calloc's clear leaves it \
                 there, as with --smoke)"
            );
        }
        println!(
            "# process: the whole process (start, work, exit); held at peak: the most any \
             prezero process had in use + kept beyond it (its PREZERO_STATS line); peak RSS \
             reads at least this bench's own {} (wait4 counts the image a child was \
             spawned from)",
            human_size(floor as usize)
        );
        for (p, why) in &skipped {
            println!("# no {} row: {why}", p.name());
        }
    }
    Ok(())
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
