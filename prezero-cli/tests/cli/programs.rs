//! `bench programs`: a line (or a JSON row) per program and arm, a program
//! not installed said as a skip naming its package, the scratch directory
//! gone afterwards, and options it cannot take refused with a clear error.

use super::*;

/// `prezero bench programs ARGS` with `TMPDIR` in a directory of the test's
/// own (asserted empty afterwards: the generated inputs are removed) and,
/// when given, `PATH` only `path`.
fn programs(args: &[&str], path: Option<&std::path::Path>) -> (bool, String, String) {
    let tmp = tmp();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_prezero"));
    cmd.args(["bench", "programs"])
        .args(args)
        .env("TMPDIR", tmp.path());
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    let out = cmd.output().unwrap();
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `sort` must be there: coreutils is in every Debian.
fn sort_or_skip() -> bool {
    if !std::path::Path::new("/usr/bin/sort").is_file() {
        prezero_testkit::skip("tool", "no /usr/bin/sort (coreutils)");
        return false;
    }
    true
}

#[test]
fn a_program_runs_in_each_arm_and_its_goals_are_shown() {
    if !sort_or_skip() {
        return;
    }
    let (ok, out, err) = programs(&["--only", "sort", "--reps", "1"], None);
    assert!(ok, "{err}");
    for arm in ["plain", "prezero", "lazy"] {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().take(2).eq(["sort", arm]))
            .unwrap_or_else(|| panic!("no {arm} line:\n{out}"));
        assert!(line.contains(" s ") && line.contains(" MiB "), "{line}");
        // Plain is the baseline: only the prezero arms have goals.
        assert_eq!(line.contains(">= 0.97x"), arm != "plain", "{line}");
        assert_eq!(
            line.contains("RSS <= 1.1x + 16 MiB"),
            arm != "plain",
            "{line}"
        );
    }
}

#[test]
fn json_has_a_row_per_arm_with_the_spread_and_the_goals() {
    if !sort_or_skip() {
        return;
    }
    let (ok, out, err) = programs(&["--only", "sort", "--reps", "2", "--json"], None);
    assert!(ok, "{err}");
    let rows = json_lines(&out);
    let arms: Vec<&str> = rows.iter().map(|r| r["arm"].as_str().unwrap()).collect();
    assert_eq!(arms, ["plain", "prezero", "lazy"]);
    for r in &rows {
        assert_eq!(r["bench"], "programs");
        assert_eq!(r["program"], "sort");
        assert_eq!(r["runs"], 2);
        assert_eq!(r["first_touch"], false);
        let time = |k: &str| r[k].as_f64().unwrap();
        assert!(time("time_min_ms") <= time("time_ms") && time("time_ms") <= time("time_max_ms"));
        let rss = |k: &str| r[k].as_u64().unwrap();
        assert!(rss("peak_rss_min_bytes") <= rss("peak_rss_bytes"), "{r}");
        assert!(rss("peak_rss_bytes") <= rss("peak_rss_max_bytes"), "{r}");
        assert!(rss("peak_rss_min_bytes") > 0, "{r}");
        assert_eq!(r["time_goal_met"].is_boolean(), r["arm"] != "plain", "{r}");
        assert_eq!(r["rss_goal_met"].is_boolean(), r["arm"] != "plain", "{r}");
    }
    assert_eq!(rows[0]["speedup"], 1.0);
    assert_eq!(rows[0]["rss_ratio"], 1.0);
}

#[test]
fn a_program_not_installed_is_a_line_naming_its_package() {
    if !sort_or_skip() {
        return;
    }
    // A PATH with sort alone: no sqlite3 on it.
    let bin = tmp();
    std::os::unix::fs::symlink("/usr/bin/sort", bin.join("sort")).unwrap();
    let (ok, out, err) = programs(&["--only", "sort,sqlite", "--reps", "1"], Some(bin.path()));
    assert!(ok, "{err}");
    assert!(
        err.contains("prezero: not measured: the sqlite row: no sqlite3 on PATH: install sqlite3"),
        "{err}"
    );
    assert!(
        out.contains("# no sqlite row: no sqlite3 on PATH: install sqlite3"),
        "{out}"
    );
    assert!(out.lines().any(|l| l.starts_with("sort ")), "{out}");
    // Nothing to run at all is an error, after the same lines.
    let (ok, _, err) = programs(&["--only", "sqlite", "--reps", "1"], Some(bin.path()));
    assert!(!ok && err.contains("no program could run here"), "{err}");
    assert!(err.contains("install sqlite3"), "{err}");
}

#[test]
fn options_it_cannot_take_are_clear_errors() {
    let (ok, _, err) = programs(&["--only", "emacs"], None);
    assert!(!ok, "{err}");
    assert!(err.contains("unknown program \"emacs\""), "{err}");
    assert!(
        err.contains("java-pretouch, python-bytearray, sort"),
        "{err}"
    );
    let (ok, _, err) = programs(&["--reps", "0"], None);
    assert!(!ok && err.contains("--reps must be at least 1"), "{err}");
    let (ok, _, err) = programs(&["--reps", "many"], None);
    assert!(!ok && err.contains("invalid value 'many'"), "{err}");
}
