//! `prezero bench programs`: real, unmodified programs from Debian's
//! packages (`list.rs`: a JVM pre-touching its heap, Python's bytearray,
//! sort, sqlite, gcc, numpy and a slice of its tests, a PostgreSQL server
//! loading rows (`postgres.rs`), zstd with a long window, a Java program
//! filling arrays), each plainly, under `prezero run` and under `prezero run
//! --lazy` with no other flag, interleaved as `bench run` interleaves its
//! own (each repetition runs every program in every arm, the arm that goes
//! first turning round) and through the same machinery: the arms'
//! environments, the shell that execs each process, the random pad, `wait4`.
//! Per program and arm: the median and the spread (min..max) of the wall
//! time and of the peak RSS, plain time / the arm's, the arm's RSS / plain's,
//! and what the issue asks (`show.rs`). A program that is not installed is
//! skipped with one line naming its Debian package; one that fails, or
//! prints the wrong answer, in any arm fails the bench.
//!
//! Peak RSS is `wait4`'s `ru_maxrss`: the largest peak of any one process
//! of the program's tree that was waited for (the server's shell waits for
//! the server and its clients), not their sum.

mod inputs;
mod list;
mod postgres;
mod show;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::progress::Progress;
use super::run::sample::{run_to_end, shown, Pad};
use super::run::{as_prezero_run_execs, ArmEnvironments, ARMS};
use crate::run::Settings;
use inputs::Scratch;
use list::{Program, Ready, Setting, ALL, QUICK};

#[derive(clap::Args)]
pub struct Args {
    /// Only these programs (java-pretouch, python-bytearray, sort, sqlite,
    /// gcc, numpy, numpy-tests, postgres, zstd, java-fill).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Repetitions: each program runs this many times in each arm, interleaved.
    #[arg(long)]
    reps: Option<usize>,
    /// Only Python's bytearray and sort, 3 repetitions unless --reps says:
    /// a part of `bench all --quick`.
    #[arg(long)]
    quick: bool,
    /// One JSON object per program and arm.
    #[arg(long)]
    json: bool,
}

/// The memory the largest program needs at full size with the lazy arm's
/// reserve beside it: with less left, every size shrinks in proportion.
const FULL_ROOM: u64 = 4 << 30;

/// The programs asked for, in the order of [`ALL`].
fn wanted(args: &Args) -> Result<Vec<Program>> {
    for n in &args.only {
        if !ALL.iter().any(|p| p.name() == n) {
            let names: Vec<&str> = ALL.iter().map(|p| p.name()).collect();
            bail!("unknown program \"{n}\" ({})", names.join(", "));
        }
    }
    let pool: &[Program] = if args.quick && args.only.is_empty() {
        &QUICK
    } else {
        &ALL
    };
    Ok(pool
        .iter()
        .copied()
        .filter(|p| args.only.is_empty() || args.only.iter().any(|n| n == p.name()))
        .collect())
}

/// What the memory cgroups of this process have left below their limits:
/// the least over the cgroup and its ancestors, in v2's files or v1's.
fn cgroup_room() -> Option<u64> {
    prezero_sys::raw::cgroup::room().map(|b| b as u64)
}

/// The sizes' share of their full values: what MemAvailable and the memory
/// cgroup leave, against [`FULL_ROOM`].
fn scale() -> Result<(f64, u64)> {
    let available = prezero_sys::mem_available() as u64;
    let room = cgroup_room().map_or(available, |c| c.min(available));
    let scale = (room as f64 / FULL_ROOM as f64).min(1.0);
    if scale < 1.0 / 16.0 {
        bail!(
            "{} MiB of memory left here (MemAvailable, the memory cgroup's room): the programs \
             need at least {} MiB",
            room >> 20,
            FULL_ROOM >> 24
        );
    }
    if scale < 1.0 {
        eprintln!(
            "prezero: {} MiB of memory left here: the programs' sizes scaled to {:.0}%",
            room >> 20,
            scale * 100.0
        );
    }
    Ok((scale, room))
}

/// `p` as text, for a command line.
fn text(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// `exe` on PATH.
fn find(exe: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(exe))
        .find(|f| f.is_file())
}

/// A program made ready, and each arm's environment for it.
struct Planned {
    program: Program,
    ready: Ready,
    envs: [Vec<(OsString, OsString)>; 3],
}

/// Every process of one program in one arm.
#[derive(Default)]
struct Measured {
    /// Wall times, nanoseconds.
    wall: Vec<f64>,
    /// Peak RSS, bytes.
    rss: Vec<f64>,
    /// What prezero said on stderr (the lazy mode not available, ...), each once.
    notes: Vec<String>,
}

/// `arm_env`'s environments for a program with its own variables; for one
/// that runs as another user, with the library copied where that user can
/// read it (the cache directory is ours alone).
fn environments(
    arm_env: &ArmEnvironments,
    ready: &Ready,
    dir: &Path,
) -> Result<[Vec<(OsString, OsString)>; 3]> {
    let copy = match (&arm_env.library, ready.user) {
        (Some(lib), Some((uid, _))) => Some((lib, readable_copy(lib, dir, uid)?)),
        _ => None,
    };
    Ok(std::array::from_fn(|which| {
        let mut env: Vec<(OsString, OsString)> = arm_env.envs[which]
            .iter()
            .map(|(k, v)| match &copy {
                Some((lib, copy)) => {
                    let v = v.to_string_lossy().replace(&*lib.to_string_lossy(), copy);
                    (k.clone(), v.into())
                }
                None => (k.clone(), v.clone()),
            })
            .collect();
        env.extend(ready.env.iter().cloned());
        env.extend(arm_env.history(which, &ready.argv));
        env
    }))
}

/// `lib` copied into `dir` for `uid` to read (made once).
fn readable_copy(lib: &Path, dir: &Path, uid: u32) -> Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let copy = dir.join(lib.file_name().context("the library's name")?);
    if !copy.exists() {
        std::fs::copy(lib, &copy).context("copying the library for another user")?;
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o555))?;
        std::os::unix::fs::chown(&copy, Some(uid), None)?;
    }
    Ok(text(&copy))
}

pub fn run(args: &Args) -> Result<()> {
    let wanted = wanted(args)?;
    let reps = args.reps.unwrap_or(if args.quick { 3 } else { 5 });
    if reps == 0 {
        bail!("--reps must be at least 1");
    }
    let (scale, room) = scale()?;
    let root = prezero_sys::geteuid() == 0;
    let user = root.then(postgres::unprivileged_user).flatten();
    let scratch = Scratch::new(if user.is_some() { 0o755 } else { 0o700 })?;
    let setting = Setting {
        dir: scratch.path(),
        scale,
        user,
    };
    let arm_env = ArmEnvironments::new(&Settings::default(), "bench programs")?;
    let mut planned = Vec::new();
    let mut skipped = Vec::new();
    for program in wanted {
        let made = program
            .prepare(&setting)
            .and_then(|ready| Ok((environments(&arm_env, &ready, scratch.path())?, ready)));
        match made {
            Ok((envs, ready)) => planned.push(Planned {
                program,
                ready,
                envs,
            }),
            Err(why) => {
                let why = crate::message(&why);
                super::not_measured(&format!("the {} row", program.name()), &why);
                skipped.push((program, why));
            }
        }
    }
    if planned.is_empty() {
        bail!("no program could run here (see above)");
    }
    let measured = measure(&planned, reps, &arm_env, scratch.path())?;
    let shown = show::Shown {
        reps,
        scale,
        room,
        setting: &setting,
        json: args.json,
    };
    shown.print(&planned, &measured, &skipped);
    Ok(())
}

/// Every program in every arm, `reps` times, interleaved.
fn measure(
    planned: &[Planned],
    reps: usize,
    arm_env: &ArmEnvironments,
    dir: &Path,
) -> Result<Vec<[Measured; 3]>> {
    let mut progress = Progress::new((planned.len() * ARMS.len() * reps) as u64);
    let mut measured: Vec<[Measured; 3]> = planned
        .iter()
        .map(|plan| {
            let mut arms: [Measured; 3] = Default::default();
            arms[2].notes.extend(plan.ready.lazy_denied.clone());
            arms
        })
        .collect();
    let mut pads = Pad::new();
    let mut turn = 0;
    let names = ["plain", "prezero", "lazy"];
    for _ in 0..reps {
        for (plan, arms) in planned.iter().zip(&mut measured) {
            turn += 1;
            let argv = as_prezero_run_execs(&plan.ready.argv);
            for k in 0..ARMS.len() {
                let which = (turn + k) % ARMS.len();
                progress.step(format!("{} {}", plan.program.name(), names[which]));
                let mut env = plan.envs[which].clone();
                env.push(pads.next());
                let ended = run_to_end(&argv, &env, arm_env.remove(which), Some(dir))?;
                let answered = plan.ready.expect.is_none_or(|w| ended.out.contains(w));
                if !ended.succeeded() || !answered {
                    bail!(
                        "{} failed {} ({}): {}; stdout: {}; stderr: {}",
                        plan.program.name(),
                        if which == 0 {
                            "plainly"
                        } else {
                            "under prezero"
                        },
                        ended.how(),
                        shown(&plan.ready.argv),
                        ended.out.trim().chars().take(300).collect::<String>(),
                        ended.err_tail(6)
                    );
                }
                let m = &mut arms[which];
                m.wall.push(ended.wall.as_nanos() as f64);
                m.rss.push(ended.maxrss as f64);
                for line in ended.err.lines().filter(|l| l.starts_with("prezero: ")) {
                    if !m.notes.iter().any(|n| n == line) {
                        m.notes.push(line.to_string());
                    }
                }
            }
        }
    }
    progress.finish();
    Ok(measured)
}
