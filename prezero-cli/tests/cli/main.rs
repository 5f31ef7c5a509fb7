//! The `prezero` command end to end, on small sizes: output shape and errors.
//!
//! This file keeps `info`, the CPU masks, a reservation undone on Ctrl-C,
//! `serve`'s checks and the client; the rest, by command: `bench` (each
//! bench's rows and errors), `profile` (a profile obeyed or refused,
//! `calibrate`), `programs` (`bench programs`), `report` (`bench all` into a report).

mod bench;
mod profile;
mod programs;
mod report;

use std::process::Command;

use prezero_testkit::TempDir;

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

/// `info` names a hugetlb pool's counts as /proc/meminfo's HugePages_* do:
/// its "reserved" is the kernel's Rsvd (promised, not yet faulted in), never
/// the pool's size, which is "total".
#[test]
fn info_says_hugetlb_counts_in_the_kernels_words() {
    if prezero::mm::hugetlb_pool(2 << 20).is_none() {
        prezero_testkit::skip("hugetlb", "no 2 MiB hugetlb pool");
        return;
    }
    let (ok, out, err) = prezero(&["info"]);
    assert!(ok, "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("Hugetlb") && l.contains(" 2M: "))
        .unwrap_or_else(|| panic!("no 2M hugetlb line:\n{out}"));
    for word in ["total ", "free ", "(reserved ", "surplus "] {
        assert!(line.contains(word), "{word:?} missing: {line}");
    }
    let (ok, out, err) = prezero(&["info", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let json = v["memory"]["hugetlb"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["page_size"] == 2 << 20)
        .unwrap()
        .clone();
    // The machine's pool has every count (resv_hugepages too).
    for field in ["total", "free", "reserved", "surplus"] {
        assert!(json[field].is_u64(), "{field}: {json}");
    }
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

/// A directory of the calling test's own, removed when it ends, pass or fail.
fn tmp() -> TempDir {
    TempDir::new("cli-test")
}

/// `serve --check` says the pools as this machine would place them and
/// exits, serving nothing: the packaged file passes (its shares made bytes),
/// a pool with a share above the whole node does not.
#[test]
fn serve_check_places_the_pools_and_serves_nothing() {
    let packaged = concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/prezero.toml");
    let (ok, _, err) = prezero(&[
        "serve",
        "--config",
        packaged,
        "--socket",
        "/nonexistent/never.sock",
        "--check",
    ]);
    assert!(ok, "{err}");
    assert!(
        err.contains("target 1/8, cap 1/4 (of each node's memory)"),
        "{err}"
    );
    assert!(err.contains(": segments of 256M, target "), "{err}");
    assert!(err.contains("the configuration passes its checks"), "{err}");
    assert!(!err.contains("listening"), "{err}");
    let (ok, _, err) = prezero(&["serve", "--pool", "2MB:target=9/8", "--check"]);
    assert!(
        !ok && err.contains("not a share of the node's memory"),
        "{err}"
    );
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
    let dir = tmp();
    let cfg = dir.join("bad.toml");
    std::fs::write(&cfg, "sockets = \"/tmp/x\"\n").unwrap();
    let (ok, _, err) = prezero(&["serve", "--config", cfg.to_str().unwrap()]);
    assert!(!ok && err.contains("unknown field"), "{err}");
}

#[test]
fn client_without_a_service() {
    // Says what to do next: start one there, or name another.
    let (ok, _, err) = prezero(&["client", "stats", "--socket", "/nonexistent/p.sock"]);
    assert!(!ok, "{err}");
    assert!(
        err.contains("no service at /nonexistent/p.sock (no socket there)")
            && err.contains("prezero serve --socket /nonexistent/p.sock")
            && err.contains("--socket PATH or PREZERO_SOCKET"),
        "{err}"
    );
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
    assert!(err.contains("--no-fallback"), "{err}");
}
