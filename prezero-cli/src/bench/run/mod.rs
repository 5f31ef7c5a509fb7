//! `prezero bench run`: unmodified programs plainly, under `prezero run` and
//! under `prezero run --lazy`, in one run, interleaved (each repetition runs
//! every program in every arm, the arm that goes first turning round), each
//! figure's median and spread per arm and the speed-ups (plain / the arm:
//! above 1 is faster).
//!
//! The programs:
//! * numpy, the loop prezero run was first measured on: `a = np.zeros(64 << 20)` (512 MiB), `a += 1.0`
//!   (the first pass, where the kernel faults and zeroes every page),
//!   `a += 1.0` again (resident memory); each a mean of 10 per process. Skipped
//!   with a reason where `python3 -c "import numpy"` fails.
//! * `prezero-bench-alloc` (src/bench/c/alloc_programs.c, built by build.rs):
//!   calloc-big (64-512 MiB blocks calloc'd, checked zero, written, freed),
//!   calloc-mix (4 KiB-64 MiB, 8 live), small (16-256 B malloc/free/realloc:
//!   what the preload must not slow down; it runs three times as often, as
//!   its 3% bound needs) and realloc-grow (64 KiB grown by 1.5x to 1 GiB:
//!   the preload must stay within 10% of glibc's mremap growth); and for the
//!   lazy mode: first-touch (2 s of computing, then an mmap of
//!   512 MiB written a byte per 4 KiB: at least 5x under --lazy), the same
//!   with MADV_HUGEPAGE (3x), sparse (every 16th 2 MiB block of 8 GiB
//!   touched: RssAnon within 10% of the touched memory and the reserve) and
//!   recycle (calloc 256 MiB, touch, free, 20 times: 5x); busy (a calloc
//!   of 64 MiB and its first pass while a spinning thread per core keeps
//!   the scrubber, at SCHED_IDLE, starved: the worst of 40 as well as their
//!   sum); and pressure (in
//!   a memory cgroup of 1 GiB, a plain program's 768 MiB beside one of the
//!   arm that freed as much: `pressure.rs`). The lazy goals depend on the
//!   reserve: asked for (`--reserve`), it fills ahead and the first touch is
//!   5x (3x with huge pages); by default it grows with demand, and a
//!   first-touch program must be no slower and at most 10% bigger than
//!   plainly.
//!
//! The prezero arms get exactly the environment `prezero run` (and with
//! `--lazy`) would set (`run::environment`), plus `PREZERO_STATS=1`, whose
//! summary line gives the memory the cache held at peak beyond what the
//! program used; every arm's process starts through a shell that sets
//! `PREZERO_PREFILL_PID` to the program's pid and execs it, as `prezero run`
//! does. Every process gets a variable of random length ([`Pad`]), so the
//! stack's alignment is luck shared evenly, not one arm's. Every
//! process's peak RSS comes from `wait4`. A program that finds a calloc
//! block not zero or a realloc that lost bytes fails the bench.
//!
//! This file holds the arguments, the run and its table; the programs and
//! what each must show are `programs.rs`, one process's run and the
//! samples of an arm `sample.rs`.

mod pressure;
mod programs;
pub(super) mod sample;

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::DirBuilderExt;

use programs::{alloc_programs, goal, python_with_numpy, Program, ALL};
pub(super) use programs::{Arm, Goal, NUMPY};
use sample::{own_peak_rss, run_once, Pad, Samples};

use super::progress::Progress;
use crate::rows::{self, Row};
use crate::run::Settings;
use crate::stats::{round3, Stats};
use crate::table::Table;
use crate::units::human_size;
use anyhow::{bail, Context, Result};

#[derive(clap::Args)]
pub struct Args {
    /// Repetitions: each program runs this many times in each arm,
    /// interleaved (the small-allocation program three times as many).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Only these programs (numpy, calloc-big, calloc-mix, small, busy,
    /// exit, realloc-grow, first-touch, first-touch-thp, sparse, recycle,
    /// pressure).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Tiny sizes: checks that every row runs here; the figures mean little.
    #[arg(long)]
    smoke: bool,
    /// The prezero arms run with these (as `prezero run` takes them; the
    /// first without --lazy whatever is given here, the second with it).
    #[command(flatten)]
    settings: Settings,
    /// One JSON object per figure.
    #[arg(long)]
    json: bool,
}

const GIB: f64 = (1u64 << 30) as f64;

/// The arms, in the order of their columns.
pub(in crate::bench) const ARMS: [Arm; 3] = [Arm::Plain, Arm::Prezero, Arm::Lazy];

/// How a figure is shown: memory in MiB, else milliseconds.
fn is_memory(figure: &str) -> bool {
    figure == "rss_anon"
}

/// `argv` started through a shell that sets `PREZERO_PREFILL_PID` to the
/// program's own pid and execs it, as `prezero run` does (the program fills
/// its lazy reserve from start-up); every arm alike, so a process's time
/// holds the same shell in each.
pub(in crate::bench) fn as_prezero_run_execs(argv: &[OsString]) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![
        "/bin/sh".into(),
        "-c".into(),
        "PREZERO_PREFILL_PID=$$ exec \"$@\"".into(),
        "sh".into(),
    ];
    v.extend(argv.iter().cloned());
    v
}

/// What each arm's processes get: the variables set (none plainly; what
/// `prezero run` and `prezero run --lazy` set, and `PREZERO_STATS=1`, whose
/// summary line gives the memory the cache held) and those removed (the
/// plain arm's `LD_PRELOAD` when the bench itself runs under `prezero run`).
pub(in crate::bench) struct ArmEnvironments {
    /// By arm, in the order of [`ARMS`].
    pub(in crate::bench) envs: [Vec<(OsString, OsString)>; 3],
    nested: bool,
    /// The library the prezero arms preload (`None`: the one this bench's
    /// own `LD_PRELOAD` holds, when it runs under `prezero run`).
    pub(in crate::bench) library: Option<std::path::PathBuf>,
    /// The lazy arm's history files (`PREZERO_HISTORY`, as `prezero run
    /// --lazy` keeps one per command), in a directory of this bench's own,
    /// removed at its end: a command's first repetition is its first run,
    /// the others its later runs, whatever ran before the bench.
    history: Option<std::path::PathBuf>,
}

impl Drop for ArmEnvironments {
    fn drop(&mut self) {
        if let Some(dir) = &self.history {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl ArmEnvironments {
    /// The arms' environments for `settings` (the first prezero arm without
    /// --lazy whatever they say, the second with it); `bench` names the bench
    /// in what it says.
    pub(in crate::bench) fn new(settings: &Settings, bench: &str) -> Result<ArmEnvironments> {
        let inherited = std::env::var_os("LD_PRELOAD");
        let marker = std::env::var_os(crate::run::MARKER);
        let nested = crate::run::already_preloaded(
            inherited.as_deref().unwrap_or_default(),
            marker.as_deref(),
        );
        if nested {
            eprintln!(
                "prezero: {bench} is itself under prezero run: the plain arm runs without \
                 LD_PRELOAD"
            );
        }
        let env_of = |lazy: bool| -> Result<Vec<(OsString, OsString)>> {
            let settings = Settings {
                lazy,
                ..settings.clone()
            };
            let mut env = crate::run::environment(
                &settings,
                if nested { None } else { inherited.as_deref() },
                if nested { None } else { marker.as_deref() },
            )?;
            env.push(("PREZERO_STATS".into(), "1".into()));
            Ok(env)
        };
        let envs = [Vec::new(), env_of(false)?, env_of(true)?];
        let value = |name: &str| {
            let (_, v) = envs[1].iter().find(|(k, _)| k == OsStr::new(name))?;
            Some(v.clone())
        };
        let preload = value("LD_PRELOAD").unwrap_or_default();
        eprintln!(
            "prezero: the prezero arms preload {}",
            preload.to_string_lossy()
        );
        let library = value(crate::run::MARKER).map(Into::into);
        // `<cache>/bench-<pid>/history`: the preload takes a history only
        // in a directory of that name.
        let history = settings
            .history
            .then(|| crate::run::history::directory(&format!("bench-{}", std::process::id())))
            .flatten()
            .filter(|base| {
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(base.join("history"))
                    .is_ok()
            });
        Ok(ArmEnvironments {
            envs,
            nested,
            library,
            history,
        })
    }

    /// The history file arm `which` gives the command `argv`, as a variable:
    /// the lazy arm's only.
    pub(in crate::bench) fn history(
        &self,
        which: usize,
        argv: &[OsString],
    ) -> Option<(OsString, OsString)> {
        let base = self.history.as_ref().filter(|_| which == 2)?;
        let (program, args) = argv.split_first()?;
        let file = crate::run::history::file_in(&base.join("history"), program, args)?;
        Some(("PREZERO_HISTORY".into(), file.into()))
    }

    /// The variables removed from arm `which`'s processes.
    pub(in crate::bench) fn remove(&self, which: usize) -> &'static [&'static str] {
        if which == 0 && self.nested {
            &["LD_PRELOAD", crate::run::MARKER]
        } else {
            &[]
        }
    }
}

/// The lazy arm's reserve: `--reserve`, else the preload's default (the
/// smaller of 1 GiB and 10% of MemAvailable).
fn reserve_bytes(settings: &Settings) -> Result<usize> {
    if let Some(r) = &settings.reserve {
        return crate::units::parse_size(r).context("--reserve");
    }
    let available = prezero_sys::raw::meminfo(b"MemAvailable:");
    Ok(available.map_or(1 << 30, |a| a / 10).min(1 << 30))
}

pub fn run(args: &Args) -> Result<()> {
    let wanted = wanted_programs(args)?;
    let arm_env = ArmEnvironments::new(&args.settings, "bench run")?;
    let reserve = LazyReserve(
        reserve_bytes(&args.settings)?,
        args.settings.reserve.is_some(),
        args.settings.history,
    );
    let (mut argv, mut skipped) = runnable(&wanted, args.smoke);
    let cgroup = pressure_cgroup(&mut argv, &mut skipped, args.smoke);
    for (p, why) in &skipped {
        super::not_measured(&format!("the {} row", p.name()), why);
    }
    if argv.is_empty() {
        bail!("no program could run here (see above)");
    }
    let arms = measure(args, &argv, &arm_env, cgroup.as_ref())?;
    let floor = own_peak_rss();
    print_results(args, &argv, &arms, &skipped, floor, reserve);
    Ok(())
}

/// The programs `--only` names (all by default), once the arguments are checked.
fn wanted_programs(args: &Args) -> Result<Vec<Program>> {
    for n in &args.only {
        if !ALL.iter().any(|p| p.name() == n) {
            let names: Vec<&str> = ALL.iter().map(|p| p.name()).collect();
            bail!("unknown program \"{n}\" ({})", names.join(", "));
        }
    }
    if args.reps == 0 {
        bail!("--reps must be at least 1");
    }
    Ok(ALL
        .into_iter()
        .filter(|p| args.only.is_empty() || args.only.iter().any(|n| n == p.name()))
        .collect())
}

/// Each program's command line.
type Commands = Vec<(Program, Vec<OsString>)>;
/// Each program that cannot run here, and why.
type Skipped = Vec<(Program, String)>;

/// Which programs can run here: each one's command line, and each other's
/// reason for not running.
fn runnable(wanted: &[Program], smoke: bool) -> (Commands, Skipped) {
    let mut argv: Commands = Vec::new();
    let mut skipped: Skipped = Vec::new();
    let python = wanted.contains(&Program::Numpy).then(python_with_numpy);
    let c = wanted
        .iter()
        .any(|&p| p != Program::Numpy)
        .then(alloc_programs);
    for &p in wanted {
        let exe = match (p, &python, &c) {
            (Program::Numpy, Some(Ok(py)), _) => {
                let mut v: Vec<OsString> = vec![py.into(), "-c".into(), NUMPY.into()];
                v.extend(p.args(smoke).into_iter().map(OsString::from));
                argv.push((p, as_prezero_run_execs(&v)));
                continue;
            }
            (Program::Numpy, Some(Err(why)), _) => Err(crate::message(why)),
            (_, _, Some(Ok(exe))) => Ok(exe.clone()),
            (_, _, Some(Err(why))) => Err(crate::message(why)),
            _ => unreachable!("every wanted program has its runner checked"),
        };
        match exe {
            Ok(exe) => {
                let mut v: Vec<OsString> = vec![exe.into()];
                v.extend(p.args(smoke).into_iter().map(OsString::from));
                argv.push((p, as_prezero_run_execs(&v)));
            }
            Err(why) => skipped.push((p, why)),
        }
    }
    (argv, skipped)
}

/// The pressure row's cgroup, if one can be made here (else the row moves
/// from `argv` to `skipped`).
fn pressure_cgroup(
    argv: &mut Commands,
    skipped: &mut Skipped,
    smoke: bool,
) -> Option<pressure::Cgroup> {
    let i = argv.iter().position(|(p, _)| *p == Program::Pressure)?;
    match pressure::Cgroup::make(Program::cgroup_limit(smoke)) {
        Ok(cg) => Some(cg),
        Err(why) => {
            skipped.push((Program::Pressure, crate::message(&why)));
            argv.remove(i);
            None
        }
    }
}

/// Every program's samples in every arm, interleaved: each repetition runs
/// every program in every arm, the arm that goes first turning round.
fn measure(
    args: &Args,
    argv: &[(Program, Vec<OsString>)],
    arm_env: &ArmEnvironments,
    cgroup: Option<&pressure::Cgroup>,
) -> Result<Vec<[Samples; 3]>> {
    let total: usize = argv
        .iter()
        .map(|(p, _)| ARMS.len() * p.runs_per_rep() * args.reps)
        .sum();
    let mut progress = Progress::new(total as u64);
    let mut arms: Vec<[Samples; 3]> = argv.iter().map(|_| Default::default()).collect();
    let mut turn = 0;
    let mut pads = Pad::new();
    // The plain program beside each that has one (the pressure row's).
    let neighbors: std::collections::HashMap<Program, Vec<OsString>> = argv
        .iter()
        .filter_map(|(p, v)| {
            // The executable, after the shell's four words.
            let mut n: Vec<OsString> = vec![v[4].clone()];
            n.extend(p.neighbor_args(args.smoke)?.into_iter().map(OsString::from));
            Some((*p, as_prezero_run_execs(&n)))
        })
        .collect();
    for _ in 0..args.reps {
        for ((p, v), arm) in argv.iter().zip(&mut arms) {
            for _ in 0..p.runs_per_rep() {
                turn += 1;
                for k in 0..ARMS.len() {
                    let which = (turn + k) % ARMS.len();
                    progress.step(format!(
                        "{} {}",
                        p.name(),
                        ["plain", "prezero", "lazy"][which]
                    ));
                    let mut env = arm_env.envs[which].clone();
                    env.extend(arm_env.history(which, v));
                    env.push(pads.next());
                    let remove = arm_env.remove(which);
                    let sample = match (cgroup, neighbors.get(p)) {
                        (Some(cg), Some(n)) => {
                            let plain = vec![pads.next()];
                            pressure::run_pair(
                                cg,
                                v,
                                (&env, remove),
                                n,
                                (&plain, arm_env.remove(0)),
                            )?
                        }
                        _ => run_once(v, &env, remove, *p)?,
                    };
                    arm[which].samples.push(sample);
                }
            }
        }
    }
    progress.finish();
    Ok(arms)
}

/// The table, or one JSON row per figure.
fn print_results(
    args: &Args,
    argv: &[(Program, Vec<OsString>)],
    arms: &[[Samples; 3]],
    skipped: &[(Program, String)],
    floor: u64,
    reserve: LazyReserve,
) {
    let table = results_table();
    if !args.json {
        print_heading(&table, args, reserve);
    }
    let mut numpy_bound = None;
    for ((p, _), [plain, pz, lz]) in argv.iter().zip(arms) {
        if !args.json {
            println!("# {}: {}", p.name(), p.what(args.smoke));
        }
        let figures: Vec<&'static str> = plain.samples[0].figures.iter().map(|f| f.0).collect();
        // What no allocator can beat while the array is far larger than the
        // caches: a first pass as fast as a resident one.
        let bound = (*p == Program::Numpy).then(|| {
            let m = |fig: &str| Stats::of(&plain.figure(fig)).median;
            m("first_pass_later") / m("second_pass").max(1.0)
        });
        numpy_bound = numpy_bound.or(bound);
        for fig in figures {
            let figure = Figure::of(*p, fig, [plain, pz, lz], args.smoke, reserve);
            if args.json {
                figure.row(args.smoke, floor, bound).print();
            } else {
                table.print(&figure.cells());
            }
        }
    }
    if !args.json {
        print_notes(numpy_bound, floor, skipped);
    }
}

/// The table's columns, in the order of [`Figure::cells`].
fn results_table() -> Table {
    Table::new(" ")
        .left(15)
        .left(16)
        .right(17)
        .right(17)
        .right(17)
        .right(7)
        .right(7)
        .gap("  ")
        .left(24)
        .gap("  ")
        .right(9)
        .right(9)
        .right(9)
        .gap("  ")
        .right(14)
        .gap("  ")
        .right(16)
}

/// The lazy arm's reserve: its most bytes, whether it fills ahead of demand
/// (`--reserve`), and whether a command's history fills it ahead from its
/// second run (`--history`).
#[derive(Clone, Copy)]
pub(super) struct LazyReserve(pub usize, pub bool, pub bool);

/// The table's title line (what was run, and the lazy arm's reserve) and headings.
fn print_heading(table: &Table, args: &Args, reserve: LazyReserve) {
    println!(
        "# prezero bench run: {} repetitions, interleaved; medians (+- stdev%); x: plain / \
         the arm (above 1 is faster, or smaller); lazy: prezero run --lazy, reserve {}",
        args.reps,
        if reserve.1 {
            format!("{} filled ahead (--reserve)", human_size(reserve.0))
        } else {
            format!(
                "grown with demand, {} at most (the pressure row's: a tenth of its \
                 cgroup's room){}",
                human_size(reserve.0),
                if reserve.2 {
                    "; --history: from a command's second run, filled ahead with what its last run took"
                } else {
                    ""
                }
            )
        }
    );
    table.print(&[
        "program",
        "figure",
        "plain",
        "prezero",
        "lazy",
        "prez. x",
        "lazy x",
        "goal",
        "RSS plain",
        "RSS prez.",
        "RSS lazy",
        "held at peak",
        "MemAvail low",
    ]);
}

/// One figure of one program in the three arms, and the prezero arms' goals.
struct Figure<'a> {
    program: Program,
    name: &'static str,
    /// Plain, prezero, lazy.
    arms: [&'a Samples; 3],
    stats: [Stats; 3],
    /// The prezero arm's goal and the lazy arm's, each with whether it was met.
    goals: [(Option<Goal>, Option<bool>); 2],
    low: [Option<u64>; 3],
    /// Memory in MiB, time in ms (the row's `_ms` fields, and `unit`).
    scale: f64,
}

impl<'a> Figure<'a> {
    fn of(
        program: Program,
        name: &'static str,
        arms: [&'a Samples; 3],
        smoke: bool,
        reserve: LazyReserve,
    ) -> Figure<'a> {
        let stats = arms.map(|arm| Stats::of(&arm.figure(name)));
        let plain = arms[0];
        let goals = [(Arm::Prezero, 1), (Arm::Lazy, 2)].map(|(arm, i)| {
            let g = goal(program, name, arm, smoke, reserve);
            let met = g.as_ref().map(|g| {
                g.met(
                    (stats[0].median, stats[i].median),
                    (plain.peak_rss(), arms[i].peak_rss()),
                )
            });
            (g, met)
        });
        let scale = if is_memory(name) {
            (1u64 << 20) as f64
        } else {
            1e6
        };
        Figure {
            program,
            name,
            arms,
            stats,
            goals,
            low: arms.map(Samples::low_available),
            scale,
        }
    }

    /// Plain / the arm's median (above 1 is faster, or smaller).
    fn speedup(&self, arm: usize) -> f64 {
        self.stats[0].median / self.stats[arm].median.max(1.0)
    }

    /// The figure's JSON row; `bound` is numpy's (see [`print_results`]).
    fn row(&self, smoke: bool, floor: u64, bound: Option<f64>) -> Row {
        let [plain, pz, lz] = self.arms;
        let [a, b, c] = self.stats;
        let [(gp, met_p), (gl, met_l)] = &self.goals;
        let (fig, scale, low) = (self.name, self.scale, self.low);
        let held = pz.peak_held();
        Row::Run(rows::Run {
            program: self.program.name().to_string(),
            figure: fig.to_string(),
            runs: plain.samples.len() as u64,
            plain_ms: round3(a.median / scale),
            plain_stdev_pct: round3(a.stdev_pct),
            prezero_ms: round3(b.median / scale),
            prezero_stdev_pct: round3(b.stdev_pct),
            speedup: round3(self.speedup(1)),
            goal: gp.as_ref().map(|g| g.text().to_string()),
            goal_met: *met_p,
            plain_peak_rss_bytes: plain.peak_rss(),
            prezero_peak_rss_bytes: pz.peak_rss(),
            rss_floor_bytes: Some(floor),
            smoke,
            prezero_held_beyond_use_gib: held.map(|(held, _)| held),
            prezero_peak_in_use_gib: held.map(|(_, in_use)| in_use),
            bound_speedup: bound.filter(|_| fig == "first_pass_later").map(round3),
            unit: is_memory(fig).then(|| "MiB".to_string()),
            lazy_ms: Some(round3(c.median / scale)),
            lazy_stdev_pct: Some(round3(c.stdev_pct)),
            lazy_speedup: Some(round3(self.speedup(2))),
            lazy_goal: gl.as_ref().map(|g| g.text().to_string()),
            lazy_goal_met: *met_l,
            lazy_peak_rss_bytes: Some(lz.peak_rss()),
            plain_low_available_bytes: low[0],
            prezero_low_available_bytes: low[1],
            lazy_low_available_bytes: low[2],
        })
    }

    /// The figure's cells in the table.
    fn cells(&self) -> [String; 13] {
        let [plain, pz, lz] = self.arms;
        let [a, b, c] = self.stats;
        let [(gp, met_p), (gl, met_l)] = &self.goals;
        let scale = self.scale;
        let held = pz.peak_held();
        let unit = if is_memory(self.name) { "MiB" } else { "ms" };
        let cell = |s: &Stats| format!("{:>7.1}{unit} +-{:>3.0}%", s.median / scale, s.stdev_pct);
        let rss = |bytes: u64| human_size(bytes as usize);
        let goals: Vec<String> = [("prez.", gp, met_p), ("lazy", gl, met_l)]
            .into_iter()
            .filter_map(|(arm, g, met)| {
                let ok = if (*met)? { "ok" } else { "NO" };
                Some(format!("{arm} {} {ok}", g.as_ref()?.text()))
            })
            .collect();
        [
            self.program.name().to_string(),
            self.name.to_string(),
            cell(&a),
            cell(&b),
            cell(&c),
            format!("{:.2}x", self.speedup(1)),
            format!("{:.2}x", self.speedup(2)),
            goals.join(", "),
            rss(plain.peak_rss()),
            rss(pz.peak_rss()),
            rss(lz.peak_rss()),
            held.map_or_else(
                || "-".to_string(),
                |(h, u)| format!("{:.2}G + {:.2}G", u, h),
            ),
            self.low
                .map(|b| b.map_or("-".into(), |b| format!("{:.1}", b as f64 / GIB)))
                .join("/")
                + "G",
        ]
    }
}

/// What the table's figures mean, and the rows not measured.
fn print_notes(numpy_bound: Option<f64>, floor: u64, skipped: &[(Program, String)]) {
    if let Some(b) = numpy_bound {
        println!(
            "# numpy: first_pass_later: the iterations after the first. With an array \
             far larger than the last-level cache a first pass cannot beat a pass over \
             memory already resident: plain first_pass_later / plain second_pass = \
             {b:.2}x (bound_speedup in --json) is the most any allocator can give this \
             loop here (a block that fits the cache can beat it: calloc's clear leaves it \
             there, as with --smoke)"
        );
    }
    println!(
        "# process: the whole process (start, work, exit); held at peak: the most any \
         prezero process had in use + kept beyond it (its PREZERO_STATS line); peak RSS \
         reads at least this bench's own {} (wait4 counts the image a child was \
         spawned from); sparse rss_anon: RssAnon after the touches, the lazy arm's \
         reserve in it; MemAvail low: the lowest MemAvailable while each arm ran \
         (plain/prezero/lazy)",
        human_size(floor as usize)
    );
    for (p, why) in skipped {
        println!("# no {} row: {why}", p.name());
    }
}
