//! Memory pressure, as an operator sees it on a machine short of memory:
//! a program under `prezero run` (and `--lazy`) that callocs a large buffer
//! every half second and uses a little of it, beside a plain program that
//! takes all the memory the machine says is available but 250 MiB. Plainly
//! both finish; prezero must not make the kernel OOM-kill either. Needs a
//! small machine (the guests of `scripts/guest-tests.sh`, 2 GiB): elsewhere
//! it skips with a line.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MB: usize = 1 << 20;

fn meminfo(field: &str) -> usize {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = text.lines().find(|l| l.starts_with(field)).unwrap();
    let kb: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// The program under prezero (run by the test below, as itself): callocs
/// 400 MiB every half second for 10 s, writes its first 16 MiB, frees it.
#[test]
#[ignore = "the program of a_plain_program_beside_a_churning_one_finishes"]
fn churn_role() {
    if std::env::var_os("PREZERO_PRESSURE_ROLE").is_none() {
        return;
    }
    for _ in 0..20 {
        let mut v = vec![0u8; 400 * MB];
        assert!(
            v[..16 * MB].iter().all(|&b| b == 0),
            "calloc'd memory not zero"
        );
        for i in (0..16 * MB).step_by(4096) {
            v[i] = 1;
        }
        std::hint::black_box(&v);
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The plain program: takes MemAvailable less 250 MiB (as it reads it now)
/// and writes every page.
#[test]
#[ignore = "the program of a_plain_program_beside_a_churning_one_finishes"]
fn hog_role() {
    if std::env::var_os("PREZERO_PRESSURE_ROLE").is_none() {
        return;
    }
    let want = meminfo("MemAvailable:").saturating_sub(250 * MB);
    // malloc and a write of every byte.
    let v = vec![1u8; want];
    std::hint::black_box(&v);
    println!("\nhog {} MiB", want / MB);
}

fn role(name: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", name, "--ignored", "--nocapture"])
        .env("PREZERO_PRESSURE_ROLE", "1")
        .env_remove("LD_PRELOAD")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

#[test]
fn a_plain_program_beside_a_churning_one_finishes() {
    let total = meminfo("MemTotal:");
    if total > 4 << 30 {
        let why = "the churn scenario needs a machine of 4 GiB at most (the guests of scripts/guest-tests.sh)";
        assert!(
            std::env::var_os("PREZERO_REQUIRE_NUMA").is_none(),
            "would skip in a guest: {why}"
        );
        return eprintln!("skipped: {why}");
    }
    let prezero = env!("CARGO_BIN_EXE_prezero");
    for arm in ["plain", "prezero run", "prezero run --lazy"] {
        let mut churn = match arm {
            "plain" => role("churn_role"),
            _ => {
                let mut c = Command::new(prezero);
                c.arg("run");
                if arm.ends_with("--lazy") {
                    c.arg("--lazy");
                }
                c.arg("--")
                    .arg(std::env::current_exe().unwrap())
                    .args(["--exact", "churn_role", "--ignored", "--nocapture"])
                    .env("PREZERO_PRESSURE_ROLE", "1")
                    .env("PREZERO_STATS", "1")
                    .env_remove("LD_PRELOAD")
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                c
            }
        };
        let t = Instant::now();
        let churn = churn.spawn().unwrap();
        // Let it hold what it holds first.
        std::thread::sleep(Duration::from_secs(3));
        let available = meminfo("MemAvailable:");
        let hog = role("hog_role").output().unwrap();
        let hog_secs = t.elapsed().as_secs_f64() - 3.0;
        let churn = churn.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&churn.stderr);
        let stats = said
            .lines()
            .filter(|l| l.starts_with("prezero-preload:") || l.starts_with("prezero:"))
            .collect::<Vec<_>>()
            .join("\n    ");
        println!(
            "churn {arm}: MemAvailable {} MiB after 3 s; the plain program {} in {hog_secs:.1} s, \
             the churning one {}\n    {stats}",
            available / MB,
            hog.status,
            churn.status
        );
        assert!(
            hog.status.success(),
            "{arm}: the plain program did not finish ({}): {}",
            hog.status,
            String::from_utf8_lossy(&hog.stderr)
        );
        assert!(
            churn.status.success(),
            "{arm}: the churning program: {said}"
        );
    }
}

/// The program of the memory cgroup scenario: frees four blocks of 64 MiB
/// (the cache keeps some), then writes 160 MiB, past the cgroup's
/// `memory.high` with what the cache holds, not without; waits for the
/// watcher; exits.
#[test]
#[ignore = "the program of the_cache_gives_back_when_the_cgroup_is_past_its_high_mark"]
fn high_role() {
    if std::env::var_os("PREZERO_PRESSURE_ROLE").is_none() {
        return;
    }
    for _ in 0..4 {
        let mut v = vec![0u8; 64 * MB];
        for i in (0..v.len()).step_by(4096) {
            v[i] = 1;
        }
        std::hint::black_box(&v);
    }
    let v = vec![1u8; 160 * MB];
    std::hint::black_box(&v);
    std::thread::sleep(Duration::from_millis(2500));
}

/// A v2 memory cgroup of the test's own with `memory.high` at `high`: its
/// directory, or `None` (v1, not root).
fn cgroup_with_high(high: usize) -> Option<std::path::PathBuf> {
    // A v2 root whose children may have the memory controller.
    let control = std::fs::read_to_string("/sys/fs/cgroup/cgroup.subtree_control").ok()?;
    if !control.split_whitespace().any(|c| c == "memory") {
        return None;
    }
    let dir = std::path::PathBuf::from(format!(
        "/sys/fs/cgroup/prezero-pressure-{}",
        std::process::id()
    ));
    std::fs::create_dir(&dir).ok()?;
    if std::fs::write(dir.join("memory.high"), high.to_string()).is_err() {
        let _ = std::fs::remove_dir(&dir);
        return None;
    }
    Some(dir)
}

/// Past its cgroup's `memory.high` (the kernel counts a `high` event), a
/// program under `prezero run` gives back what its cache holds, and says
/// so on its stats line.
#[test]
fn the_cache_gives_back_when_the_cgroup_is_past_its_high_mark() {
    let Some(dir) = cgroup_with_high(192 * MB) else {
        let why =
            "no cgroup v2 memory controller to make a cgroup in (cgroup v1 here, or not root)";
        assert!(
            !std::env::var("PREZERO_REQUIRE").is_ok_and(|r| r.split(',').any(|k| k == "memcg")),
            "PREZERO_REQUIRE has memcg but the test would skip: {why}"
        );
        return eprintln!("skipped: {why}");
    };
    let script = format!(
        "echo $$ > {} && exec \"$0\" run -- \"$1\" --exact high_role --ignored --nocapture",
        dir.join("cgroup.procs").display()
    );
    let out = Command::new("sh")
        .args(["-c", &script, env!("CARGO_BIN_EXE_prezero")])
        .arg(std::env::current_exe().unwrap())
        .env("PREZERO_PRESSURE_ROLE", "1")
        .env("PREZERO_STATS", "1")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let events = std::fs::read_to_string(dir.join("memory.events")).unwrap_or_default();
    let _ = std::fs::remove_dir(&dir);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let line = said
        .lines()
        .find(|l| l.starts_with("prezero-preload: pid "))
        .unwrap_or_else(|| panic!("no stats line: {said}"));
    println!(
        "memory.high 192 MiB: {line}\n  memory.events: {}",
        events.replace('\n', ", ")
    );
    assert!(
        line.contains(" memory pressure events (all held went back)"),
        "no pressure event seen: {line}"
    );
}
