//! `prezero bench all`: every benchmark in sequence (each as its own `--json`
//! run of this binary), the rows kept together, optionally an HTML report.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::Progress;

#[derive(clap::Args)]
pub struct Args {
    /// Smaller sizes and fewer repetitions: the whole run in under two minutes.
    #[arg(long)]
    quick: bool,
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

fn steps(quick: bool, reserve: bool) -> Vec<Vec<&'static str>> {
    let mut v: Vec<Vec<&str>> = if quick {
        vec![
            vec!["clear", "--sizes", "4K,64K,2M,32M,256M,1G", "--reps", "3", "--strategies",
                 "auto,auto-plain,rep-stosb,avx512-nt,avx2-nt,movnti,avx512,avx2,memset,page-at-a-time,rep-stosb-32m,bounded-1m"],
            vec!["mmap", "-p", "4KB,thp", "-s", "1G", "-l", "3"],
            vec!["faults", "-s", "256M", "-r", "1"],
            vec!["pool", "--samples", "128", "--lines", "1,8", "--volume", "512M", "--host-cold-wait", "0"],
            vec!["template", "--records", "4194304", "--reps", "3"],
        ]
    } else {
        vec![
            vec!["clear"],
            vec!["mmap", "-p", "4KB,thp,2MB", "-s", "4G", "-l", "5"],
            vec!["faults"],
            vec!["pool"],
            vec!["template"],
        ]
    };
    let service: Vec<&str> = if quick {
        vec![
            "service",
            "--sizes",
            "2M,64M,1G",
            "--reps",
            "20",
            "--boot",
            "2G",
            "--boot-runs",
            "2",
        ]
    } else {
        vec!["service"]
    };
    if reserve {
        for s in &mut v {
            if matches!(s[0], "mmap" | "pool") {
                s.push("--reserve");
            }
        }
        v.push(service);
        v.last_mut().expect("just pushed").push("--reserve");
    } else {
        eprintln!("prezero: bench service skipped: its daemon needs hugetlb pages (rerun with --reserve, as root)");
    }
    v
}

/// Runs `prezero <args> --json` and parses its lines.
fn run_json(args: &[&str]) -> Result<Vec<Value>, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .args(args)
        .arg("--json")
        .output()
        .map_err(|e| e.to_string())?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    for line in stderr.lines().filter(|l| l.starts_with("prezero:")) {
        eprintln!("{line}");
    }
    if !out.status.success() {
        return Err(format!(
            "prezero {} failed: {}",
            args.join(" "),
            stderr.trim()
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            serde_json::from_str(l)
                .map_err(|e| format!("prezero {}: bad JSON line: {e}", args.join(" ")))
        })
        .collect()
}

pub fn run(args: &Args) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if args.reserve && !root {
        eprintln!("prezero: --reserve needs root (it writes nr_hugepages): running without it");
    }
    let steps = steps(args.quick, args.reserve && root);
    let mut progress = Progress::new(steps.len() as u64 + 1);
    progress.step("info".into());
    let mut info = run_json(&["info"])?
        .into_iter()
        .next()
        .unwrap_or(Value::Null);
    info["bench"] = Value::from("info");
    let mut rows = Vec::new();
    for s in &steps {
        progress.step(format!("bench {}", s[0]));
        let mut argv = vec!["bench"];
        argv.extend(s);
        rows.extend(run_json(&argv)?);
    }
    progress.finish();
    if let Some(path) = &args.json_out {
        let text: String = std::iter::once(&info)
            .chain(&rows)
            .map(|r| format!("{r}\n"))
            .collect();
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("prezero: wrote {} rows to {}", rows.len(), path.display());
    }
    if let Some(path) = &args.report {
        let html = crate::report::render(&info, &rows);
        std::fs::write(path, html).map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("prezero: wrote the report to {}", path.display());
    }
    if args.json_out.is_none() && args.report.is_none() {
        for r in &rows {
            println!("{r}");
        }
    }
    Ok(())
}
