//! Who pays (issue 45): what `prezero serve` spends for a tenant is charged
//! to the tenant's cgroup, and no tenant gets around its own limits through
//! the service. On cgroup v2 (the guests of scripts/guest-tests.sh): two
//! tenants in cgroups of their own with different hugetlb and memory limits,
//! the daemon in a third; on this host's v1 hierarchies, where they apply,
//! the CPU of a tenant's scrub. The tests check what the kernel's counters
//! and the daemon say, not how fast anything is.

#[path = "common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::tenant::can_run_tenants;
use common::*;
use prezero::{HugetlbReservation, PageKind};

/// A cgroup of the test's own under `root`, removed when dropped (its
/// processes moved back to the root first).
struct Cg {
    root: PathBuf,
    name: String,
}

impl Cg {
    fn new(root: &str, name: &str) -> Cg {
        let cg = Cg {
            root: root.into(),
            name: format!("{name}-{}", std::process::id()),
        };
        std::fs::create_dir(cg.dir())
            .unwrap_or_else(|e| panic!("mkdir {}: {e}", cg.dir().display()));
        cg
    }

    fn dir(&self) -> PathBuf {
        self.root.join(&self.name)
    }

    /// Its path in its hierarchy, as the daemon names it.
    fn path(&self) -> String {
        format!("/{}", self.name)
    }

    fn set(&self, file: &str, value: &str) {
        std::fs::write(self.dir().join(file), value)
            .unwrap_or_else(|e| panic!("{}/{file} = {value}: {e}", self.dir().display()));
    }

    /// A number of one of its files (0 where it has none).
    fn num(&self, file: &str) -> u64 {
        std::fs::read_to_string(self.dir().join(file))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    }

    /// A field of `cpu.stat` (`usage_usec`, `nr_throttled`).
    fn cpu(&self, field: &str) -> u64 {
        let text = std::fs::read_to_string(self.dir().join("cpu.stat")).unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix(field)?.trim().parse().ok())
            .unwrap_or(0)
    }

    /// A shell line that moves the shell into the cgroup.
    fn enter(&self) -> String {
        prezero_testkit::enter_cgroup_sh(&self.dir().join("cgroup.procs"))
    }

    /// Moves this process in.
    fn join(&self) {
        self.set("cgroup.procs", &std::process::id().to_string());
    }
}

impl Drop for Cg {
    fn drop(&mut self) {
        let procs = std::fs::read_to_string(self.dir().join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            let _ = std::fs::write(self.root.join("cgroup.procs"), pid);
        }
        for _ in 0..100 {
            if std::fs::remove_dir(self.dir()).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `prezero client ARGS` run inside `cg`: its status and all it wrote.
fn client_in(cg: &Cg, d: &Daemon, args: &str) -> (bool, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{}; exec {} client {args} --socket {}",
            cg.enter(),
            bin(),
            d.socket.display()
        ))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A tenant inside `cg` holding `size` of service memory (filled with 7)
/// until dropped or released.
struct Holder(Child);

impl Holder {
    fn new(cg: &Cg, d: &Daemon, size: &str) -> Holder {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{}; exec {} client alloc {size} --hold --fill 7 --no-fallback --socket {}",
                cg.enter(),
                bin(),
                d.socket.display()
            ))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(
            first.contains("from service") && first.contains("all zero"),
            "{size} in {}: {first}\n{}",
            cg.path(),
            d.log()
        );
        Holder(child)
    }

    /// Ends it (its memory goes back) and waits for its exit.
    fn release(mut self) {
        drop(self.0.stdin.take());
        assert!(self.0.wait().unwrap().success());
    }
}

/// The daemon's row for `cg`.
fn row(d: &Daemon, cg: &Cg) -> prezero_service::CgroupStats {
    d.stats()
        .cgroups
        .into_iter()
        .find(|c| c.name == cg.path().as_bytes())
        .unwrap_or_default()
}

/// cgroup2 at /sys/fs/cgroup with hugetlb, memory and cpu for the root's
/// children (the guests' init enables them), or a skip.
fn cgroup2() -> bool {
    let control = std::fs::read_to_string("/sys/fs/cgroup/cgroup.subtree_control");
    let has = |c: &str| {
        control
            .as_ref()
            .is_ok_and(|t| t.split_whitespace().any(|w| w == c))
    };
    if has("hugetlb") && has("memory") && has("cpu") {
        return true;
    }
    prezero_testkit::skip(
        "machine",
        "no cgroup v2 with the hugetlb, memory and cpu controllers at /sys/fs/cgroup \
         (the guests of scripts/guest-tests.sh have it)",
    );
    false
}

/// Whether hugetlb pages count as memory (cgroup2's memory_hugetlb_accounting).
fn hugetlb_in_memory() -> bool {
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| {
        m.lines()
            .any(|l| l.contains(" - cgroup2 ") && l.contains("memory_hugetlb_accounting"))
    })
}

/// Each cgroup's counters, said for the record (the issue asks for them).
fn say(when: &str, cgs: &[(&str, &Cg)]) {
    for (who, cg) in cgs {
        eprintln!(
            "{when}: {who} {}: hugetlb.2MB.current {} MiB, memory.current {} MiB, cpu usage {} us, throttled {}",
            cg.path(),
            cg.num("hugetlb.2MB.current") >> 20,
            cg.num("memory.current") >> 20,
            cg.cpu("usage_usec"),
            cg.cpu("nr_throttled")
        );
    }
}

#[test]
fn two_tenants_are_charged_and_limited_in_their_own_cgroups() {
    if !can_run_tenants() || !cgroup2() {
        return;
    }
    let Some(s) = Scene::start() else { return };
    let (held_a, held_b) = held_and_refused(&s);
    returned_in_their_cgroups(&s, held_a, held_b);
    served_while_the_other_churns(&s);
    hostile_requests(&s.d, &s.a);
    s.d.wait_all_ready();
    s.say("end");
    // A cgroup removed: its part goes, its charge with it; the daemon serves on.
    let Scene { d, b, .. } = s;
    let b_path = b.path().into_bytes();
    drop(b);
    wait_for(
        "the removed cgroup's part gone",
        Duration::from_secs(30),
        || {
            d.stats()
                .cgroups
                .iter()
                .all(|c| c.placed == 0 || c.name != b_path)
        },
    );
    d.assert_serves();
}

/// The daemon in a cgroup of its own with 64M of shared pool, 32M prepared
/// for each tenant: A (hugetlb.2MB.max 48M), B (hugetlb.2MB.max 96M,
/// memory.max 72M).
struct Scene {
    // The daemon first: it stops before the cgroups go.
    d: Daemon,
    dc: Cg,
    a: Cg,
    b: Cg,
}

impl Scene {
    fn start() -> Option<Scene> {
        let root = "/sys/fs/cgroup";
        // Every page on node 0, the pool's and the preparations': the
        // machine's pool spreads its pages over the nodes (a quarter each on
        // four nodes of 1 GiB was short of the 128 MiB prepared there).
        let pool = "target=64M,cap=192M,segment=16M,node=0";
        let pages = match HugetlbReservation::ensure_free_on_nodes(2 * MB, &[(0, 96 + 32 + 32)]) {
            Ok(pages) => pages,
            Err(e) => {
                prezero_testkit::skip("hugetlb", format!("2 MiB pages on node 0: {e}"));
                return None;
            }
        };
        let (dc, a, b) = (
            Cg::new(root, "pz-daemon"),
            Cg::new(root, "pz-a"),
            Cg::new(root, "pz-b"),
        );
        a.set("hugetlb.2MB.max", &(48 * MB).to_string());
        b.set("hugetlb.2MB.max", &(96 * MB).to_string());
        b.set("memory.max", &(72 * MB).to_string());
        // The daemon starts in its own cgroup (this process's, then its child's).
        dc.join();
        let prep_a = format!("{}=32M", a.path());
        let prep_b = format!("{}=32M", b.path());
        let extra = [
            "--prepare",
            &prep_a,
            "--prepare",
            &prep_b,
            "--allow-uid",
            "65534",
        ];
        let d = Daemon::start_with(PageKind::Huge2M, &[pool], &extra, pages);
        std::fs::write(
            format!("{root}/cgroup.procs"),
            std::process::id().to_string(),
        )
        .unwrap();
        let s = Scene { d, dc, a, b };
        s.say("start");
        wait_for(
            "each tenant's part prepared in its cgroup",
            Duration::from_secs(120),
            || {
                s.a.num("hugetlb.2MB.current") == 32 * MB as u64
                    && s.b.num("hugetlb.2MB.current") == 32 * MB as u64
            },
        );
        s.d.wait_all_ready();
        s.say("prepared");
        assert_eq!(
            s.dc.num("hugetlb.2MB.current"),
            64 * MB as u64,
            "the daemon holds its shared pool only"
        );
        Some(s)
    }

    fn say(&self, when: &str) {
        say(
            when,
            &[
                ("daemon", &self.dc),
                ("tenant A", &self.a),
                ("tenant B", &self.b),
            ],
        );
    }
}

/// A holds its own part, B its own and 16M lent of the shared pool; each
/// then asks past its limits: refused as the kernel would, and no local
/// memory made instead (the client does not fall back).
fn held_and_refused(s: &Scene) -> (Holder, Holder) {
    let (d, a, b) = (&s.d, &s.a, &s.b);
    let held_a = Holder::new(a, d, "32M");
    let held_b = Holder::new(b, d, "48M");
    s.say("held");
    assert_eq!(a.num("hugetlb.2MB.current"), 32 * MB as u64);
    assert_eq!(b.num("hugetlb.2MB.current"), 32 * MB as u64);
    // What is lent stays the daemon's, which grows its shared pool back to
    // its target beside it.
    wait_for(
        "the shared pool back at its target",
        Duration::from_secs(60),
        || s.dc.num("hugetlb.2MB.current") == 80 * MB as u64,
    );
    let (ra, rb) = (row(d, a), row(d, b));
    assert_eq!((ra.placed, ra.lent), (32 * MB as u64, 0), "{ra:?}");
    assert_eq!(
        (rb.placed, rb.lent),
        (32 * MB as u64, 16 * MB as u64),
        "{rb:?}"
    );
    let (ok, text) = client_in(a, d, "alloc 32M");
    assert!(
        !ok && text.contains("hugetlb.2MB.max") && !text.contains("local"),
        "{text}"
    );
    let (ok, text) = client_in(b, d, "alloc 64M");
    let binding = if hugetlb_in_memory() {
        "memory.max"
    } else {
        "hugetlb.2MB.max"
    };
    assert!(!ok && text.contains(binding), "{text}");
    let (ok, text) = client_in(b, d, "alloc 32M");
    if hugetlb_in_memory() {
        assert!(
            !ok && text.contains("memory.max"),
            "B's memory.max binds first: {text}"
        );
    } else {
        assert!(
            ok && text.contains("from service"),
            "hugetlb is not memory here: {text}"
        );
    }
    assert!(row(d, a).refusals >= 1 && row(d, b).refusals >= 1);
    (held_a, held_b)
}

/// Returned: the scrub runs in each tenant's cgroup, throttled by its cpu.max.
fn returned_in_their_cgroups(s: &Scene, held_a: Holder, held_b: Holder) {
    let (d, a, b) = (&s.d, &s.a, &s.b);
    a.set("cpu.max", "10000 100000");
    held_a.release();
    held_b.release();
    let (use_a, thr_a, use_b) = (
        a.cpu("usage_usec"),
        a.cpu("nr_throttled"),
        b.cpu("usage_usec"),
    );
    d.wait_all_ready();
    wait_for("the scrubs counted", Duration::from_secs(60), || {
        row(d, a).cleaned_bytes >= 64 * MB as u64 && row(d, b).cleaned_bytes >= 80 * MB as u64
    });
    s.say("returned");
    let (ra, rb) = (row(d, a), row(d, b));
    assert!(ra.cpu_in_ns > 0 && ra.cpu_daemon_ns == 0, "{ra:?}");
    assert!(rb.cpu_in_ns > 0 && rb.cpu_daemon_ns == 0, "{rb:?}");
    assert!(
        a.cpu("usage_usec") > use_a,
        "A's scrub shows in A's cpu.stat"
    );
    assert!(
        b.cpu("usage_usec") > use_b,
        "B's scrub shows in B's cpu.stat"
    );
    assert!(
        a.cpu("nr_throttled") > thr_a,
        "A's cpu.max throttled its scrub"
    );
    a.set("cpu.max", "max 100000");
}

/// B churns; A is served from its own part throughout.
fn served_while_the_other_churns(s: &Scene) {
    let (d, a, b) = (&s.d, &s.a, &s.b);
    let mut churn = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{}; exec {} client churn --seconds 5 --max 48M --socket {}",
            b.enter(),
            bin(),
            d.socket.display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..5 {
        let cleaned = row(d, a).cleaned_bytes;
        let (ok, text) = client_in(a, d, "alloc 16M --no-fallback");
        assert!(
            ok && text.contains("from service"),
            "A while B churns: {text}"
        );
        // Its segment back in its part (scrubbed in its cgroup) before the next.
        wait_for("A's segment scrubbed", Duration::from_secs(60), || {
            row(d, a).cleaned_bytes > cleaned
        });
    }
    churn.wait().unwrap();
}

/// Announcements the daemon refuses: for a cgroup the asker does not own,
/// one that does not exist, paths that would leave the hierarchy.
fn hostile_requests(d: &Daemon, a: &Cg) {
    use std::os::unix::process::CommandExt;
    let prepare = |uid: u32, path: &str| {
        Command::new(bin())
            .args(["client", "prepare", path, "16M", "--socket"])
            .arg(&d.socket)
            .uid(uid)
            .gid(uid)
            .output()
            .unwrap()
    };
    let out = prepare(NOBODY, &a.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("only root or its owner"),
        "{err}"
    );
    for path in ["/../../etc", "/pz-a\nx", "/does-not-exist-45", "/a/./b"] {
        let out = prepare(0, path);
        assert!(!out.status.success(), "{path:?} was prepared");
    }
    d.assert_serves();
}

#[test]
fn on_v1_a_tenants_scrub_runs_in_its_cpu_cgroup() {
    let cpuacct = "/sys/fs/cgroup/cpuacct";
    if !can_run_tenants() {
        return;
    }
    if !std::path::Path::new(cpuacct).join("cpuacct.usage").exists() {
        prezero_testkit::skip(
            "kernel",
            "no cgroup v1 cpuacct hierarchy here (a v2-only machine)",
        );
        return;
    }
    let Some(d) = Daemon::start("target=32M,cap=64M,segment=16M,node=0", &[]) else {
        return;
    };
    let t = Cg::new(cpuacct, "pz-v1");
    let (ok, text) = client_in(&t, &d, "alloc 32M --fill 9 --no-fallback");
    assert!(ok && text.contains("from service"), "{text}");
    let before = t.num("cpuacct.usage");
    d.wait_all_ready();
    let r = d
        .stats()
        .cgroups
        .into_iter()
        .find(|c| c.cleaned_bytes >= 32 * MB as u64 && c.cpu_in_ns > 0)
        .unwrap_or_else(|| panic!("no cgroup row with the scrub: {:?}", d.stats().cgroups));
    let after = t.num("cpuacct.usage");
    eprintln!(
        "v1 cpuacct {}: usage {before} -> {after} ns; the daemon counts {} ns of scrub CPU there",
        t.path(),
        r.cpu_in_ns
    );
    assert!(
        after > before,
        "the scrub shows in the tenant's cpuacct.usage"
    );
}
