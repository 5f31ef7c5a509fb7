//! The preload as a guest in the program's process (tests/c/guest.c): its
//! threads hold no privilege the program gave up and lack no restriction it
//! entered, by any route; they never hold up its exit; they exist only
//! while needed; a descriptor the program closes by any route leaves no
//! fault waiting; memory comes back before a cgroup v1 limit kills.
//!
//! Each mode runs plainly, under the preload (`prezero run`'s environment:
//! `LD_PRELOAD`, and `PREZERO_PREFILL_PID` naming the program, so it starts
//! as it would there) and under the lazy mode (`PREZERO_LAZY=1`; skipped,
//! `uffd`, where it cannot run here). The program's stdout is the same in
//! every arm; its figures (windows, latencies) are on stderr, printed here.
//!
//! The scenarios: `routes` (ids, capabilities, filters, namespaces, each by
//! every route), `life` (exit with every CPU busy, threads only while
//! needed), `limits` (descriptors closed behind the preload's back, a
//! cgroup v1 memory limit).

#[path = "../common/mod.rs"]
mod common;

mod life;
mod limits;
mod review;
mod routes;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use common::{can_build, finish, gcc, profile_dir, serial, shared_object, sources, Run};
use prezero_testkit::skip;

/// The ways a program runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Arm {
    Plain,
    Preload,
    Lazy,
}

const ARMS: [Arm; 3] = [Arm::Plain, Arm::Preload, Arm::Lazy];

struct Built {
    so: PathBuf,
    guest: PathBuf,
    review: PathBuf,
}

/// The shared object and tests/c/guest.c, built once; `None` (the reason
/// printed) without gcc.
fn built() -> Option<&'static Built> {
    static BUILT: OnceLock<Result<Built, String>> = OnceLock::new();
    let b = BUILT.get_or_init(|| {
        can_build()?;
        let dir = profile_dir().join("guest-c");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let build = |name: &str| {
            let out = dir.join(name);
            let src = sources().join(format!("{name}.c"));
            let (src, out_s) = (src.to_str().unwrap(), out.to_str().unwrap());
            gcc(&[
                "-O2", "-g", "-Wall", "-Wextra", "-pthread", src, "-o", out_s,
            ])
            .map(|()| out)
        };
        Ok(Built {
            so: shared_object(),
            guest: build("guest")?,
            review: build("guest_review")?,
        })
    });
    match b {
        Ok(b) => Some(b),
        Err(why) => {
            skip("tool", why);
            None
        }
    }
}

/// Runs `guest args` in `arm`, with `env` on top of a clean environment.
fn run(b: &Built, arm: Arm, args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Run {
    run_in(b, arm, "true", args, env, timeout)
}

/// [`run`] of `guest args`, after the shell commands `first` (entering a
/// cgroup).
fn run_in(
    b: &Built,
    arm: Arm,
    first: &str,
    args: &[&str],
    env: &[(&str, &str)],
    timeout: Duration,
) -> Run {
    run_program(&b.guest, b, arm, first, args, env, timeout)
}

/// Runs `guest_review args` in `arm` as [`run`] runs `guest`.
fn run_review(b: &Built, arm: Arm, args: &[&str], env: &[(&str, &str)]) -> Run {
    run_program(
        &b.review,
        b,
        arm,
        "true",
        args,
        env,
        Duration::from_secs(300),
    )
}

/// Runs `program args` in `arm` after the shell commands `first`.
fn run_program(
    program: &Path,
    b: &Built,
    arm: Arm,
    first: &str,
    args: &[&str],
    env: &[(&str, &str)],
    timeout: Duration,
) -> Run {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("{first} && PREZERO_PREFILL_PID=$$ exec \"$@\""))
        .arg("sh")
        .arg(program)
        .args(args)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("PREZERO_") || k == "LD_PRELOAD" {
            cmd.env_remove(k);
        }
    }
    if arm != Arm::Plain {
        cmd.env("LD_PRELOAD", &b.so);
    }
    if arm == Arm::Lazy {
        cmd.env("PREZERO_LAZY", "1");
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    finish(
        &mut cmd,
        format!("{arm:?}: guest {}", args.join(" ")),
        timeout,
    )
}

/// Whether `r` (a run in the lazy arm) could not start the lazy mode: then
/// the arm is skipped, with the program's own reason.
fn lazy_refused(r: &Run) -> bool {
    match r
        .stderr
        .lines()
        .find(|l| l.starts_with("prezero: --lazy: "))
    {
        Some(why) => {
            skip("uffd", format!("the lazy mode does not run here: {why}"));
            true
        }
        None => false,
    }
}

/// Counts the skip the program reported (`skipped: WHY` on stdout), if any:
/// `root` for want of root, else `kernel`.
fn program_skip(what: &str, r: &Run) -> bool {
    let Some(why) = r.stdout.lines().find_map(|l| l.strip_prefix("skipped: ")) else {
        return false;
    };
    let kind = if why.contains("not root") {
        "root"
    } else {
        "kernel"
    };
    skip(kind, format!("{what}: {why}"));
    true
}

/// The number after `key` in `text` (`"worst 12 ms"`, key `"worst "`).
fn number_after(text: &str, key: &str) -> Option<f64> {
    let rest = &text[text.find(key)? + key.len()..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Builds what the others run (the guests of `scripts/guest-tests.sh` have
/// no compiler: the host runs this first).
#[test]
fn the_guest_program_builds() {
    built();
}

#[test]
fn numbers_are_read_after_their_key() {
    let line = "route nnp: worst 12 ms less restricted (uid); threads of ours: 2 before";
    assert_eq!(number_after(line, "worst "), Some(12.0));
    assert_eq!(number_after(line, "ours: "), Some(2.0));
    assert_eq!(number_after(line, "missing "), None);
}
