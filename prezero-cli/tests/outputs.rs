//! Commands that write a file check it before their work: a run of minutes that
//! could not write its result used to fail only at its end, its work lost.

use std::process::Command;

use prezero_testkit::TempDir;

/// Runs `prezero args`: whether it succeeded, and its stderr.
fn prezero(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_prezero"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A directory of the calling test's own, removed when it ends, pass or fail.
fn tmp() -> TempDir {
    TempDir::new("outputs-test")
}

#[test]
fn bench_all_refuses_an_output_it_cannot_write_before_measuring() {
    for (flag, what) in [("--report", "the report"), ("--json-out", "the rows")] {
        let (ok, err) = prezero(&["bench", "all", "--smoke", flag, "/proc/nope/x.html"]);
        assert!(!ok, "{flag}: {err}");
        assert!(
            err.contains(&format!("cannot write {what} to /proc/nope/x.html")),
            "{flag}: {err}"
        );
        // Nothing ran: no step's progress line.
        assert!(!err.contains("info"), "{flag}: a step ran first: {err}");
    }
}

#[test]
fn calibrate_refuses_an_output_it_cannot_write_before_measuring() {
    let (ok, err) = prezero(&["calibrate", "--out", "/proc/nope/profile.json"]);
    assert!(!ok, "{err}");
    assert!(err.contains("cannot create /proc/nope"), "{err}");
    let files = tmp();
    let dir = files.join("read-only");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("profile.json");
    std::fs::write(&file, "kept").unwrap();
    // A directory in place of the file.
    let (ok, err) = prezero(&["calibrate", "--out", dir.to_str().unwrap()]);
    assert!(!ok, "{err}");
    assert!(err.contains("cannot write the profile"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "kept");
}

#[test]
fn report_says_what_is_wrong_with_its_input_and_output() {
    let dir = tmp();
    let text = dir.join("not-rows.txt");
    std::fs::write(&text, "hello\nthis is not JSON\n").unwrap();
    let out = dir.join("report.html");
    let (ok, err) = prezero(&[
        "report",
        text.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!ok, "{err}");
    assert!(err.contains("holds no JSON row"), "{err}");
    assert!(!out.exists(), "a failed report left {}", out.display());
    let rows = dir.join("rows.jsonl");
    std::fs::write(&rows, "{\"bench\":\"info\"}\n").unwrap();
    let (ok, err) = prezero(&[
        "report",
        rows.to_str().unwrap(),
        "--out",
        "/proc/nope/r.html",
    ]);
    assert!(!ok, "{err}");
    assert!(
        err.contains("cannot write the report to /proc/nope/r.html"),
        "{err}"
    );
}
