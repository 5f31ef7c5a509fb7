//! `prezero bench all`: every benchmark in sequence (each as its own `--json`
//! run of this binary), the rows kept together, optionally an HTML report.
//! A step that fails is reported and the others still run: every row measured
//! is written, and the run fails at the end, naming the steps that failed.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use prezero::Kernel;

use super::clear::Method;
use super::progress::Progress;
use crate::rows::{self, AllRun, Row, Status};

#[derive(clap::Args)]
pub struct Args {
    /// Smaller sizes and fewer repetitions: the whole run in under two minutes.
    #[arg(long)]
    quick: bool,
    /// Tiny sizes, one repetition: every step (and the report) in seconds, to
    /// check that the run works here; the figures mean little.
    #[arg(long, conflicts_with = "quick")]
    smoke: bool,
    /// Write a self-contained HTML report (inline SVG charts, opens offline).
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Write every row (and the machine description) as JSON lines.
    #[arg(long, value_name = "FILE")]
    json_out: Option<PathBuf>,
    /// Reserve hugetlb pages for the rows that need them (restored afterwards; root).
    #[arg(long)]
    reserve: bool,
}

#[derive(Clone, Copy)]
enum Scale {
    Full,
    Quick,
    Smoke,
}

impl Scale {
    fn name(self) -> &'static str {
        match self {
            Scale::Full => "full",
            Scale::Quick => "quick",
            Scale::Smoke => "smoke",
        }
    }
}

/// One run of this binary, `prezero <argv> --json`, unless it is skipped.
struct Step {
    name: &'static str,
    argv: Vec<String>,
    skipped: Option<&'static str>,
}

impl Step {
    fn new(name: &'static str, argv: &[&str]) -> Step {
        Step {
            name,
            argv: argv.iter().map(|a| a.to_string()).collect(),
            skipped: None,
        }
    }
}

/// Quick's clear strategies: every one this CPU has, less the rows a short run
/// can spare: portable (it is memset), the kernel's 8 MiB batch (its 32 MiB
/// one stays) and parallel (several cores, not one strategy against another).
fn quick_strategies() -> String {
    Method::all()
        .into_iter()
        .filter(|m| match m {
            Method::Kernel(Kernel::Portable) | Method::Parallel(_) => false,
            Method::Chunks(_, n) => *n != 8 << 20,
            _ => true,
        })
        .map(Method::name)
        .collect::<Vec<_>>()
        .join(",")
}

/// The benches in the order they run, each with its arguments.
type Benches<'a> = [(&'static str, Vec<&'a str>); 8];

/// `info`, then every benchmark at the sizes of `scale`.
fn steps(scale: Scale, reserve: bool) -> Vec<Step> {
    let strategies = quick_strategies();
    let benches = match scale {
        Scale::Full => full_benches(reserve),
        Scale::Quick => quick_benches(&strategies),
        Scale::Smoke => smoke_benches(),
    };
    let mut v = vec![Step::new("info", &["info"])];
    for (name, mut args) in benches {
        if reserve && matches!(name, "mmap" | "pool" | "service") {
            args.push("--reserve");
        }
        let mut step = Step::new(name, &[&["bench", name][..], &args].concat());
        if name == "service" && !reserve {
            step.skipped = Some("its daemon needs hugetlb pages: rerun with --reserve, as root");
        }
        v.push(step);
    }
    v
}

/// The full run's arguments.
fn full_benches(reserve: bool) -> Benches<'static> {
    [
        ("clear", vec![]),
        (
            "mmap",
            // 4 GiB of 2 MiB pages only when the run may reserve them.
            vec![
                "-p",
                if reserve { "4KB,thp,2MB" } else { "4KB,thp" },
                "-s",
                "4G",
                "-l",
                "5",
            ],
        ),
        ("faults", vec![]),
        ("pool", vec![]),
        ("template", vec![]),
        ("service", vec![]),
        ("run", vec![]),
        ("programs", vec![]),
    ]
}

/// The quick run's arguments; `strategies`, the clear strategies it keeps.
fn quick_benches(strategies: &str) -> Benches<'_> {
    [
        (
            "clear",
            // 256 MiB is past the LLC of most machines; 1 GiB (the
            // full run's) took two thirds of this step.
            vec![
                "--sizes",
                "4K,64K,2M,32M,256M",
                "--reps",
                "3",
                "--strategies",
                &strategies,
            ],
        ),
        ("mmap", vec!["-p", "4KB,thp", "-s", "1G", "-l", "3"]),
        ("faults", vec!["-s", "256M", "-r", "1"]),
        (
            "pool",
            vec![
                "--samples",
                "128",
                "--lines",
                "1,8",
                "--volume",
                "512M",
                "--host-cold-wait",
                "0",
            ],
        ),
        ("template", vec!["--records", "4194304", "--reps", "3"]),
        (
            "service",
            vec![
                "--sizes",
                "2M,64M,1G",
                "--reps",
                "20",
                "--boot",
                "2G",
                "--boot-runs",
                "2",
                "--vmm-size",
                "1G",
                "--vmm-runs",
                "3",
            ],
        ),
        // Its first-touch programs compute 2 s before they touch memory;
        // the rows of programs beside busy CPUs (busy, exit: 95 s) and the
        // THP first touch are the full run's only.
        (
            "run",
            vec![
                "--reps",
                "2",
                "--only",
                "numpy,calloc-big,calloc-mix,small,realloc-grow,first-touch,sparse,recycle,pressure",
            ],
        ),
        // Python's bytearray and sort, 3 repetitions: ~15 s.
        ("programs", vec!["--quick"]),
    ]
}

/// Every case of every bench, each as small as it goes; two sizes or
/// line counts where the report draws a line through them.
fn smoke_benches() -> Benches<'static> {
    [
        ("clear", vec!["--sizes", "4K,64K", "--reps", "1"]),
        ("mmap", vec!["-p", "4KB,thp", "-s", "8M", "-l", "1"]),
        ("faults", vec!["-s", "8M", "-r", "1"]),
        (
            "pool",
            vec![
                "--samples",
                "8",
                "--lines",
                "1,8",
                "--inflight",
                "1,4",
                "--volume",
                "32M",
                "--host-cold-wait",
                "0",
                "--backlog",
                "64M",
                "--foreground",
                "0.1",
            ],
        ),
        ("template", vec!["--records", "5000", "--reps", "1"]),
        (
            "service",
            vec![
                "--sizes",
                "2M",
                "--reps",
                "1",
                "--boot",
                "256M",
                "--boot-runs",
                "1",
                "--vmm-size",
                "64M",
                "--vmm-runs",
                "1",
            ],
        ),
        ("run", vec!["--smoke", "--reps", "1"]),
        ("programs", vec!["--only", "sort", "--reps", "1"]),
    ]
}

/// What one step did.
struct Outcome {
    name: &'static str,
    command: String,
    /// Every row it printed, also those before a failure.
    rows: Vec<Value>,
    /// What it said it did not measure, and why.
    not_measured: Vec<String>,
    status: Status,
}

/// Lines of a failed step's stderr shown, and kept for the report.
const TAIL_LINES: usize = 8;

/// Runs `exe <step.argv> --json`, keeping every JSON line it printed.
fn run_step(exe: &Path, step: &Step) -> Outcome {
    let mut outcome = Outcome {
        name: step.name,
        command: format!("prezero {} --json", step.argv.join(" ")),
        rows: Vec::new(),
        not_measured: Vec::new(),
        status: Status::Ok,
    };
    if let Some(why) = step.skipped {
        eprintln!("prezero: bench all: {} skipped: {why}", step.name);
        outcome.status = Status::Skipped {
            reason: why.to_string(),
        };
        return outcome;
    }
    let out = match Command::new(exe).args(&step.argv).arg("--json").output() {
        Ok(out) => out,
        Err(e) => {
            let reason = format!("cannot run {}: {e}", exe.display());
            eprintln!("prezero: bench all: {} failed: {reason}", step.name);
            outcome.status = Status::Failed {
                reason,
                stderr_tail: Vec::new(),
            };
            return outcome;
        }
    };
    let mut bad_json = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if line.starts_with('{') {
            match serde_json::from_str(line) {
                Ok(v) => outcome.rows.push(v),
                Err(e) => {
                    bad_json.get_or_insert_with(|| format!("bad JSON line: {e}"));
                }
            }
        }
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    outcome.not_measured = lines
        .iter()
        .filter_map(|l| l.strip_prefix(super::NOT_MEASURED))
        .map(str::to_string)
        .collect();
    let reason = if out.status.success() {
        // A bench that measured nothing must not read as "ok" in the report.
        bad_json.or_else(|| {
            outcome
                .rows
                .is_empty()
                .then(|| "it printed no rows".to_string())
        })
    } else {
        // The error main printed last; a panic's last line is a "note:".
        let last = lines.iter().rev().find(|l| !l.starts_with("note: "));
        Some(match (last, out.status.code()) {
            (Some(l), Some(_)) => l.strip_prefix("prezero: ").unwrap_or(l).to_string(),
            _ => out.status.to_string(),
        })
    };
    match reason {
        None => {
            for l in lines.iter().filter(|l| l.starts_with("prezero:")) {
                eprintln!("{l}");
            }
        }
        Some(reason) => {
            let tail: Vec<String> = lines[lines.len().saturating_sub(TAIL_LINES)..]
                .iter()
                .map(|l| l.to_string())
                .collect();
            eprintln!(
                "prezero: bench all: {} failed ({}); the last lines of its stderr:",
                step.name, out.status
            );
            for l in &tail {
                eprintln!("  | {l}");
            }
            outcome.status = Status::Failed {
                reason,
                stderr_tail: tail,
            };
        }
    }
    outcome
}

/// The run's own row: each step, its command, rows and outcome (the report's
/// "Steps" table).
fn record(scale: Scale, outcomes: &[Outcome]) -> Value {
    let steps = outcomes
        .iter()
        .map(|o| rows::Step {
            step: o.name.to_string(),
            command: o.command.clone(),
            rows: o.rows.len() as u64,
            not_measured: o.not_measured.clone(),
            status: o.status.clone(),
        })
        .collect();
    Row::All(AllRun {
        scale: scale.name().to_string(),
        steps,
    })
    .to_value()
}

/// One line naming every failed step and why, or None when none failed.
fn failure_summary(outcomes: &[Outcome]) -> Option<String> {
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|o| match &o.status {
            Status::Failed { reason, .. } => Some(format!("{} ({})", o.name, shorten(reason))),
            _ => None,
        })
        .collect();
    if failed.is_empty() {
        return None;
    }
    let ran = outcomes
        .iter()
        .filter(|o| !matches!(o.status, Status::Skipped { .. }))
        .count();
    Some(format!(
        "bench all: {} of {ran} steps failed: {}",
        failed.len(),
        failed.join(", ")
    ))
}

/// At most 160 characters, so the summary stays one readable line.
fn shorten(reason: &str) -> String {
    const MAX: usize = 160;
    match reason.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}...", &reason[..at]),
        None => reason.to_string(),
    }
}

pub fn run(args: &Args) -> Result<()> {
    if let Some(path) = &args.json_out {
        crate::output::check_writable(path, "the rows")?;
    }
    if let Some(path) = &args.report {
        crate::output::check_writable(path, "the report")?;
    }
    let root = prezero_sys::geteuid() == 0;
    if args.reserve && !root {
        eprintln!("prezero: --reserve needs root (it writes nr_hugepages): running without it");
    }
    let scale = match (args.quick, args.smoke) {
        (true, _) => Scale::Quick,
        (_, true) => Scale::Smoke,
        _ => Scale::Full,
    };
    let exe = std::env::current_exe().context("cannot find this program")?;
    let steps = steps(scale, args.reserve && root);
    let mut progress = Progress::new(steps.len() as u64);
    let outcomes: Vec<Outcome> = steps
        .iter()
        .map(|s| {
            progress.step(s.argv[..s.argv.len().min(2)].join(" "));
            let t = std::time::Instant::now();
            let outcome = run_step(&exe, s);
            // Where the run's time went: the figure to trim a step by.
            progress.println(format!(
                "prezero: step {} took {:.0} s",
                s.name,
                t.elapsed().as_secs_f64()
            ));
            outcome
        })
        .collect();
    progress.finish();

    let (info_step, benches) = outcomes.split_first().expect("info is the first step");
    // Without `info` the report still shows every figure, under an unknown machine.
    let mut info = info_step.rows.first().cloned().unwrap_or_else(|| json!({}));
    info["bench"] = Value::from("info");
    let rows: Vec<Value> = std::iter::once(record(scale, &outcomes))
        .chain(benches.iter().flat_map(|o| o.rows.iter().cloned()))
        .collect();
    let measured = rows.len() - 1;

    let mut errors: Vec<String> = failure_summary(&outcomes).into_iter().collect();
    if let Some(path) = &args.json_out {
        let text: String = std::iter::once(&info)
            .chain(&rows)
            .map(|r| format!("{r}\n"))
            .collect();
        match std::fs::write(path, text) {
            Ok(()) => eprintln!("prezero: wrote {measured} rows to {}", path.display()),
            Err(e) => errors.push(format!("cannot write the rows to {}: {e}", path.display())),
        }
    }
    if let Some(path) = &args.report {
        match std::fs::write(path, crate::report::render(&info, &rows)) {
            Ok(()) => eprintln!("prezero: wrote the report to {}", path.display()),
            Err(e) => errors.push(format!(
                "cannot write the report to {}: {e}",
                path.display()
            )),
        }
    }
    if args.json_out.is_none() && args.report.is_none() {
        for r in &rows[1..] {
            println!("{r}");
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        bail!(errors.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step that is a shell script (`--json` becomes its `$0`).
    fn sh(name: &'static str, script: &str) -> Step {
        Step::new(name, &["-c", script])
    }

    #[test]
    fn a_failed_step_is_named_and_every_row_is_kept() {
        let steps = [
            sh("info", r#"echo '{"cpu": {}}'"#),
            sh(
                "first",
                r#"echo '{"bench": "first"}'; echo 'prezero: a warning' >&2; echo 'prezero: not measured: the numpy row: no numpy' >&2"#,
            ),
            sh(
                "broken",
                r#"echo '{"bench": "broken"}'; echo 'thinking' >&2; echo 'prezero: no such page size' >&2; exit 1"#,
            ),
            sh("last", r#"echo '{"bench": "last"}'"#),
            Step {
                skipped: Some("not today"),
                ..sh("skipped", "exit 1")
            },
        ];
        let outcomes: Vec<Outcome> = steps
            .iter()
            .map(|s| run_step(Path::new("/bin/sh"), s))
            .collect();
        let benches: Vec<&str> = outcomes
            .iter()
            .flat_map(|o| &o.rows)
            .filter_map(|r| r["bench"].as_str())
            .collect();
        assert_eq!(benches, ["first", "broken", "last"]);
        assert_eq!(
            failure_summary(&outcomes).unwrap(),
            "bench all: 1 of 4 steps failed: broken (no such page size)"
        );
        let rec = record(Scale::Smoke, &outcomes);
        let status: Vec<&str> = rec["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["status"].as_str().unwrap())
            .collect();
        assert_eq!(status, ["ok", "ok", "failed", "ok", "skipped"]);
        assert_eq!(
            rec["steps"][2]["stderr_tail"],
            json!(["thinking", "prezero: no such page size"])
        );
        assert_eq!(rec["steps"][2]["rows"], 1);
        // Rows a step left out, and why: kept for the report.
        assert_eq!(
            rec["steps"][1]["not_measured"],
            json!(["the numpy row: no numpy"])
        );
        assert!(rec["steps"][0].get("not_measured").is_none());
    }

    #[test]
    fn a_step_killed_or_panicking_says_how() {
        let outcomes = [
            sh("killed", "kill -9 $$"),
            sh(
                "panicked",
                "printf \"thread 'main' panicked at x.rs:1:1:\\nboom\\nnote: run with RUST_BACKTRACE=1\\n\" >&2; exit 101",
            ),
        ]
        .iter()
        .map(|s| run_step(Path::new("/bin/sh"), s))
        .collect::<Vec<_>>();
        let summary = failure_summary(&outcomes).unwrap();
        assert!(summary.contains("killed (signal: 9"), "{summary}");
        assert!(summary.ends_with("panicked (boom)"), "{summary}");
    }

    #[test]
    fn every_clear_strategy_of_quick_is_one_this_cpu_has() {
        let here: Vec<String> = Method::all().into_iter().map(Method::name).collect();
        let quick = quick_strategies();
        assert!(quick.split(',').all(|s| here.iter().any(|h| h == s)));
        for steps in [
            steps(Scale::Full, true),
            steps(Scale::Quick, true),
            steps(Scale::Smoke, false),
        ] {
            let names: Vec<&str> = steps.iter().map(|s| s.name).collect();
            assert_eq!(
                names,
                [
                    "info", "clear", "mmap", "faults", "pool", "template", "service", "run",
                    "programs"
                ]
            );
        }
    }
}
