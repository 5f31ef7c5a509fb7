//! The `prezero` command end to end, on small sizes: output shape and errors.

use std::process::Command;

fn prezero(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_prezero"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn info_text_and_json() {
    let (ok, out, _) = prezero(&["info"]);
    assert!(ok);
    assert!(out.contains("Kernels") && out.contains("portable"));
    let (ok, out, _) = prezero(&["info", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["cpu"]["logical_cpus"].as_u64().unwrap() >= 1);
    assert_eq!(v["auto"].as_array().unwrap().len(), 9);
}

/// `PREZERO_CPU` narrows what every command sees, and a mask this CPU cannot
/// honour stops every command rather than measure a pretend machine.
#[test]
fn cpu_masks_narrow_and_refuse() {
    let run = |mask: &str, args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_prezero"))
            .args(args)
            .env("PREZERO_CPU", mask)
            .output()
            .expect("run prezero");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), stdout, stderr)
    };
    let (code, _, err) = run("-no-such-feature", &["info"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("unknown feature 'no-such-feature'"), "{err}");
    // One line, which says what happens: not the library's "using no
    // optional CPU feature" before a stop.
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.trim_end().ends_with("; stopping"), "{err}");
    let (code, _, _) = run("x86-64-v9,armv9.9", &["bench", "clear", "--sizes", "4K"]);
    assert_eq!(code, Some(2));

    let (code, out, err) = run("", &["info", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let native: serde_json::Value = serde_json::from_str(&out).unwrap();
    let features = native["cpu"]["features"].as_object().unwrap().clone();
    // Remove every feature this CPU has: only kernels that need none remain.
    let all: Vec<String> = features.keys().map(|k| format!("-{k}")).collect();
    let (code, out, err) = run(&all.join(","), &["info", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let masked: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(masked["cpu"]["mask"], all.join(","));
    assert_eq!(masked["cpu"]["detected"], native["cpu"]["features"]);
    assert!(masked["cpu"]["features"]
        .as_object()
        .unwrap()
        .values()
        .all(|v| v == false));
    for k in masked["kernels"].as_array().unwrap() {
        if k["available"] == true {
            assert!(
                matches!(k["needs"].as_str(), Some("nothing" | "x86_64")),
                "{k} survived the mask"
            );
        }
    }
}

#[test]
fn bench_clear_json_lines() {
    let (ok, out, err) = prezero(&[
        "bench",
        "clear",
        "--mode",
        "hot",
        "--sizes",
        "4K,64K",
        "--strategies",
        "auto,memset,page-at-a-time",
        "--reps",
        "2",
        "--json",
    ]);
    assert!(ok, "{err}");
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 6);
    for r in rows {
        assert_eq!(r["bench"], "clear");
        assert_eq!(r["mode"], "hot");
        assert!(r["gbps"].as_f64().unwrap() > 0.0);
        assert!(r["stdev_pct"].as_f64().is_some());
    }
}

#[test]
fn bench_clear_rejects_unknown_strategies_and_sizes() {
    let (ok, _, err) = prezero(&["bench", "clear", "--strategies", "nonsense"]);
    assert!(!ok && err.contains("unknown or unavailable strategy"));
    let (ok, _, err) = prezero(&["bench", "clear", "--sizes", "4X"]);
    assert!(!ok && err.contains("unknown unit"));
}

#[test]
fn bench_mmap_json_and_perf_text() {
    let (ok, out, err) = prezero(&[
        "bench", "mmap", "-p", "4KB,thp", "-s", "8M", "-l", "2", "--json",
    ]);
    assert!(ok, "{err}");
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 8, "4 functions x 2 page kinds");
    assert!(rows.iter().any(|r| r["function"] == "pool"));
    assert!(rows
        .iter()
        .all(|r| r["bench"] == "mmap" && r["host"] == "warm" && r["gbps"].as_f64().unwrap() > 0.0));
    let (ok, out, _) = prezero(&["bench", "mmap", "-f", "demand", "-s", "4M", "-l", "1"]);
    assert!(ok);
    assert!(out.contains("# function 'demand'") && out.contains("GB/sec +-"));
}

#[test]
fn bench_mmap_hugetlb_shortage_is_explained() {
    let Some(pool) = prezero::mm::hugetlb_pool(1 << 30) else {
        prezero_testkit::skip("hugetlb", "no 1 GiB hugetlb pool");
        return;
    };
    let size = format!("{}G", pool.free + 1);
    let (ok, _, err) = prezero(&["bench", "mmap", "-p", "1GB", "-s", &size, "-l", "1"]);
    assert!(!ok);
    assert!(
        err.contains("--reserve") && err.contains("nr_hugepages"),
        "{err}"
    );
}

#[test]
fn bench_faults_prints_both_tables() {
    let (ok, out, err) = prezero(&["bench", "faults", "-s", "8M", "-r", "1", "-p", "4KB"]);
    assert!(ok, "{err}");
    assert!(out.contains("Gb Rep Threads CLine   User    System   Wall  flt/cpu/s  fault/wsec"));
    assert!(out.contains("kernel (") && out.contains("prezero ("));
}

/// Held by tests that may grow the hugetlb pool: a reservation restores the
/// total it found, so two at once could leave the other's pages behind.
static HUGETLB: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn hugetlb_lock() -> std::sync::MutexGuard<'static, ()> {
    HUGETLB.lock().unwrap_or_else(|e| e.into_inner())
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn reserve_is_undone_on_ctrl_c() {
    let _hugetlb = hugetlb_lock();
    const NR: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
    let read = || {
        std::fs::read_to_string(NR)
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
    };
    let Some(before) = read() else {
        prezero_testkit::skip("hugetlb", "no 2 MiB hugetlb pool");
        return;
    };
    if std::fs::write(NR, before.to_string()).is_err() {
        prezero_testkit::skip("root", format!("cannot write {NR} (not root)"));
        return;
    }
    let free = prezero::mm::hugetlb_pool(2 << 20).unwrap().free;
    let pages = free + 256;
    let size = format!("{}M", pages * 2);
    let mut child = Command::new(env!("CARGO_BIN_EXE_prezero"))
        .args([
            "bench",
            "mmap",
            "-p",
            "2MB",
            "-f",
            "demand",
            "-s",
            &size,
            "-l",
            "1000",
            "--reserve",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the pool has grown, i.e. the reservation (and its handler) is in place.
    let t = std::time::Instant::now();
    while read() == Some(before) && t.elapsed().as_secs() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if read() == Some(before) {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        prezero_testkit::skip(
            "state",
            format!(
                "the pool never grew: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        );
        return;
    }
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "interrupted run should exit 130");
    assert_eq!(
        read(),
        Some(before),
        "hugetlb pool not restored after Ctrl-C"
    );
}

#[test]
fn bench_pool_json_rows() {
    let (ok, out, err) = prezero(&[
        "bench",
        "pool",
        "--cases",
        "handout,sustained",
        "--samples",
        "8",
        "--lines",
        "1",
        "--inflight",
        "1,4",
        "--volume",
        "32M",
        "--host-cold-wait",
        "0",
        "--json",
    ]);
    assert!(ok, "{err}");
    let rows = json_lines(&out);
    let handout: Vec<_> = rows.iter().filter(|r| r["case"] == "handout").collect();
    assert!(handout
        .iter()
        .any(|r| r["source"] == "pool-warm" && r["p99_us"].as_f64().unwrap() > 0.0));
    let sustained: Vec<_> = rows.iter().filter(|r| r["case"] == "sustained").collect();
    for src in ["pool-scrub", "pool-noscrub", "mmap-thp", "calloc"] {
        assert_eq!(
            sustained.iter().filter(|r| r["source"] == src).count(),
            2,
            "{src}"
        );
    }
    assert!(sustained
        .iter()
        .filter(|r| r["source"] == "mmap-thp")
        .all(|r| r["host"] == "warm"));
    let (ok, _, err) = prezero(&["bench", "pool", "--cases", "nonsense"]);
    assert!(!ok && err.contains("unknown case"));
}

#[test]
fn bench_template_json_rows() {
    let (ok, out, err) = prezero(&[
        "bench",
        "template",
        "--records",
        "5000",
        "--reps",
        "2",
        "--json",
    ]);
    assert!(ok, "{err}");
    let rows = json_lines(&out);
    // The C reference is built wherever gcc was (x86_64); elsewhere the bench says why not.
    let c_built = !err.contains("no c-reference row");
    let methods = [
        "per-field",
        "template-copy",
        "template-stream",
        "template-words",
        "c-reference",
        "ceiling",
    ];
    assert_eq!(rows.len(), 2 * (5 + usize::from(c_built)), "{out}");
    for m in methods {
        let want = if m == "c-reference" && !c_built { 0 } else { 2 };
        assert_eq!(
            rows.iter().filter(|r| r["method"] == m).count(),
            want,
            "{m}"
        );
    }
    assert!(rows
        .iter()
        .all(|r| r["records"] == 5000 && r["ms"].as_f64().unwrap() > 0.0));
    // The ceiling is the fastest streaming kernel, named, with every candidate's time.
    for r in rows.iter().filter(|r| r["method"] == "ceiling") {
        let k = r["kernel"].as_str().unwrap();
        let cands = r["candidates_median_ms"].as_object().unwrap();
        assert!(cands.contains_key(k), "{r}");
        let best = cands
            .values()
            .map(|v| v.as_f64().unwrap())
            .fold(f64::MAX, f64::min);
        assert_eq!(r["median_ms"].as_f64().unwrap(), best, "{r}");
        assert!(cands
            .keys()
            .all(|c| c.parse::<prezero::CopyKernel>().unwrap().is_streaming()));
    }
    // Filters, and the store study.
    let (ok, out, err) = prezero(&[
        "bench",
        "template",
        "--records",
        "3000",
        "--reps",
        "1",
        "--json",
        "--layout",
        "4k",
        "--method",
        "template-words",
    ]);
    assert!(ok, "{err}");
    let rows = json_lines(&out);
    assert!(rows.len() == 1 && rows[0]["method"] == "template-words" && rows[0]["layout"] == "4k");
    let (ok, _, err) = prezero(&["bench", "template", "--method", "nonsense"]);
    assert!(!ok && err.contains("unknown layout or method"), "{err}");
    let (ok, out, err) = prezero(&[
        "bench", "template", "--stores", "--sizes", "64K,1M", "--reps", "1", "--json",
    ]);
    assert!(ok, "{err}");
    let rows = json_lines(&out);
    let kernels = prezero::CopyKernel::ALL
        .iter()
        .filter(|k| k.is_available())
        .count();
    assert_eq!(
        rows.len(),
        2 * 2 * kernels,
        "hot and cold x 2 sizes x kernels"
    );
    assert!(rows
        .iter()
        .all(|r| r["bench"] == "template-stores" && r["gbps"].as_f64().unwrap() > 0.0));
}

fn prezero_env(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_prezero"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("prezero-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn a_synthetic_profile_is_obeyed_and_bad_ones_are_refused_once() {
    let model = prezero::cpu().model_name.clone();
    let identity = prezero::cpu().identity();
    let good = serde_json::json!({
        "format": prezero::PROFILE_FORMAT, "cpu_model": model, "cpu_id": identity,
        "date": "2026-11-22T00:00:00Z",
        "profile": {
            "unknown": [{"below": 100000, "kernel": "portable"}, {"below": null, "kernel": "movnti"}],
            "hot": [{"below": null, "kernel": "portable"}],
            "cold": [{"below": 5000, "kernel": "portable"}, {"below": null, "kernel": "movnti"}],
        },
        "template": {"stream": "movnti", "temporal": "portable", "stream_from": 12345},
    });
    let path = tmp("good.json");
    std::fs::write(&path, good.to_string()).unwrap();
    let p = path.to_str().unwrap();
    let (ok, out, err) = prezero_env(&["info", "--json"], &[("PREZERO_PROFILE", p)]);
    assert!(ok && err.is_empty(), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["profile"]["source"].as_str().unwrap().contains(p));
    if cfg!(target_arch = "x86_64") {
        let auto = v["auto"].as_array().unwrap();
        assert_eq!(auto[0]["unknown"], "portable"); // 4K < 100000
        assert_eq!(auto[2]["unknown"], "movnti"); // 1M
        assert_eq!(auto[0]["cold"], "portable"); // 4K < 5000
        assert_eq!(auto[1]["cold"], "movnti");
        assert_eq!(v["template"]["stream"], "movnti");
    }
    assert_eq!(v["template"]["source"], "profile");
    assert_eq!(v["template"]["temporal"], "portable");
    assert_eq!(v["template"]["stream_from"], 12345);

    let mut cases = vec![
        (
            "wrong-version.json",
            serde_json::json!({"format": 999, "cpu_model": model, "date": "d", "profile": {}})
                .to_string(),
            "format 999",
            None,
        ),
        (
            "other-cpu.json",
            good.to_string().replace(&identity, "Some Other CPU"),
            "measured on",
            None,
        ),
        (
            "missing.json",
            serde_json::json!({"format": 1, "cpu_model": model}).to_string(),
            "missing field",
            None,
        ),
        (
            "bad-template.json",
            good.to_string()
                .replace("\"temporal\":\"portable\"", "\"temporal\":\"movnti\""),
            "template.temporal",
            Some("template"),
        ),
        (
            "bad-classes.json",
            good.to_string()
                .replace("\"kernel\":\"portable\"", "\"kernel\":\"warp-drive\""),
            "unknown kernel 'warp-drive'",
            Some("profile"),
        ),
        (
            "truncated.json",
            good.to_string()[..40].to_string(),
            "not valid JSON",
            None,
        ),
    ];
    let dir = tmp("a-directory");
    std::fs::create_dir_all(&dir).unwrap();
    cases.push(("", String::new(), "cannot read", None));
    // `None`: the file as a whole is refused; a section's name: that section
    // alone, its choice built in, the rest of the file followed.
    for (name, text, why, section) in cases {
        let path = if name.is_empty() {
            dir.clone()
        } else {
            tmp(name)
        };
        if !name.is_empty() {
            std::fs::write(&path, text).unwrap();
        }
        let (ok, out, err) = prezero_env(
            &["info", "--json"],
            &[("PREZERO_PROFILE", path.to_str().unwrap())],
        );
        assert!(ok, "{name}: {err}");
        assert_eq!(
            err.matches("prezero: ignoring profile").count(),
            1,
            "{name}: one warning expected: {err}"
        );
        assert!(err.contains(why), "{name}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let source = v["profile"]["source"].as_str().unwrap();
        let Some(section) = section else {
            assert!(source.starts_with("built-in defaults"), "{name}: {source}");
            continue;
        };
        assert!(
            source.contains(name),
            "{name}: the file is followed: {source}"
        );
        assert!(
            err.contains(&format!("\"{section}\" section")),
            "{name}: {err}"
        );
        let template = if section == "template" {
            "built-in"
        } else {
            "profile"
        };
        assert_eq!(v["template"]["source"], template, "{name}");
        if section == "profile" && cfg!(target_arch = "x86_64") {
            // The built-in classes stream the largest hot clear; the file's
            // are portable at every hot size.
            let largest = v["auto"].as_array().unwrap().last().unwrap();
            assert_ne!(largest["hot"], "portable", "{name}");
        }
    }
    let (ok, out, _) = prezero_env(&["info", "--json"], &[("PREZERO_PROFILE", "none")]);
    assert!(ok && out.contains("PREZERO_PROFILE=none"));
}

#[test]
fn calibrate_writes_a_profile_the_library_loads() {
    let path = tmp("calibrated.json");
    let p = path.to_str().unwrap();
    let (ok, out, err) = prezero(&[
        "calibrate",
        "--out",
        p,
        "--sizes",
        "4K,64K",
        "--reps",
        "1",
        "--large",
        "16M",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("wrote"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(v["format"], prezero::PROFILE_FORMAT);
    assert!(v["figures"].as_array().unwrap().len() > 4);
    let t = &v["template"];
    let kernel = |k: &str| {
        t[k].as_str()
            .unwrap()
            .parse::<prezero::CopyKernel>()
            .unwrap()
    };
    assert!(kernel("stream").is_streaming() && !kernel("temporal").is_streaming());
    assert!(t["stream_from"].is_null() || t["stream_from"].as_u64().unwrap() > 0);
    // The store study is bounded by --large.
    assert!(t["figures"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["size"].as_u64().unwrap() <= 16 << 20));
    let (ok, out, err) = prezero_env(&["info", "--json"], &[("PREZERO_PROFILE", p)]);
    assert!(ok && err.is_empty(), "{err}");
    assert!(out.contains("calibrated"));
    let info: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(info["template"]["source"], "profile");
    assert_eq!(info["template"]["stream"], t["stream"]);
    let (ok, out, err) = prezero(&[
        "calibrate",
        "--check",
        "--out",
        p,
        "--sizes",
        "4K,64K",
        "--reps",
        "1",
        // As above: the default large extent touches 1 GiB and 4 GiB regions
        // (half a minute of host faults on a VM).
        "--large",
        "16M",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("figures are off by more than 10%"));
}

#[test]
fn serve_rejects_bad_configuration_before_doing_anything() {
    for (args, want) in [
        (&["serve", "--pool", "4KB:target=1G"][..], "2MB or 1GB"),
        (
            &["serve", "--pool", "2MB:target=1G,cap=512M"][..],
            "target <= cap",
        ),
        (&["serve", "--pool", "2MB:size=1G"][..], "unknown key"),
        (
            &["serve", "--pool", "2MB:target=1G", "--verify", "sample:0"][..],
            "positive",
        ),
        (&["serve", "--socket", &"x".repeat(200)][..], "socket path"),
        (
            &["serve", "--config", "/nonexistent.toml"][..],
            "/nonexistent.toml",
        ),
    ] {
        let (ok, _, err) = prezero(args);
        assert!(!ok && err.contains(want), "{args:?}: {err}");
    }
    let dir = std::env::temp_dir().join(format!("prezero-cli-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("bad.toml");
    std::fs::write(&cfg, "sockets = \"/tmp/x\"\n").unwrap();
    let (ok, _, err) = prezero(&["serve", "--config", cfg.to_str().unwrap()]);
    assert!(!ok && err.contains("unknown field"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn client_without_a_service() {
    let (ok, _, err) = prezero(&["client", "stats", "--socket", "/nonexistent/p.sock"]);
    assert!(!ok && err.contains("no service"), "{err}");
    let (ok, _, err) = prezero(&[
        "client",
        "alloc",
        "2M",
        "--no-fallback",
        "--socket",
        "/nonexistent/p.sock",
    ]);
    assert!(!ok && err.contains("cannot connect"), "{err}");
    // Falling back is served, exit 0, and said on stderr.
    let (ok, out, err) = prezero(&["client", "alloc", "2M", "--socket", "/nonexistent/p.sock"]);
    assert!(ok, "{err}");
    assert!(out.contains("from local"), "{out}");
    assert!(err.contains("the service did not serve this"), "{err}");
}

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
    let report = tmp(&format!("{dir}/r.html"));
    let json = tmp(&format!("{dir}/r.jsonl"));
    std::fs::create_dir_all(report.parent().unwrap()).unwrap();
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
    // The service bench starts its daemon in a directory under TMPDIR: a file
    // there fails that step alone.
    let not_a_dir = tmp("not-a-directory");
    std::fs::write(&not_a_dir, "").unwrap();
    let (status, err, html, rows) =
        bench_all_smoke("failed", &[("TMPDIR", not_a_dir.to_str().unwrap())]);
    assert_eq!(status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("prezero: bench all: 1 of 8 steps failed: service (")
            && last.contains("Not a directory"),
        "{err}"
    );
    assert!(
        err.contains("service failed") && err.contains("  | prezero: "),
        "{err}"
    );
    assert_eq!(benches_with_rows(&rows), &BENCHES[..5]);
    assert!(html.contains("1 of 8 steps failed: service."));
    let run = rows.iter().find(|r| r["bench"] == "all").unwrap();
    let service = &run["steps"][6];
    assert_eq!(service["step"], "service");
    assert_eq!(service["status"], "failed");
}
