//! Programs under prezero in a memory cgroup of the test's own, near or past
//! its limit.

use super::*;

/// A memory cgroup of the test's own, removed when dropped: v2 where the
/// root's children may have the memory controller (the guests), else v1's
/// memory hierarchy (this host).
struct Memcg {
    dir: std::path::PathBuf,
    v2: bool,
}

impl Memcg {
    /// One named `name` and the pid with `max` bytes at most; or, where none
    /// can be made (not root, no memory controller), `None`, said (a failure
    /// where PREZERO_REQUIRE has memcg: the guests on 6.12).
    fn with_max(name: &str, max: usize) -> Option<Memcg> {
        let control = std::fs::read_to_string("/sys/fs/cgroup/cgroup.subtree_control");
        let v2 = control.is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"));
        let (root, limit) = if v2 {
            ("/sys/fs/cgroup", "memory.max")
        } else {
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes")
        };
        let dir = std::path::PathBuf::from(format!("{root}/{name}-{}", std::process::id()));
        if std::fs::create_dir(&dir).is_ok() {
            let cg = Memcg { dir, v2 };
            if std::fs::write(cg.dir.join(limit), max.to_string()).is_ok() {
                return Some(cg);
            }
        }
        prezero_testkit::skip(
            "memcg",
            "no memory cgroup to make (no memory controller, or not root)",
        );
        None
    }

    fn version(&self) -> &'static str {
        if self.v2 {
            "v2"
        } else {
            "v1"
        }
    }

    /// The most memory it used, in MiB.
    fn peak_mib(&self) -> usize {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()
            .and_then(|p| p.trim().parse::<usize>().ok())
            .map_or(0, |p| p / MB)
    }

    /// Its events: v2's `memory.events`, v1's count of failed charges.
    fn events(&self) -> String {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.failcnt"
        };
        let text = std::fs::read_to_string(self.dir.join(file)).unwrap_or_default();
        format!("{file}: {}", text.trim().replace('\n', ", "))
    }
}

impl Drop for Memcg {
    fn drop(&mut self) {
        // Its processes have ended; the kernel may still be freeing them.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Runs `prezero run ARGS -- this-test --exact ROLE` in the cgroup `cg`
/// (the role's first instruction puts it there; no `prezero run` for
/// `ARGS` "plain"), with its stats line.
fn run_in(cg: &Memcg, args: &str, role: &str, env: &[(&str, &str)]) -> std::process::Output {
    let run = if args == "plain" {
        String::new()
    } else {
        format!("\"$0\" run {args} --")
    };
    let script = format!(
        "{} && exec {run} \"$1\" --exact {role} --ignored --nocapture",
        prezero_testkit::enter_cgroup_sh(&cg.dir.join("cgroup.procs"))
    );
    Command::new("sh")
        .args(["-c", &script, env!("CARGO_BIN_EXE_prezero")])
        .arg(std::env::current_exe().unwrap())
        .env("PREZERO_PRESSURE_ROLE", "1")
        .env("PREZERO_STATS", "1")
        // No history: what an earlier run took must not change this one.
        .env("PREZERO_HISTORY", "0")
        .envs(env.iter().copied())
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap()
}

/// Near its cgroup's `memory.max` (the kernel reclaims there and counts
/// `max` events; the watcher sees the room left), a program under `prezero
/// run` gives back what its cache holds, and says so on its stats line.
#[test]
fn the_cache_gives_back_when_the_cgroup_is_near_its_limit() {
    let _serial = serial();
    let Some(cg) = Memcg::with_max("prezero-pressure", 256 * MB) else {
        return;
    };
    let out = run_in(&cg, "", "high_role", &[]);
    let events = cg.events();
    drop(cg);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let line = said
        .lines()
        .find(|l| l.starts_with("prezero-preload: pid "))
        .unwrap_or_else(|| panic!("no stats line: {said}"));
    println!("a limit of 256 MiB: {line}\n  {events}");
    assert!(
        line.contains(" memory pressure events (all held went back)"),
        "no pressure event seen: {line}"
    );
}

/// A sparse table in a memory cgroup of 512 MiB finishes under `prezero
/// run --lazy` as plainly: a first touch of a block gets its page alone, not
/// a 2 MiB one.
#[test]
fn a_sparse_table_fits_a_small_memory_cgroup_under_lazy() {
    let _serial = serial();
    let Some(cg) = Memcg::with_max("prezero-sparse", 512 * MB) else {
        return;
    };
    let out = run_in(&cg, "--lazy", "sparse_role", &[]);
    let said = String::from_utf8_lossy(&out.stderr);
    println!(
        "sparse table in 512 MiB (cgroup {}): {}, cgroup peak {} MiB\n    {}",
        cg.version(),
        out.status,
        cg.peak_mib(),
        said.lines()
            .filter(|l| l.starts_with("prezero"))
            .collect::<Vec<_>>()
            .join("\n    ")
    );
    assert!(out.status.success(), "{said}");
}

/// The churning program in a memory cgroup of 384 MiB (each 400 MiB calloc
/// is bigger than the cgroup, 16 MiB of it used): it finishes plainly,
/// under `prezero run` and under `--lazy` (a populate the cgroup refuses is
/// taken back; the cache's cap follows the room left). The cgroup's peak is
/// printed.
#[test]
fn the_churning_program_fits_its_memory_cgroup() {
    let _serial = serial();
    for arm in ["plain", "", "--lazy"] {
        let Some(cg) = Memcg::with_max("prezero-churn", 384 * MB) else {
            return;
        };
        let out = run_in(&cg, arm, "churn_role", &[("PREZERO_CHURN_ROUNDS", "6")]);
        let said = String::from_utf8_lossy(&out.stderr);
        println!(
            "churn in 384 MiB (cgroup {}), {}: {}, cgroup peak {} MiB\n    {}",
            cg.version(),
            if arm == "plain" {
                "plainly".to_owned()
            } else {
                format!("prezero run {arm}")
            },
            out.status,
            cg.peak_mib(),
            said.lines()
                .filter(|l| l.starts_with("prezero"))
                .collect::<Vec<_>>()
                .join("\n    ")
        );
        assert!(out.status.success(), "prezero run {arm}: {said}");
    }
}
