//! The preload's lazy mode (`PREZERO_LAZY=1`: page faults served from a reserve
//! of zeroed pages, with userfaultfd and `UFFDIO_MOVE`) against C programs:
//! tests/c/lazy_stress.c (one mode per run: see its header),
//! tests/c/lazy_review.c (what a hostile review found, a mode each),
//! tests/c/lazy_plain.c (programs that must behave as they do plainly),
//! tests/c/preload_stress.c's modes run again under the lazy mode,
//! tests/c/uffd_probe.c (the kernel's side of it), and a JVM when there is one.
//!
//! Each program runs as `prezero run --lazy` runs it: the preload in
//! `LD_PRELOAD`, `PREZERO_LAZY=1`, and `PREZERO_PREFILL_PID` naming the
//! program's own process (a shell sets it to its pid and execs the program),
//! so its reserve fills from start-up and it says why if it cannot run. A
//! small reserve (64 MiB) makes the programs run it dry and recycle.
//!
//! Where userfaultfd is not allowed or the kernel has no `UFFDIO_MOVE`, the
//! tests of the mechanism skip (`uffd`) with the program's own reason and
//! pass; the fallback's test runs everywhere.
//!
//! This file keeps the harness (building the programs, running them as
//! `prezero run --lazy` does, the lazy line's parser); the scenarios, by the
//! program: `programs` (lazy_stress.c, preload_stress.c's modes, uffd_probe.c,
//! a JVM), `review` (lazy_review.c), `limits` (a memory cgroup, the fallback),
//! `plain` (lazy_plain.c, and the kernel taking back what the preload holds).

#[path = "../common/mod.rs"]
mod common;

mod limits;
mod plain;
mod programs;
mod review;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use common::{
    build_stress, can_build, finish, gcc, profile_dir, serial, shared_object, sources, Run,
};
use prezero_testkit::skip;

struct Built {
    so: PathBuf,
    lazy: PathBuf,
    stress: PathBuf,
    review: PathBuf,
    plain: PathBuf,
    probe: Option<PathBuf>,
}

/// Builds everything once; `None` (with the reason printed) without gcc.
fn built() -> Option<&'static Built> {
    static BUILT: OnceLock<Result<Built, String>> = OnceLock::new();
    let b = BUILT.get_or_init(|| {
        can_build()?;
        let dir = profile_dir().join("lazy-c");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let src = sources();
        let build = |name: &str, extra: &[&str]| {
            let out = dir.join(name);
            let c = src.join(format!("{name}.c"));
            let mut args = vec!["-O2", "-g", "-Wall", "-Wextra", "-pthread"];
            args.extend([c.to_str().unwrap(), "-o", out.to_str().unwrap()]);
            args.extend(extra);
            gcc(&args).map(|()| out)
        };
        Ok(Built {
            so: shared_object(),
            lazy: build("lazy_stress", &[]).expect("compile lazy_stress.c"),
            stress: {
                let out = dir.join("preload_stress");
                build_stress(&out, &["-O2", "-g", "-Wall", "-Wextra", "-pthread"])
                    .map(|()| out)
                    .expect("compile preload_stress.c")
            },
            review: build("lazy_review", &[]).expect("compile lazy_review.c"),
            plain: build("lazy_plain", &[]).expect("compile lazy_plain.c"),
            // x86_64 only (streaming stores from immintrin.h).
            probe: cfg!(target_arch = "x86_64")
                .then(|| build("uffd_probe", &[]).expect("compile uffd_probe.c")),
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

/// The lazy mode's lines in a run's output.
trait LazyLines {
    /// The lazy mode's lines (one per process that used it).
    fn lazy_lines(&self) -> Vec<&str>;
    /// The numbers of the last lazy line (the program's own: children print
    /// theirs first), by name.
    fn lazy(&self) -> Lazy;
}

impl LazyLines for Run {
    fn lazy_lines(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| l.starts_with("prezero-preload: lazy: pid "))
            .collect()
    }

    fn lazy(&self) -> Lazy {
        let lines = self.lazy_lines();
        let line = lines
            .last()
            .unwrap_or_else(|| panic!("{}: no lazy line in:\n{}", self.what, self.stderr));
        Lazy::parse(line).unwrap_or_else(|e| panic!("{}: {e}", self.what))
    }
}

/// The lazy mode's summary line.
#[derive(Debug)]
struct Lazy {
    faults: u64,
    moved: u64,
    small: u64,
    recycled: u64,
    filled: u64,
    scrubbed: u64,
    gave_back: u64,
    mappings: u64,
    /// What follows the numbers, as "; ..." notes.
    notes: String,
}

impl Lazy {
    const TEMPLATE: &'static str = "prezero-preload: lazy: pid #: # faults: # blocks moved in \
        (# of small pages, # scrubbed on demand), # blocks copied from zeroes, \
        # small pages; # moved back; reserve filled # (# with small pages), scrubbed #, gave back \
        #; # mappings registered";

    fn parse(line: &str) -> Result<Lazy, String> {
        // Notes that follow where they apply: moved huge pages arrived split
        // (before 6.14, see `the_kernel_moves_huge_pages_whole`), faults
        // handed to the kernel, reserve slots the kernel took back.
        let end = line
            .find(" mappings registered")
            .map_or(line.len(), |i| i + " mappings registered".len());
        let (line, notes) = line.split_at(end);
        if !notes.is_empty() && !notes.starts_with("; ") {
            return Err(format!("notes that do not start with '; ': {notes}"));
        }
        let mut shape = String::new();
        let mut nums = Vec::new();
        let mut digits = String::new();
        for c in line.chars().chain(std::iter::once('\n')) {
            if c.is_ascii_digit() {
                digits.push(c);
                continue;
            }
            if !digits.is_empty() {
                nums.push(digits.parse::<u64>().map_err(|e| e.to_string())?);
                digits.clear();
                shape.push('#');
            }
            if c != '\n' {
                shape.push(c);
            }
        }
        if shape != Self::TEMPLATE {
            return Err(format!(
                "the line\n  {line}\nhas the shape\n  {shape}\nnot\n  {}",
                Self::TEMPLATE
            ));
        }
        Ok(Lazy {
            faults: nums[1],
            moved: nums[2],
            small: nums[6],
            recycled: nums[7],
            filled: nums[8],
            scrubbed: nums[10],
            gave_back: nums[11],
            mappings: nums[12],
            notes: notes.to_owned(),
        })
    }

    /// The number of the note that ends with `what` ("reserve slots the
    /// kernel took back"), 0 without one.
    fn note(&self, what: &str) -> u64 {
        self.notes
            .split("; ")
            .find_map(|n| n.strip_suffix(what)?.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// `program` in a process group of its own, its output read, without the
/// preload or any PREZERO_ variable of the test's environment.
fn clean_command(program: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("PREZERO_") || k == "LD_PRELOAD" {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// Runs `exe args` as `prezero run --lazy` would (see the module docs), with
/// `env` on top of a clean environment.
fn run_as(b: &Built, exe: &str, args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Run {
    let mut cmd = clean_command("sh");
    cmd.arg("-c")
        .arg("PREZERO_PREFILL_PID=$$ exec \"$@\"")
        .arg("sh")
        .arg(exe)
        .args(args);
    cmd.env("LD_PRELOAD", &b.so)
        .env("PREZERO_LAZY", "1")
        .env("PREZERO_STATS", "1")
        .env("PREZERO_RESERVE", "64M");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let what = format!(
        "{}PREZERO_LAZY=1 {exe} {}",
        env.iter()
            .map(|(k, v)| format!("{k}={v} "))
            .collect::<String>(),
        args.join(" ")
    );
    finish(&mut cmd, what, timeout)
}

fn lazy(b: &Built, args: &[&str], env: &[(&str, &str)]) -> Run {
    run_as(
        b,
        b.lazy.to_str().unwrap(),
        args,
        env,
        Duration::from_secs(120),
    )
}

/// The built programs, if the lazy mode runs here; else `None`, with the
/// program's own reason printed as the skip.
fn available() -> Option<&'static Built> {
    static WHY: OnceLock<Option<String>> = OnceLock::new();
    let b = built()?;
    let why = WHY.get_or_init(|| {
        let r = lazy(b, &["zero", "0"], &[]);
        r.ok();
        r.stderr
            .lines()
            .find(|l| l.starts_with("prezero: --lazy: "))
            .map(str::to_owned)
    });
    match why {
        None => Some(b),
        Some(why) => {
            skip("uffd", format!("the lazy mode does not run here: {why}"));
            None
        }
    }
}

/// Builds the C programs (and the shared object) the other tests run: the
/// guest harness runs this on the host first, since the guests have no
/// compiler.
#[test]
fn the_c_test_programs_build() {
    built();
}

/// Counts the skip a C program's mode reported on its stdout (`skipped:
/// REASON`, its protocol), if any. Its kind from the reason: the programs
/// skip for want of root (or of the memlock limit root lifts), else for
/// what the kernel does not allow.
fn child_skip(mode: &str, stdout: &str) {
    let Some(why) = stdout.lines().find_map(|l| l.strip_prefix("skipped: ")) else {
        return;
    };
    let kind = if why.contains("not root") || why.starts_with("mlock") {
        "root"
    } else {
        "kernel"
    };
    skip(kind, format!("{mode}: {why}"));
}
/// The running kernel's (major, minor).
fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (next(), next())
}

#[test]
fn the_lazy_line_parses() {
    let s = Lazy::parse(
        "prezero-preload: lazy: pid 7: 10 faults: 9 blocks moved in (2 of small pages, 1 \
         scrubbed on demand), 2 blocks copied from zeroes, 512 small pages; 4 moved back; \
         reserve filled 20 (5 with small pages), scrubbed 4, gave back 0; 1 mappings registered",
    )
    .unwrap();
    assert_eq!((s.faults, s.moved, s.small), (10, 9, 512));
    assert_eq!(
        (s.recycled, s.filled, s.scrubbed, s.gave_back, s.mappings),
        (4, 20, 4, 0, 1)
    );
    let split = Lazy::parse(
        "prezero-preload: lazy: pid 7: 1 faults: 1 blocks moved in (0 of small pages, 0 \
         scrubbed on demand), 0 blocks copied from zeroes, 0 small pages; 0 moved \
         back; reserve filled 1 (0 with small pages), scrubbed 0, gave back 0; 1 mappings \
         registered; moved huge pages arrived split: they move a page at a time",
    );
    let split = split.unwrap();
    assert_eq!(split.moved, 1);
    assert_eq!(split.note("reserve slots the kernel took back"), 0);
    let took = Lazy::parse(
        "prezero-preload: lazy: pid 7: 1 faults: 1 blocks moved in (0 of small pages, 0 \
         scrubbed on demand), 0 blocks copied from zeroes, 0 small pages; 0 moved \
         back; reserve filled 1 (0 with small pages), scrubbed 0, gave back 0; 1 mappings \
         registered; 3 faults handed to the kernel; 22 reserve slots the kernel took back",
    )
    .unwrap();
    assert_eq!(took.note("reserve slots the kernel took back"), 22);
    assert_eq!(took.note("faults handed to the kernel"), 3);
    assert!(Lazy::parse("prezero-preload: lazy: pid 7: nothing").is_err());
}
