//! What the tests share: [`Guarded`] memory, fenced by `PROT_NONE` pages (the
//! library's tests and the fuzz targets), [`TempDir`], a directory removed
//! when the test ends however it ends (nothing left in /tmp), and their skips.
//!
//! What the tests do when they cannot check what they are about on this
//! machine: they skip, and say so through [`skip`], with one of a fixed set
//! of kinds. A skip passes, and cargo hides its output, so two variables make
//! it count:
//!
//! - `PREZERO_REQUIRE`: kinds separated by commas, or `all`. A test that would
//!   skip for a kind named there fails instead: a machine that has what the
//!   kind stands for says so, and a test that stops running there is a bug.
//!   (`PREZERO_REQUIRE_NUMA`, set, still requires `numa`.)
//! - `PREZERO_SKIP_LOG`: a file to which every skip appends the line
//!   `KIND<TAB>TEST<TAB>WHY`, for CI's summary (`.ci/run`).
//!
//! The kinds ([`KINDS`]):
//!
//! - `root`: needs root (hugetlb pools grown, other uids, a mount).
//! - `tool`: a program the test runs is not installed (cc, qemu-system-x86_64,
//!   valgrind, promtool, prlimit, nm, setpriv and unshare, mount, java,
//!   ASan's or UBSan's runtime).
//! - `kernel`: the kernel lacks or refuses a facility (io_uring, user or mount
//!   namespaces, ptrace of a thread, LazyFree showing `MADV_FREE`, whole huge
//!   pages moved by `UFFDIO_MOVE`, `MADV_GUARD_INSTALL`).
//! - `cpu`: this CPU lacks what the test needs, or has what it would refuse:
//!   a kernel it cannot run, none to refuse, no deterministic cache
//!   parameters, a recording from another architecture, an x86_64-only probe.
//! - `hugetlb`: no hugetlb pool of the size, or its pages cannot be reserved
//!   or mapped here.
//! - `numa`: a NUMA placement scenario cannot be set up: fewer than two nodes
//!   with memory and CPUs, no numactl, or no hugetlb pages on every node. In a
//!   NUMA test any reason is this kind: the NUMA guests of
//!   `scripts/guest-tests.sh` require those tests to run.
//! - `topology`: a NUMA topology only one guest has (a node with CPUs and no
//!   memory: `numa3m`, which requires it).
//! - `uffd`: the lazy mode does not run here (no userfaultfd allowed, or a
//!   kernel without `UFFDIO_MOVE`, before 6.8).
//! - `memcg`: no memory cgroup can be made (not root, no memory controller).
//! - `machine`: the scenario needs a machine as the guests are: small (at
//!   most 4 GiB: the memory pressure tests), or with cgroup v2 and its
//!   hugetlb, memory and cpu controllers for the root's children (who pays).
//! - `state`: the machine's state prevents it, for now: 1 GiB pages already
//!   free, another process that could not reserve, a pool that did not grow,
//!   a test binary uid nobody cannot run.

use std::io::Write;

mod guarded;
mod hugetlb;
mod tempdir;

pub use guarded::Guarded;
pub use hugetlb::hugetlb_unmappable;
pub use tempdir::TempDir;

/// Every kind a skip may have; see the crate's documentation for each.
pub const KINDS: &[&str] = &[
    "root", "tool", "kernel", "cpu", "hugetlb", "numa", "topology", "uffd", "memcg", "machine",
    "state",
];

/// Whether this run requires what `kind` stands for: `PREZERO_REQUIRE` names
/// it or is `all` (or, for `numa`, `PREZERO_REQUIRE_NUMA` is set, as the
/// guests' init sets it).
pub fn required(kind: &str) -> bool {
    known(kind);
    let listed = std::env::var("PREZERO_REQUIRE")
        .is_ok_and(|r| r.split(',').map(str::trim).any(|k| k == kind || k == "all"));
    listed || (kind == "numa" && std::env::var_os("PREZERO_REQUIRE_NUMA").is_some())
}

/// Says why the calling test checks nothing (the caller then returns):
/// `skipped (KIND): WHY` on stderr, and a line in `PREZERO_SKIP_LOG`'s file.
///
/// # Panics
///
/// Where [`required`]`(kind)`: the test fails rather than skip. Also for a
/// kind not in [`KINDS`].
pub fn skip(kind: &str, why: impl std::fmt::Display) {
    known(kind);
    let why = why.to_string();
    eprintln!("skipped ({kind}): {why}");
    assert!(
        !required(kind),
        "PREZERO_REQUIRE requires {kind}, but the test would skip: {why}"
    );
    if let Some(path) = std::env::var_os("PREZERO_SKIP_LOG").filter(|p| !p.is_empty()) {
        log(&path, kind, &why);
    }
}

fn known(kind: &str) {
    assert!(
        KINDS.contains(&kind),
        "unknown skip kind {kind:?} (prezero-testkit has {KINDS:?})"
    );
}

/// Appends the skip's line. One write of the whole line to a file opened
/// for appending: the tests run in parallel threads and processes, and
/// their lines must not interleave.
fn log(path: &std::ffi::OsStr, kind: &str, why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    // One line per skip: a reason may quote a program's output.
    let flat = |s: &str| s.replace(['\t', '\n', '\r'], " ");
    let line = format!("{kind}\t{}\t{}\n", flat(test), flat(why));
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write(line.as_bytes()));
    match written {
        Ok(n) if n == line.len() => {}
        Ok(n) => panic!("PREZERO_SKIP_LOG: wrote {n} of {} bytes", line.len()),
        Err(e) => panic!("PREZERO_SKIP_LOG={}: {e}", path.to_string_lossy()),
    }
}

/// Shell commands that move the shell into the cgroup whose `cgroup.procs`
/// is `procs`, for a script that then `exec`s what the cgroup should hold.
/// The kernel has refused such a write now and then on a loaded machine
/// (dash says only "echo: I/O error"): it is tried again for 5 s, and the
/// last try is coreutils' echo, which names the error.
pub fn enter_cgroup_sh(procs: &std::path::Path) -> String {
    let p = procs.display();
    format!(
        "n=0; until echo $$ 2>/dev/null > '{p}'; do n=$((n + 1)); \
         if [ $n -ge 50 ]; then /bin/echo $$ > '{p}'; exit 1; fi; sleep 0.1; done"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // The environment is the process's: one test changes it.
    #[test]
    fn a_skip_is_logged_and_a_required_one_fails() {
        let dir = TempDir::new("testkit-skips");
        let log = dir.join("skips.log");
        std::env::remove_var("PREZERO_REQUIRE_NUMA");
        std::env::set_var("PREZERO_SKIP_LOG", &log);
        std::env::set_var("PREZERO_REQUIRE", "uffd, memcg");
        assert!(required("memcg") && !required("numa"));
        skip("hugetlb", "no pool\tat all\n(here)");
        let failed = std::panic::catch_unwind(|| skip("uffd", "no UFFDIO_MOVE"));
        assert!(failed.is_err(), "a required kind fails");
        std::env::set_var("PREZERO_REQUIRE", "all");
        assert!(required("state"));
        std::env::remove_var("PREZERO_REQUIRE");
        std::env::set_var("PREZERO_REQUIRE_NUMA", "1");
        assert!(required("numa") && !required("root"));
        std::env::remove_var("PREZERO_REQUIRE_NUMA");
        assert!(std::panic::catch_unwind(|| skip("other", "")).is_err());
        let text = std::fs::read_to_string(&log).unwrap();
        let name = "tests::a_skip_is_logged_and_a_required_one_fails";
        assert_eq!(text, format!("hugetlb\t{name}\tno pool at all (here)\n"));
    }
}
