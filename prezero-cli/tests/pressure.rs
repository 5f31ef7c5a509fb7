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
/// (the cache keeps some), then writes 208 MiB, which leaves the cgroup
/// (`memory.max` 256 MiB) less than the watcher's 64 MiB of room; waits for
/// the watcher; exits.
#[test]
#[ignore = "the program of the_cache_gives_back_when_the_cgroup_is_near_its_limit"]
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
    let v = vec![1u8; 208 * MB];
    std::hint::black_box(&v);
    std::thread::sleep(Duration::from_millis(2500));
}

/// A v2 memory cgroup of the test's own (`name` and the pid) with
/// `memory.max` at `max`: its directory; or, where none can be made
/// (cgroup v1, not root), `None`, said (a failure where PREZERO_REQUIRE
/// has memcg: the guests on 6.12).
fn cgroup_with_max(name: &str, max: usize) -> Option<std::path::PathBuf> {
    // A v2 root whose children may have the memory controller.
    let control = std::fs::read_to_string("/sys/fs/cgroup/cgroup.subtree_control");
    let dir = std::path::PathBuf::from(format!("/sys/fs/cgroup/{name}-{}", std::process::id()));
    if control.is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
        && std::fs::create_dir(&dir).is_ok()
    {
        if std::fs::write(dir.join("memory.max"), max.to_string()).is_ok() {
            return Some(dir);
        }
        let _ = std::fs::remove_dir(&dir);
    }
    let why = "no cgroup v2 memory controller to make a cgroup in (cgroup v1 here, or not root)";
    assert!(
        !std::env::var("PREZERO_REQUIRE").is_ok_and(|r| r.split(',').any(|k| k == "memcg")),
        "PREZERO_REQUIRE has memcg but the test would skip: {why}"
    );
    eprintln!("skipped: {why}");
    None
}

/// Runs `prezero run ARGS -- this-test --exact ROLE` in the cgroup `dir`
/// (the role's first instruction puts it there), with its stats line.
fn run_in(dir: &std::path::Path, args: &str, role: &str) -> std::process::Output {
    let script = format!(
        "echo $$ > {} && exec \"$0\" run {args} -- \"$1\" --exact {role} --ignored --nocapture",
        dir.join("cgroup.procs").display()
    );
    Command::new("sh")
        .args(["-c", &script, env!("CARGO_BIN_EXE_prezero")])
        .arg(std::env::current_exe().unwrap())
        .env("PREZERO_PRESSURE_ROLE", "1")
        .env("PREZERO_STATS", "1")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap()
}

/// Near its cgroup's `memory.max` (the kernel reclaims there and counts
/// `max` events; the watcher sees the room left), a program under `prezero
/// run` gives back what its cache holds, and says so on its stats line.
#[test]
fn the_cache_gives_back_when_the_cgroup_is_near_its_limit() {
    let Some(dir) = cgroup_with_max("prezero-pressure", 256 * MB) else {
        return;
    };
    let out = run_in(&dir, "", "high_role");
    let events = std::fs::read_to_string(dir.join("memory.events")).unwrap_or_default();
    let _ = std::fs::remove_dir(&dir);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let line = said
        .lines()
        .find(|l| l.starts_with("prezero-preload: pid "))
        .unwrap_or_else(|| panic!("no stats line: {said}"));
    println!(
        "memory.max 256 MiB: {line}\n  memory.events: {}",
        events.replace('\n', ", ")
    );
    assert!(
        line.contains(" memory pressure events (all held went back)"),
        "no pressure event seen: {line}"
    );
}

/// The program of the sparse table: one byte written per 2 MiB of an 8 GiB
/// `MAP_NORESERVE` mapping (16 MiB of pages plainly), every byte it reads
/// back as written and the rest zero.
#[test]
#[ignore = "the program of a_sparse_table_fits_a_small_memory_cgroup_under_lazy"]
fn sparse_role() {
    if std::env::var_os("PREZERO_PRESSURE_ROLE").is_none() {
        return;
    }
    let len = 8usize << 30;
    // SAFETY: a new private anonymous mapping, ours alone.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    let p = p.cast::<u8>();
    for i in (0..len).step_by(2 * MB) {
        // SAFETY: within the mapping above.
        unsafe { p.add(i + 4096).write_volatile(7) };
    }
    for i in (0..len).step_by(2 * MB) {
        // SAFETY: within the mapping above.
        let (w, z) = unsafe { (p.add(i + 4096).read_volatile(), p.add(i).read_volatile()) };
        assert_eq!((w, z), (7, 0), "at {i}");
    }
}

/// A sparse table in a memory cgroup of 512 MiB finishes under `prezero
/// run --lazy` as plainly: a first touch of a block gets its page alone, not
/// a 2 MiB one.
#[test]
fn a_sparse_table_fits_a_small_memory_cgroup_under_lazy() {
    let Some(dir) = cgroup_with_max("prezero-sparse", 512 * MB) else {
        return;
    };
    let out = run_in(&dir, "--lazy", "sparse_role");
    let peak = std::fs::read_to_string(dir.join("memory.peak")).unwrap_or_default();
    let _ = std::fs::remove_dir(&dir);
    let said = String::from_utf8_lossy(&out.stderr);
    println!(
        "sparse table in 512 MiB: {}, cgroup peak {} MiB\n    {}",
        out.status,
        peak.trim().parse::<usize>().map_or(0, |p| p / MB),
        said.lines()
            .filter(|l| l.starts_with("prezero"))
            .collect::<Vec<_>>()
            .join("\n    ")
    );
    assert!(out.status.success(), "{said}");
}
