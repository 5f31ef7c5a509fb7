//! What the preload's tests share: building the shared object and the C
//! test programs, running a program with or without the preload, and reading
//! what it printed (the `PREZERO_STATS=1` line among it).
#![allow(dead_code)]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The shared object and the compiled programs.
pub struct Built {
    pub so: PathBuf,
    pub stress: PathBuf,
    pub dl: PathBuf,
    pub dir: PathBuf,
}

/// One test at a time: they measure resident memory and time, and the
/// machines that run them have two cores.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/c")
}

/// `<target>/<profile>` of this test executable (`.../deps/preload-HASH`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test runs from <target>/<profile>/deps")
        .to_path_buf()
}

/// The .so of this package, built now: an integration test does not make
/// cargo build (or rebuild) a cdylib-only library. A no-op when it is up to
/// date. In `<target>/preload`, a target dir of its own: built alone, the
/// package takes prezero without its C ABI, and in the workspace's dir that
/// build and every workspace build (which unifies the C ABI back on) would
/// rebuild prezero over each other's (the cdylib's file name has no hash).
/// `scripts/preload-suites.sh` uses the same dir.
pub fn shared_object() -> PathBuf {
    shared_object_in("preload", &[])
}

/// The .so built as [`shared_object`] builds it, with `features`, in
/// `<target>/<name>` (a build with other features in the same dir would
/// replace the other's file).
pub fn shared_object_in(name: &str, features: &[&str]) -> PathBuf {
    let dir = profile_dir();
    let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "prezero-preload"]);
    if !features.is_empty() {
        cmd.arg("--features").arg(features.join(","));
    }
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    // <target>/<profile>, or <target>/<triple>/<profile> when cross-built:
    // cargo marks its target dir with both files (either can be missing, as
    // CACHEDIR.TAG is when the directory existed before cargo first ran).
    let up = dir.parent().expect("target dir").to_path_buf();
    let is_target =
        |d: &Path| d.join("CACHEDIR.TAG").exists() || d.join(".rustc_info.json").exists();
    let (target, triple) = match (is_target(&up), up.file_name(), up.parent()) {
        (false, Some(triple), Some(top)) => (top.to_path_buf(), Some(triple.to_owned())),
        _ => (up, None),
    };
    let own = target.join(name);
    let mut so = own.clone();
    if let Some(t) = &triple {
        cmd.arg("--target").arg(t);
        so.push(t);
    }
    so.extend([profile, "libprezero_preload.so"]);
    if prebuilt() {
        assert!(
            so.exists(),
            "{} was not built before (PREZERO_TEST_PREBUILT)",
            so.display()
        );
        return so;
    }
    let out = cmd
        .env("CARGO_TARGET_DIR", &own)
        .output()
        .expect("run cargo build");
    assert!(
        out.status.success(),
        "cargo build -p prezero-preload failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(so.exists(), "{} not built", so.display());
    so
}

/// Set by `scripts/guest-tests.sh`: the guests have no cargo and no gcc, so
/// the shared object and the C programs are the ones the host built at the
/// same paths (the harness runs `the_c_test_programs_build` first).
pub fn prebuilt() -> bool {
    std::env::var_os("PREZERO_TEST_PREBUILT").is_some()
}

/// Whether the C test programs can be had: compiled here, or prebuilt.
pub fn can_build() -> Result<(), String> {
    if prebuilt() || Command::new("gcc").arg("--version").output().is_ok() {
        Ok(())
    } else {
        Err("no gcc to build the C test programs".into())
    }
}

/// Runs gcc, or where the programs are prebuilt checks that the output
/// (the argument after `-o`) is there.
pub fn gcc(args: &[&str]) -> Result<(), String> {
    if prebuilt() {
        let out = args.iter().skip_while(|a| **a != "-o").nth(1);
        return match out {
            Some(o) if Path::new(o).exists() => Ok(()),
            _ => Err(format!(
                "{out:?} was not built before (PREZERO_TEST_PREBUILT)"
            )),
        };
    }
    let out = Command::new("gcc")
        .args(args)
        .output()
        .map_err(|e| format!("gcc: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "gcc {}:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// tests/c/preload_stress.c's program: its helpers and dispatch, and the
/// files of its modes, compiled together (they share preload_stress.h).
const STRESS_SOURCES: [&str; 4] = [
    "preload_stress.c",
    "preload_stress_traffic.c",
    "preload_stress_calls.c",
    "preload_stress_limits.c",
];

/// Compiles preload_stress.c's program to `out`, with `flags`.
pub fn build_stress(out: &Path, flags: &[&str]) -> Result<(), String> {
    let files: Vec<PathBuf> = STRESS_SOURCES.iter().map(|f| sources().join(f)).collect();
    let mut args = flags.to_vec();
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    args.extend(["-o", out.to_str().unwrap(), "-ldl"]);
    gcc(&args)
}

/// Builds everything once; `None` (with the reason printed) without gcc.
pub fn built() -> Option<&'static Built> {
    static BUILT: OnceLock<Result<Built, String>> = OnceLock::new();
    let b = BUILT.get_or_init(|| {
        can_build()?;
        let dir = profile_dir().join("preload-c");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let src = sources();
        let stress = dir.join("preload_stress");
        let dl = dir.join("libpreload_dl.so");
        build_stress(&stress, &["-O2", "-g", "-Wall", "-Wextra", "-pthread"])
            .expect("compile preload_stress.c");
        gcc(&[
            "-O2",
            "-g",
            "-Wall",
            "-Wextra",
            "-shared",
            "-fPIC",
            "-pthread",
            src.join("preload_dl.c").to_str().unwrap(),
            "-o",
            dl.to_str().unwrap(),
        ])
        .expect("compile preload_dl.c");
        Ok(Built {
            so: shared_object(),
            stress,
            dl,
            dir,
        })
    });
    match b {
        Ok(b) => Some(b),
        Err(why) => {
            prezero_testkit::skip("tool", why);
            None
        }
    }
}

/// What a run left behind.
pub struct Run {
    /// Exit code, or None if a signal ended it.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub what: String,
}

impl Run {
    pub fn ok(&self) -> &Self {
        assert!(
            self.code == Some(0),
            "{}: exit {:?} signal {:?}\nstdout:\n{}\nstderr:\n{}",
            self.what,
            self.code,
            self.signal,
            self.stdout,
            self.stderr
        );
        self
    }

    /// The PREZERO_STATS=1 line, parsed.
    pub fn stats(&self) -> Stats {
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| l.starts_with("prezero-preload: pid ") && !l.contains(": calls:"))
            .collect();
        assert!(
            !lines.is_empty(),
            "{}: no stats line in stderr:\n{}",
            self.what,
            self.stderr
        );
        // The last one is the process's own (exec'd children print theirs).
        Stats::parse(lines[lines.len() - 1])
            .unwrap_or_else(|e| panic!("{}: stats line does not parse: {e}", self.what))
    }
}

/// Runs the stress program in `mode`, with the preload or without, with
/// `env` on top of a clean environment (no PREZERO_* or LD_PRELOAD from ours).
pub fn run_with(
    b: &Built,
    prefix: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
    preload: bool,
    timeout: Duration,
) -> Run {
    let (prog, rest): (PathBuf, Vec<String>) = if prefix.is_empty() {
        (
            b.stress.clone(),
            args.iter().map(|s| s.to_string()).collect(),
        )
    } else {
        let mut rest: Vec<String> = prefix[1..].iter().map(|s| s.to_string()).collect();
        rest.push(b.stress.to_str().unwrap().to_string());
        rest.extend(args.iter().map(|s| s.to_string()));
        (PathBuf::from(prefix[0]), rest)
    };
    let mut cmd = Command::new(&prog);
    // Its own process group: a timeout kills the forked children too (they
    // hold the output pipes open).
    cmd.process_group(0);
    cmd.args(&rest)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("PREZERO_") || k == "LD_PRELOAD" || k.starts_with("MALLOC_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    if preload {
        cmd.env("LD_PRELOAD", &b.so);
    }
    let what = format!(
        "{}{} {}{}",
        env.iter()
            .map(|(k, v)| format!("{k}={v} "))
            .collect::<String>(),
        if preload {
            "LD_PRELOAD=prezero"
        } else {
            "(glibc)"
        },
        prefix.join(" "),
        args.join(" ")
    );
    finish(&mut cmd, what, timeout)
}

/// Runs `cmd` (its stdout and stderr piped, its own process group) to its
/// end, or kills the group after `timeout` and fails the test with what it
/// printed (a timed-out run is a deadlock or a fault never answered).
pub fn finish(cmd: &mut Command, what: String, timeout: Duration) -> Run {
    use std::os::unix::process::ExitStatusExt;
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if start.elapsed() > timeout {
            // SAFETY: kill(2) of the process group this test made.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what}: still running after {timeout:?} (a deadlock, or a fault never answered?)\nstdout:\n{}\nstderr:\n{}",
                t_out.join().unwrap(),
                t_err.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let run = Run {
        code: status.code(),
        signal: status.signal(),
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
        what,
    };
    println!(
        "{} ({:.1} s): exit {:?} signal {:?}\n{}{}",
        run.what,
        start.elapsed().as_secs_f64(),
        run.code,
        run.signal,
        run.stdout,
        run.stderr
    );
    run
}

pub fn run(b: &Built, args: &[&str], env: &[(&str, &str)], preload: bool) -> Run {
    run_with(b, &[], args, env, preload, Duration::from_secs(120))
}

pub const LOW: (&str, &str) = ("PREZERO_THRESHOLD", "64K");
pub const STATS: (&str, &str) = ("PREZERO_STATS", "1");

/// The summary line: every number, by name.
#[derive(Debug)]
pub struct Stats {
    pub served: u64,
    pub served_gib: f64,
    pub populated_gib: f64,
    pub faults_avoided: u64,
    pub cleared_gib: f64,
    pub scrubbed_gib: f64,
    pub spare_gib: f64,
    pub gave_back_gib: f64,
    pub peak_held_gib: f64,
    pub peak_in_use_gib: f64,
    pub fallbacks: u64,
    pub remaps: u64,
    pub bad_frees: u64,
    /// Memory pressure events (the line's note, where it has one).
    pub pressure_events: u64,
    /// Calls that went on without the lock a starved scrubber kept (a note).
    pub around_scrubber: u64,
}

impl Stats {
    const TEMPLATE: &'static str = "prezero-preload: pid #: # large blocks served (# GiB, # GiB \
        from the cache populated: ~# page faults avoided; # GiB cleared by calloc itself), \
        scrubbed # GiB at # GB/s, populated # GiB spare, gave back # GiB, peak held # GiB beyond \
        # GiB in use, # to the next allocator, # realloc by mremap, # bad frees";

    pub fn parse(line: &str) -> Result<Stats, String> {
        let (line, notes) = match line.split_once(" bad frees; ") {
            Some((l, notes)) => (&line[..l.len() + " bad frees".len()], notes),
            None => (line, ""),
        };
        let (mut pressure_events, mut around_scrubber) = (0, 0);
        for note in notes.split("; ").filter(|n| !n.is_empty()) {
            let (n, what) = note
                .split_once(' ')
                .ok_or_else(|| format!("the note {note:?}"))?;
            let n: u64 = n.parse().map_err(|_| format!("the note {note:?}"))?;
            match what {
                "memory pressure events (all held went back)" => pressure_events = n,
                "calls went around a starved scrubber" => around_scrubber = n,
                _ => return Err(format!("the note {note:?}")),
            }
        }
        let mut shape = String::new();
        let mut nums = Vec::new();
        let mut chars = line.chars().peekable();
        while let Some(&c) = chars.peek() {
            if c.is_ascii_digit() {
                let mut n = String::new();
                while let Some(&d) = chars.peek() {
                    if d.is_ascii_digit() || d == '.' {
                        n.push(d);
                        chars.next();
                    } else {
                        break;
                    }
                }
                nums.push(n.parse::<f64>().map_err(|e| format!("{n}: {e}"))?);
                shape.push('#');
            } else {
                shape.push(c);
                chars.next();
            }
        }
        if shape != Self::TEMPLATE {
            return Err(format!(
                "the line\n  {line}\nhas the shape\n  {shape}\nnot\n  {}",
                Self::TEMPLATE
            ));
        }
        let n = |i: usize| nums[i];
        let s = Stats {
            served: n(1) as u64,
            served_gib: n(2),
            populated_gib: n(3),
            faults_avoided: n(4) as u64,
            cleared_gib: n(5),
            scrubbed_gib: n(6),
            spare_gib: n(8),
            gave_back_gib: n(9),
            peak_held_gib: n(10),
            peak_in_use_gib: n(11),
            fallbacks: n(12) as u64,
            remaps: n(13) as u64,
            bad_frees: n(14) as u64,
            pressure_events,
            around_scrubber,
        };
        // what the numbers promise of each other (two decimals printed)
        let gib = |pages: u64| (pages * 4096) as f64 / (1u64 << 30) as f64;
        if s.populated_gib > s.served_gib + 0.01
            || s.cleared_gib > s.populated_gib + 0.01
            || (gib(s.faults_avoided) - s.populated_gib).abs() > 0.01
            || s.scrubbed_gib < 0.0
        {
            return Err(format!("inconsistent: {s:?}"));
        }
        Ok(s)
    }
}

pub fn lines_with<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(prefix)).collect()
}

pub fn number_after(text: &str, key: &str) -> f64 {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("no {key:?} in {text}"));
    let rest = &text[at + key.len()..];
    let num: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    num.parse()
        .unwrap_or_else(|_| panic!("no number after {key:?} in {text}"))
}
