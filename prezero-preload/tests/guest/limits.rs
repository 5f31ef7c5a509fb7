//! What the program does to the preload's descriptors and memory limits.

use super::*;

/// Before: a child made without fork handlers held every descriptor while
/// the parent closed them all with the raw system call and touched a 64 MiB
/// malloc block: under the lazy mode it hung while the child lived (its
/// faults waited on a handler whose descriptor was gone). Now the handler
/// reads from a descriptor table of its own: by `syscall(2)` or inline, the
/// program ends as plainly.
#[test]
fn descriptors_closed_behind_the_preloads_back_leave_no_fault_waiting() {
    let Some(b) = built() else { return };
    let _s = serial();
    for how in ["syscall", "asm"] {
        let mut plain = None;
        for arm in ARMS {
            let r = run(b, arm, &["close-raw", how], &[], Duration::from_secs(30));
            if arm == Arm::Lazy && lazy_refused(&r) {
                continue;
            }
            r.ok();
            let out = plain.get_or_insert_with(|| r.stdout.clone());
            assert_eq!(*out, r.stdout, "{how} {arm:?}");
        }
    }
}

/// A memory cgroup of `bytes` made for this test (v1's memory hierarchy,
/// or v2's), removed on drop; `None` where none can be made.
struct Memcg {
    dir: PathBuf,
    v1: bool,
}

impl Memcg {
    fn new(name: &str, bytes: usize) -> Option<Memcg> {
        for (root, limit, v1) in [
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", true),
            ("/sys/fs/cgroup", "memory.max", false),
        ] {
            let dir =
                PathBuf::from(root).join(format!("prezero-guest-{name}-{}", std::process::id()));
            if std::fs::create_dir(&dir).is_err() {
                continue;
            }
            if std::fs::write(dir.join(limit), bytes.to_string()).is_ok() {
                return Some(Memcg { dir, v1 });
            }
            let _ = std::fs::remove_dir(&dir);
        }
        None
    }

    /// How many processes the kernel killed in it for memory.
    fn kills(&self) -> u64 {
        let (file, key) = if self.v1 {
            ("memory.oom_control", "oom_kill ")
        } else {
            ("memory.events", "oom_kill ")
        };
        let text = std::fs::read_to_string(self.dir.join(file)).unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Memcg {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Before: in a cgroup v1 memory limit of 256 MiB, a program that freed
/// 60 MiB of 4 MiB calloc blocks, then mapped and touched 240 MiB, was
/// killed for memory in 3 of 4 runs under the lazy mode (never plainly):
/// what the preload held went back once a second, by its own reading of the
/// room, after the kernel had killed. Now v1's usage threshold (an eighth
/// below the limit) and pressure level wake the watcher through eventfds,
/// and it gives back at once. The same in a v2 cgroup (the guests'). No run
/// is killed in any arm.
#[test]
fn memory_comes_back_before_a_memory_limit_kills() {
    let Some(b) = built() else { return };
    let _s = serial();
    let mut killed = Vec::new();
    for i in 0..4 {
        for arm in ARMS {
            let Some(cg) = Memcg::new("oom", 256 << 20) else {
                skip("memcg", "no memory cgroup could be made here (not root?)");
                return;
            };
            let enter = prezero_testkit::enter_cgroup_sh(&cg.dir.join("cgroup.procs"));
            let r = run_in(
                b,
                arm,
                &enter,
                &["v1-oom", "240"],
                &[],
                Duration::from_secs(60),
            );
            if arm == Arm::Lazy && lazy_refused(&r) {
                continue;
            }
            let kills = cg.kills();
            println!(
                "run {i} {arm:?}: exit {:?} signal {:?}, {kills} killed",
                r.code, r.signal
            );
            if kills > 0 || r.code != Some(0) {
                killed.push(format!(
                    "run {i} {arm:?}: exit {:?} signal {:?}, {kills} killed",
                    r.code, r.signal
                ));
            }
        }
    }
    assert!(killed.is_empty(), "{}", killed.join("\n"));
}
