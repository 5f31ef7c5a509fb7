//! `prezero bench run`: unmodified programs with and without `prezero run`,
//! in one run, interleaved (each repetition runs every program plainly and
//! under the preload, alternating which goes first), each figure's median
//! and spread per arm and the speed-up (plain / prezero: above 1 is faster).
//!
//! The programs:
//! * numpy, the loop of issue 16: `a = np.zeros(64 << 20)` (512 MiB), `a += 1.0`
//!   (the first pass, where the kernel faults and zeroes every page),
//!   `a += 1.0` again (resident memory); each a mean of 10 per process. Skipped
//!   with a reason where `python3 -c "import numpy"` fails.
//! * `prezero-bench-alloc` (src/bench/c/alloc_programs.c, built by build.rs):
//!   calloc-big (64-512 MiB blocks calloc'd, checked zero, written, freed),
//!   calloc-mix (4 KiB-64 MiB, 8 live), small (16-256 B malloc/free/realloc:
//!   what the preload must not slow down; it runs three times as often, as
//!   its 3% bound needs) and realloc-grow (64 KiB grown by 1.5x to 1 GiB:
//!   the preload must stay within 10% of glibc's mremap growth).
//!
//! The prezero arm gets exactly the environment `prezero run` would set
//! (`run::environment`), plus `PREZERO_STATS=1`, whose summary line gives
//! the memory the cache held at peak beyond what the program used. Every
//! process of either arm gets a variable of random length ([`Pad`]), so the
//! stack's alignment is luck shared evenly, not one arm's. Every
//! process's peak RSS comes from `wait4`. A program that finds a calloc
//! block not zero or a realloc that lost bytes fails the bench.
//!
//! This file holds the arguments, the run and its table; the programs and
//! what each must show are `programs.rs`, one process's run and the
//! samples of an arm `sample.rs`.

mod programs;
mod sample;

use std::ffi::{OsStr, OsString};

use programs::{alloc_programs, goal, python_with_numpy, Program, ALL, NUMPY};
use sample::{mib, own_peak_rss, run_once, Arm, Pad};

use super::progress::Progress;
use super::rows::{self, Row};
use crate::run::Settings;
use crate::stats::{round3, Stats};
use crate::table::Table;

#[derive(clap::Args)]
pub struct Args {
    /// Repetitions: each program runs this many times in each arm,
    /// interleaved (the small-allocation program three times as many).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Only these programs (numpy, calloc-big, calloc-mix, small, realloc-grow).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Tiny sizes: checks that every row runs here; the figures mean little.
    #[arg(long)]
    smoke: bool,
    /// The prezero arm runs with these (as `prezero run` takes them).
    #[command(flatten)]
    settings: Settings,
    /// One JSON object per figure.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> Result<(), String> {
    for n in &args.only {
        if !ALL.iter().any(|p| p.name() == n) {
            return Err(format!(
                "unknown program \"{n}\" (numpy, calloc-big, calloc-mix, small, realloc-grow)"
            ));
        }
    }
    if args.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    let wanted: Vec<Program> = ALL
        .into_iter()
        .filter(|p| args.only.is_empty() || args.only.iter().any(|n| n == p.name()))
        .collect();
    // The prezero arm: what `prezero run` sets, and the summary line. When
    // this bench itself runs under `prezero run`, the plain arm drops it.
    let inherited = std::env::var_os("LD_PRELOAD");
    let marker = std::env::var_os(crate::run::MARKER);
    let nested =
        crate::run::already_preloaded(inherited.as_deref().unwrap_or_default(), marker.as_deref());
    if nested {
        eprintln!(
            "prezero: bench run is itself under prezero run: the plain arm runs without LD_PRELOAD"
        );
    }
    let mut with = crate::run::environment(
        &args.settings,
        if nested { None } else { inherited.as_deref() },
        if nested { None } else { marker.as_deref() },
    )?;
    with.push(("PREZERO_STATS".into(), "1".into()));
    let plain_remove: &[&str] = if nested {
        &["LD_PRELOAD", crate::run::MARKER]
    } else {
        &[]
    };
    let preload = with
        .iter()
        .find(|(k, _)| k == OsStr::new("LD_PRELOAD"))
        .map(|(_, v)| v.to_string_lossy().into_owned())
        .unwrap_or_default();
    eprintln!("prezero: the prezero arm preloads {preload}");

    // Which programs can run here.
    let mut argv: Vec<(Program, Vec<OsString>)> = Vec::new();
    let mut skipped: Vec<(Program, String)> = Vec::new();
    let python = wanted.contains(&Program::Numpy).then(python_with_numpy);
    let c = wanted
        .iter()
        .any(|&p| p != Program::Numpy)
        .then(alloc_programs);
    for &p in &wanted {
        let exe = match (p, &python, &c) {
            (Program::Numpy, Some(Ok(py)), _) => {
                let mut v: Vec<OsString> = vec![py.into(), "-c".into(), NUMPY.into()];
                v.extend(p.args(args.smoke).into_iter().map(OsString::from));
                argv.push((p, v));
                continue;
            }
            (Program::Numpy, Some(Err(why)), _) => Err(why.clone()),
            (_, _, Some(Ok(exe))) => Ok(exe.clone()),
            (_, _, Some(Err(why))) => Err(why.clone()),
            _ => unreachable!("every wanted program has its runner checked"),
        };
        match exe {
            Ok(exe) => {
                let mut v: Vec<OsString> = vec![exe.into()];
                v.extend(p.args(args.smoke).into_iter().map(OsString::from));
                argv.push((p, v));
            }
            Err(why) => skipped.push((p, why)),
        }
    }
    for (p, why) in &skipped {
        eprintln!("prezero: bench run: no {} row: {why}", p.name());
    }
    if argv.is_empty() {
        return Err("no program could run here (see above)".into());
    }

    // Interleaved: each repetition runs every program in both arms, the
    // order of the arms alternating.
    let total: usize = argv
        .iter()
        .map(|(p, _)| 2 * p.runs_per_rep() * args.reps)
        .sum();
    let mut progress = Progress::new(total as u64);
    let mut arms: Vec<[Arm; 2]> = argv.iter().map(|_| Default::default()).collect();
    let mut flip = false;
    let mut pads = Pad::new();
    for _ in 0..args.reps {
        for ((p, v), arm) in argv.iter().zip(&mut arms) {
            for _ in 0..p.runs_per_rep() {
                flip = !flip;
                for which in if flip { [0, 1] } else { [1, 0] } {
                    progress.step(format!("{} {}", p.name(), ["plain", "prezero"][which]));
                    let s = if which == 0 {
                        run_once(v, &[pads.next()], plain_remove, *p)
                    } else {
                        let mut env = with.clone();
                        env.push(pads.next());
                        run_once(v, &env, &[], *p)
                    }?;
                    arm[which].samples.push(s);
                }
            }
        }
    }
    progress.finish();
    let floor = own_peak_rss();

    let table = Table::new(" ")
        .left(13)
        .left(17)
        .right(17)
        .right(17)
        .right(9)
        .right(9)
        .gap("  ")
        .right(10)
        .right(10)
        .gap("  ")
        .right(15);
    if !args.json {
        println!(
            "# prezero bench run: {} repetitions, interleaved; medians (+- stdev%), speed-up = plain / prezero",
            args.reps
        );
        table.print(&[
            "program",
            "figure",
            "plain ms",
            "prezero ms",
            "speed-up",
            "goal",
            "RSS plain",
            "RSS prez.",
            "held at peak",
        ]);
    }
    let mut numpy_bound = None;
    for ((p, _), [plain, pz]) in argv.iter().zip(&arms) {
        if !args.json {
            println!("# {}: {}", p.name(), p.what(args.smoke));
        }
        let held = pz.peak_held();
        let figures: Vec<&'static str> = plain.samples[0].figures.iter().map(|f| f.0).collect();
        // What no allocator can beat while the array is far larger than the
        // caches: a first pass as fast as a resident one.
        let bound = (*p == Program::Numpy).then(|| {
            let m = |fig: &str| Stats::of(&plain.figure(fig)).median;
            m("first_pass_later") / m("second_pass").max(1.0)
        });
        numpy_bound = numpy_bound.or(bound);
        for fig in figures {
            let (a, b) = (Stats::of(&plain.figure(fig)), Stats::of(&pz.figure(fig)));
            let speedup = a.median / b.median.max(1.0);
            let goal = goal(*p, fig);
            if args.json {
                Row::Run(rows::Run {
                    program: p.name().to_string(),
                    figure: fig.to_string(),
                    runs: plain.samples.len() as u64,
                    plain_ms: round3(a.median / 1e6),
                    plain_stdev_pct: round3(a.stdev_pct),
                    prezero_ms: round3(b.median / 1e6),
                    prezero_stdev_pct: round3(b.stdev_pct),
                    speedup: round3(speedup),
                    goal: goal.map(|(text, _)| text.to_string()),
                    goal_met: goal.map(|(_, min)| speedup >= min),
                    plain_peak_rss_bytes: plain.peak_rss(),
                    prezero_peak_rss_bytes: pz.peak_rss(),
                    rss_floor_bytes: Some(floor),
                    smoke: args.smoke,
                    prezero_held_beyond_use_gib: held.map(|(held, _)| held),
                    prezero_peak_in_use_gib: held.map(|(_, in_use)| in_use),
                    bound_speedup: bound.filter(|_| fig == "first_pass_later").map(round3),
                })
                .print();
            } else {
                // Milliseconds and spread aligned within their cell.
                let ms = |s: &Stats| format!("{:>9.2} (+-{:>4.1}%)", s.median / 1e6, s.stdev_pct);
                let rss = |bytes: u64| format!("{:.0} MiB", mib(bytes));
                table.print(&[
                    p.name().to_string(),
                    fig.to_string(),
                    ms(&a),
                    ms(&b),
                    format!("{speedup:.2}x"),
                    match goal {
                        Some((t, min)) if speedup >= min => format!("{t} ok"),
                        Some((t, _)) => format!("{t} NO"),
                        None => String::new(),
                    },
                    rss(plain.peak_rss()),
                    rss(pz.peak_rss()),
                    held.map_or_else(
                        || "-".to_string(),
                        |(h, u)| format!("{:.2}G + {:.2}G", u, h),
                    ),
                ]);
            }
        }
    }
    if !args.json {
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
             reads at least this bench's own {:.0} MiB (wait4 counts the image a child was \
             spawned from)",
            mib(floor)
        );
        for (p, why) in &skipped {
            println!("# no {} row: {why}", p.name());
        }
    }
    Ok(())
}
