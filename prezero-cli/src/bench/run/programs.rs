//! The programs `bench run` runs: what each does, its arguments, and what
//! the issue asks of its figures; the numpy loop, and where the interpreter
//! and the C programs are.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::LazyReserve;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) enum Program {
    Numpy,
    CallocBig,
    CallocMix,
    Small,
    ReallocGrow,
    FirstTouch,
    FirstTouchThp,
    Sparse,
    Recycle,
    Busy,
    Exit,
    Pressure,
}

pub(super) const ALL: [Program; 12] = [
    Program::Numpy,
    Program::CallocBig,
    Program::CallocMix,
    Program::Small,
    Program::ReallocGrow,
    Program::FirstTouch,
    Program::FirstTouchThp,
    Program::Sparse,
    Program::Recycle,
    Program::Busy,
    Program::Exit,
    Program::Pressure,
];

/// The sparse program's mapping and stride, in full: every 16th 2 MiB block
/// of 8 GiB is touched.
const SPARSE: (usize, usize) = (8 << 30, 16);
const SPARSE_SMOKE: (usize, usize) = (256 << 20, 16);

impl Program {
    pub(super) fn name(self) -> &'static str {
        match self {
            Program::Numpy => "numpy",
            Program::CallocBig => "calloc-big",
            Program::CallocMix => "calloc-mix",
            Program::Small => "small",
            Program::ReallocGrow => "realloc-grow",
            Program::FirstTouch => "first-touch",
            Program::FirstTouchThp => "first-touch-thp",
            Program::Sparse => "sparse",
            Program::Recycle => "recycle",
            Program::Busy => "busy",
            Program::Exit => "exit",
            Program::Pressure => "pressure",
        }
    }

    /// What the program does, for the table.
    pub(super) fn what(self, smoke: bool) -> &'static str {
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
            (Program::FirstTouch, false) => "compute 2 s, mmap 512 MiB, a byte per 4 KiB",
            (Program::FirstTouch, true) => "compute 0.1 s, mmap 16 MiB, a byte per 4 KiB",
            (Program::FirstTouchThp, false) => "the same with MADV_HUGEPAGE on the mapping",
            (Program::FirstTouchThp, true) => "the same with MADV_HUGEPAGE (16 MiB)",
            (Program::Sparse, false) => "mmap 8 GiB, every 4 KiB of every 16th 2 MiB block",
            (Program::Sparse, true) => "mmap 256 MiB, every 16th 2 MiB block",
            (Program::Recycle, false) => "20 x calloc 256 MiB, a byte per 4 KiB, free",
            (Program::Recycle, true) => "4 x calloc 16 MiB, a byte per 4 KiB, free",
            (Program::Busy, false) => {
                "a spinning thread per core; 40 x (malloc 64 MiB, write, free, 5 ms, calloc \
                 64 MiB + check + write): the callocs"
            }
            (Program::Busy, true) => "the same, 4 x 4 MiB",
            (Program::Exit, false) => {
                "3 spinning threads per core; 40 x (fork; the child callocs 64 MiB, checks, \
                 writes, frees, _exits; reaped)"
            }
            (Program::Exit, true) => "the same, 4 x 4 MiB",
            (Program::Pressure, false) => {
                "in 1 GiB (a memory cgroup) the arm callocs, touches and frees 768 MiB and \
                 lives on; work: a plain program's calloc + touch of 768 MiB beside it"
            }
            (Program::Pressure, true) => "the same in 256 MiB, 128 MiB each",
        }
    }

    /// The program's arguments after its interpreter or executable.
    pub(super) fn args(self, smoke: bool) -> Vec<String> {
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
            (Program::FirstTouch, false) => &["first-touch", "2000", "536870912"],
            (Program::FirstTouch, true) => &["first-touch", "100", "16777216"],
            (Program::FirstTouchThp, false) => &["first-touch", "2000", "536870912", "thp"],
            (Program::FirstTouchThp, true) => &["first-touch", "100", "16777216", "thp"],
            (Program::Sparse, _) => {
                let (bytes, stride) = sparse(smoke);
                return vec!["sparse".into(), bytes.to_string(), stride.to_string()];
            }
            (Program::Recycle, false) => &["recycle", "20", "268435456"],
            (Program::Recycle, true) => &["recycle", "4", "16777216"],
            (Program::Busy, false) => &["busy", "40", "67108864"],
            (Program::Busy, true) => &["busy", "4", "4194304"],
            (Program::Exit, false) => &["exit", "40", "67108864"],
            (Program::Exit, true) => &["exit", "4", "4194304"],
            (Program::Pressure, false) => &["hold", "805306368"],
            (Program::Pressure, true) => &["hold", "134217728"],
        };
        v.iter().map(|s| s.to_string()).collect()
    }

    /// The plain program that runs beside this one, for the pressure row.
    pub(super) fn neighbor_args(self, smoke: bool) -> Option<Vec<String>> {
        let bytes = match (self, smoke) {
            (Program::Pressure, false) => "805306368",
            (Program::Pressure, true) => "134217728",
            _ => return None,
        };
        Some(vec!["recycle".into(), "1".into(), bytes.into()])
    }

    /// The memory cgroup's limit the program and its neighbor share.
    pub(super) fn cgroup_limit(smoke: bool) -> usize {
        if smoke {
            256 << 20
        } else {
            1 << 30
        }
    }

    /// Runs per repetition and arm.
    pub(super) fn runs_per_rep(self) -> usize {
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
pub(in crate::bench) const NUMPY: &str = r#"
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
pub(super) fn python_with_numpy() -> Result<PathBuf> {
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
pub(super) fn alloc_programs() -> Result<PathBuf> {
    static EXE: &[u8] = include_bytes!(env!("PREZERO_BENCH_ALLOC"));
    crate::run::cache_file(
        &format!("prezero-bench-alloc-{}", env!("PREZERO_BENCH_ALLOC_HASH")),
        EXE,
        0o700,
    )
}

#[cfg(not(bench_alloc))]
pub(super) fn alloc_programs() -> Result<PathBuf> {
    bail!(
        "the C programs were {} when prezero was built; install a C compiler and rebuild",
        env!("PREZERO_BENCH_ALLOC")
    )
}

/// The sparse program's mapping and stride.
fn sparse(smoke: bool) -> (usize, usize) {
    if smoke {
        SPARSE_SMOKE
    } else {
        SPARSE
    }
}

/// The memory the sparse program touches: its whole 2 MiB blocks.
pub(super) fn sparse_touched(smoke: bool) -> usize {
    let (bytes, stride) = sparse(smoke);
    bytes.div_ceil(stride * (2 << 20)) * (2 << 20)
}

/// An arm of the bench.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(in crate::bench) enum Arm {
    Plain,
    Prezero,
    Lazy,
}

/// What the issue asks of a figure in an arm.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::bench) enum Goal {
    /// plain / this arm at least this much.
    Speedup(&'static str, f64),
    /// This arm's value (bytes) at most this much.
    AtMost(String, f64),
    /// This arm's peak RSS at most this many times plain's, plus this many
    /// bytes.
    RssAtMost(&'static str, f64, f64),
    /// This arm's value at most plain's plus this many nanoseconds.
    AtMostPlainPlus(&'static str, f64),
}

impl Goal {
    pub(in crate::bench) fn text(&self) -> &str {
        match self {
            Goal::Speedup(t, _) | Goal::RssAtMost(t, ..) | Goal::AtMostPlainPlus(t, _) => t,
            Goal::AtMost(t, _) => t,
        }
    }

    /// Whether it is met: by `plain` and the arm's `value` (medians), or
    /// by their peak RSS.
    pub(in crate::bench) fn met(
        &self,
        (plain, value): (f64, f64),
        (plain_rss, rss): (u64, u64),
    ) -> bool {
        match *self {
            Goal::Speedup(_, min) => plain / value.max(1.0) >= min,
            Goal::AtMost(_, max) => value <= max,
            Goal::RssAtMost(_, most, plus) => rss as f64 <= most * plain_rss as f64 + plus,
            Goal::AtMostPlainPlus(_, plus) => value <= plain + plus,
        }
    }
}

/// What the issue asks of a row in `arm`, to print beside it; `reserve`: the
/// lazy arm's reserve, in bytes, whether it fills ahead of demand (a
/// reserve asked for, `--reserve`: the first touch is served from it) or
/// grows with demand (the default: a program that takes its memory once is
/// never slower, nor more than 10% bigger, than plainly), and whether a
/// command's history fills it ahead from its second run (the default: the
/// first touch is served from it then, at the same RSS).
pub(super) fn goal(
    program: Program,
    figure: &str,
    arm: Arm,
    smoke: bool,
    LazyReserve(reserve, ahead, history): LazyReserve,
) -> Option<Goal> {
    let ready = ahead || history;
    match (arm, program, figure) {
        (Arm::Prezero, Program::Numpy, "first_pass") => Some(Goal::Speedup(">= 2x", 2.0)),
        (Arm::Prezero, Program::Small, "work") => Some(Goal::Speedup(">= 0.97x", 0.97)),
        (Arm::Prezero, Program::ReallocGrow, "work") => Some(Goal::Speedup(">= 0.91x", 1.0 / 1.1)),
        (Arm::Lazy, Program::FirstTouch, "work") if ready => Some(Goal::Speedup(">= 5x", 5.0)),
        (Arm::Lazy, Program::FirstTouchThp, "work") if ready => Some(Goal::Speedup(">= 3x", 3.0)),
        (Arm::Lazy, Program::FirstTouch | Program::FirstTouchThp, "work") => {
            Some(Goal::Speedup(">= 1x", 1.0))
        }
        (Arm::Lazy, Program::FirstTouch | Program::FirstTouchThp, "process") if !ahead => {
            Some(Goal::RssAtMost("RSS <= 1.1x", 1.1, 0.0))
        }
        (Arm::Lazy, Program::Recycle, "work") => Some(Goal::Speedup(">= 5x", 5.0)),
        (Arm::Prezero | Arm::Lazy, Program::Exit, "worst") => {
            Some(Goal::AtMostPlainPlus("<= plain + 20 ms", 20e6))
        }
        (Arm::Lazy, Program::Sparse, "rss_anon") => {
            let held = if ahead { reserve } else { 0 };
            let bound = 1.1 * (sparse_touched(smoke) + held) as f64;
            Some(Goal::AtMost(
                format!("<= {:.0} MiB", bound / (1u64 << 20) as f64),
                bound,
            ))
        }
        _ => None,
    }
}
