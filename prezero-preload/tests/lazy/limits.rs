//! The reserve in a memory cgroup, and the fallback where the lazy mode cannot
//! run.

use super::*;

/// A memory cgroup of `bytes` made for this test (v1's memory hierarchy, or
/// v2's), to be removed after: where it was made and the file that takes a
/// process; `None` where it cannot be (not root, no memory controller).
fn memcg(bytes: usize) -> Option<(PathBuf, PathBuf)> {
    let name = format!("prezero-lazy-test-{}", std::process::id());
    for (root, limit) in [
        ("/sys/fs/cgroup/memory", "memory.limit_in_bytes"),
        ("/sys/fs/cgroup", "memory.max"),
    ] {
        let dir = PathBuf::from(root).join(&name);
        if std::fs::create_dir(&dir).is_err() {
            continue;
        }
        if std::fs::write(dir.join(limit), bytes.to_string()).is_ok() {
            let procs = dir.join("cgroup.procs");
            return Some((dir, procs));
        }
        let _ = std::fs::remove_dir(&dir);
    }
    None
}

/// Found by a hostile review: the default reserve was sized by the
/// machine's memory alone, and filled in a container of 512 MiB it got a
/// program of 200 MiB killed for memory. It is at most 10% of what the
/// cgroup has left now.
#[test]
fn the_default_reserve_fits_the_memory_cgroup() {
    let Some(b) = available() else { return };
    let _s = serial();
    let Some((dir, procs)) = memcg(512 << 20) else {
        skip("memcg", "no memory cgroup could be made here (not root?)");
        return;
    };
    let script = format!(
        "{} && exec \"$0\" memcg",
        prezero_testkit::enter_cgroup_sh(&procs)
    );
    let exe = b.review.to_str().unwrap();
    // No PREZERO_RESERVE: the default.
    let r = run_as(
        b,
        "sh",
        &["-c", &script, exe],
        &[("PREZERO_RESERVE", "")],
        Duration::from_secs(60),
    );
    let _ = std::fs::remove_dir(&dir);
    r.ok();
}

#[test]
fn the_fallback_says_why_once_and_the_program_runs() {
    let Some(b) = built() else { return };
    let _s = serial();
    let r = lazy(b, &["fork"], &[("PREZERO_NO_USERFAULTFD", "1")]);
    r.ok();
    let said: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("prezero: --lazy: "))
        .collect();
    assert_eq!(
        said,
        ["prezero: --lazy: userfaultfd disabled (PREZERO_NO_USERFAULTFD=1); running as prezero run does"],
        "{}",
        r.stderr
    );
    assert!(r.lazy_lines().is_empty(), "{}", r.stderr);
}
