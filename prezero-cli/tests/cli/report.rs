//! `bench all` into a report: every step's rows, and a failed step's
//! neighbours kept.

use super::*;

const BENCHES: [&str; 6] = ["clear", "mmap", "faults", "pool", "template", "service"];

/// `bench all --smoke` into a report and JSON lines in a directory of its own
/// (`--reserve` as root, so the service step runs); its status, stderr, and
/// the rows, `info` first.
fn bench_all_smoke(
    dir: &str,
    env: &[(&str, &str)],
) -> (
    std::process::ExitStatus,
    String,
    String,
    Vec<serde_json::Value>,
) {
    let files = TempDir::new(&format!("cli-report-{dir}"));
    let (report, json) = (files.join("r.html"), files.join("r.jsonl"));
    let mut args = vec![
        "bench",
        "all",
        "--smoke",
        "--report",
        report.to_str().unwrap(),
        "--json-out",
        json.to_str().unwrap(),
    ];
    if is_root() {
        args.push("--reserve");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_prezero"))
        .args(&args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let html = std::fs::read_to_string(&report).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let rows = json_lines(&std::fs::read_to_string(&json).unwrap());
    assert_eq!(rows[0]["bench"], "info");
    (out.status, stderr, html, rows)
}

fn benches_with_rows(rows: &[serde_json::Value]) -> Vec<&str> {
    BENCHES
        .into_iter()
        .filter(|b| rows.iter().any(|r| r["bench"] == *b))
        .collect()
}

#[test]
fn bench_all_smoke_runs_every_step_into_the_report() {
    let _hugetlb = hugetlb_lock();
    // As a CPU without AVX-512, where a hand-written strategy list once
    // stopped the whole run.
    let env: &[(&str, &str)] = if cfg!(target_arch = "x86_64") {
        &[("PREZERO_CPU", "-avx512f")]
    } else {
        &[]
    };
    let (status, err, html, rows) = bench_all_smoke("smoke", env);
    assert!(status.success(), "{err}");
    for step in std::iter::once("info").chain(BENCHES) {
        assert!(
            html.contains(&format!("<td>{step}</td>")),
            "{step} not in the report"
        );
    }
    assert!(!html.contains("steps failed"), "{err}");
    // The report read every row the benches wrote, and opens with its answer.
    assert!(!html.contains("Rows not read"), "{html}");
    assert!(html.contains("<h2>What prezero gives on this machine</h2>"));
    let service_ran = is_root();
    let want = &BENCHES[..if service_ran { 6 } else { 5 }];
    assert_eq!(benches_with_rows(&rows), want, "{err}");
    // `prezero run`'s programs (the C ones at least, built with this binary).
    assert!(html.contains("<td>run</td>"), "run not in the report");
    assert!(
        rows.iter()
            .any(|r| r["bench"] == "run" && r["program"] == "calloc-big"),
        "{err}"
    );
    // The real programs' step (sort, in coreutils), and its table first.
    assert!(
        rows.iter()
            .any(|r| r["bench"] == "programs" && r["program"] == "sort"),
        "{err}"
    );
    assert!(html.contains("<h2>Real programs</h2>"));
    // Every kernel measured is one this CPU (as masked) has.
    let kernels = rows[0]["kernels"].as_array().unwrap();
    for r in rows.iter().filter(|r| r["bench"] == "clear") {
        if let Some(k) = kernels.iter().find(|k| k["name"] == r["strategy"]) {
            assert_eq!(k["available"], true, "{r}");
        }
    }
    assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count());
}

#[test]
fn a_failed_step_keeps_the_rows_of_the_others() {
    if !is_root() {
        prezero_testkit::skip(
            "root",
            "the step made to fail (service) runs only with --reserve, as root",
        );
        return;
    }
    let _hugetlb = hugetlb_lock();
    // The service bench starts its daemon in a directory under TMPDIR, and
    // the programs bench generates its inputs in one: a file there fails
    // those two steps alone.
    let files = tmp();
    let not_a_dir = files.join("not-a-directory");
    std::fs::write(&not_a_dir, "").unwrap();
    let (status, err, html, rows) =
        bench_all_smoke("failed", &[("TMPDIR", not_a_dir.to_str().unwrap())]);
    assert_eq!(status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("prezero: bench all: 2 of 9 steps failed: service (")
            && last.contains("Not a directory")
            && last.contains("), programs (cannot make a directory like "),
        "{err}"
    );
    assert!(
        err.contains("service failed") && err.contains("  | prezero: "),
        "{err}"
    );
    assert_eq!(benches_with_rows(&rows), &BENCHES[..5]);
    assert!(html.contains("2 of 9 steps failed: service, programs."));
    let run = rows.iter().find(|r| r["bench"] == "all").unwrap();
    let service = &run["steps"][6];
    assert_eq!(service["step"], "service");
    assert_eq!(service["status"], "failed");
}
