//! The pressure row: a program in one arm frees its memory and lives on
//! (under prezero, what it freed may be kept for it) while a plain program
//! beside it, in the same memory cgroup, takes memory of its own. The
//! figure is the neighbour's: how long it takes to get its memory while the
//! arm's program holds what it holds, against the plain pair. A cgroup of its
//! own bounds the memory the pair shares without taking the machine's.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::programs::Program;
use super::sample::{run_once, Sample};

/// A memory cgroup made for the row (v2, else v1), removed when dropped.
pub(super) struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    /// A cgroup with `limit` bytes of memory, or why not (no root, no
    /// memory controller where this process may make one).
    pub(super) fn make(limit: usize) -> Result<Cgroup> {
        let name = format!("prezero-bench-{}", std::process::id());
        let v2 = PathBuf::from("/sys/fs/cgroup");
        let enabled = std::fs::read_to_string(v2.join("cgroup.subtree_control"))
            .is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"));
        let (dir, file) = if enabled {
            (v2.join(&name), "memory.max")
        } else {
            (v2.join("memory").join(&name), "memory.limit_in_bytes")
        };
        std::fs::create_dir(&dir).with_context(|| {
            format!(
                "cannot make the memory cgroup {} (it needs root and the memory controller)",
                dir.display()
            )
        })?;
        let cg = Cgroup { dir };
        std::fs::write(cg.dir.join(file), limit.to_string())
            .with_context(|| format!("cannot set {}", cg.dir.join(file).display()))?;
        Ok(cg)
    }

    /// `argv` started in the cgroup: a shell writes its pid there, then
    /// execs it.
    fn wrap(&self, argv: &[OsString]) -> Vec<OsString> {
        let mut v: Vec<OsString> = vec![
            "/bin/sh".into(),
            "-c".into(),
            "echo $$ > \"$0\" && exec \"$@\"".into(),
            self.dir.join("cgroup.procs").into(),
        ];
        v.extend(argv.iter().cloned());
        v
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Its processes have been reaped; the kernel may still be freeing
        // their memory for a moment.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!("prezero: could not remove {}", self.dir.display());
    }
}

/// One pair: `holder` in its arm (`env`, `remove`) until it has freed its
/// memory, then `neighbor` plainly (`plain_env`, `plain_remove`) beside it,
/// both in `cg`. The neighbour's figures, with the holder's peak RSS and
/// summary line.
pub(super) fn run_pair(
    cg: &Cgroup,
    holder: &[OsString],
    (env, remove): (&[(OsString, OsString)], &[&str]),
    neighbor: &[OsString],
    (plain_env, plain_remove): (&[(OsString, OsString)], &[&str]),
) -> Result<Sample> {
    let argv = cg.wrap(holder);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for r in remove {
        cmd.env_remove(r);
    }
    let mut child = cmd
        .spawn()
        .context("cannot run the pressure row's holder")?;
    let mut err_pipe = child.stderr.take().expect("piped");
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    let held = out.read_line(&mut line).is_ok() && line.trim() == "held";
    let beside = held.then(|| {
        run_once(
            &cg.wrap(neighbor),
            plain_env,
            plain_remove,
            Program::Pressure,
        )
    });
    // Its stdin closed, the holder ends.
    drop(child.stdin.take());
    let mut rest = String::new();
    let _ = out.read_to_string(&mut rest);
    // Our own child, reaped here alone (`child` is never waited on).
    let waited = prezero_sys::wait_with_usage(child.id() as libc::pid_t);
    let err = err_reader.join().unwrap_or_default();
    // SAFETY: an all-zero rusage is a valid value (integers and timevals).
    let (status, ru) = waited.unwrap_or((-1, unsafe { std::mem::zeroed() }));
    let ok = status != -1 && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    if !held || !ok || !rest.contains("bad=0") {
        let tail: Vec<&str> = err.lines().rev().take(6).collect();
        bail!(
            "VERIFY FAILED or program failed: the pressure row's holder (status {status:#x}, \
             stdout: {} {}; stderr: {})",
            line.trim(),
            rest.trim(),
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    let mut sample = beside.expect("run once held")?;
    // ru_maxrss is in KiB on Linux.
    sample.maxrss = ru.ru_maxrss as u64 * 1024;
    sample.stats = err
        .lines()
        .rfind(|l| l.starts_with("prezero-preload: "))
        .map(str::to_owned);
    Ok(sample)
}
