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
