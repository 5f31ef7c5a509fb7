//! What `bench programs` prints: a line per program and arm (the median and
//! spread of time and peak RSS, against plain's) with the goals,
//! or the same as JSON rows.

use super::list::{Program, Setting};
use super::{Measured, Planned};
use crate::bench::run::{Arm, Goal, ARMS};
use crate::rows::{self, Row};
use crate::stats::{round3, Stats};
use crate::table::Table;

/// What every program must keep under each prezero arm: its time...
const NOT_SLOWER: Goal = Goal::Speedup(">= 0.97x", 0.97);
/// ...and its peak RSS.
const NOT_BIGGER: Goal = Goal::RssAtMost("RSS <= 1.1x + 16 MiB", 1.1, (16u64 << 20) as f64);
/// What a program whose time is first touch of zeroed memory gets from the
/// mode the README recommends for it, `--lazy`.
const FIRST_TOUCH: Goal = Goal::Speedup(">= 2x", 2.0);

/// The goals of `program`'s time and RSS in `arm` (none plainly).
fn goals(program: Program, arm: Arm) -> Option<(Goal, Goal)> {
    match arm {
        Arm::Plain => None,
        Arm::Lazy if program.first_touch() => Some((FIRST_TOUCH, NOT_BIGGER)),
        Arm::Prezero | Arm::Lazy => Some((NOT_SLOWER, NOT_BIGGER)),
    }
}

/// How the run was made, for the heading and the rows.
pub(super) struct Shown<'a> {
    pub(super) reps: usize,
    pub(super) scale: f64,
    /// The memory left here when the run began, bytes.
    pub(super) room: u64,
    pub(super) setting: &'a Setting<'a>,
    pub(super) json: bool,
}

/// One arm of one program, summed up.
struct Line {
    arm: Arm,
    time: Stats,
    rss: Stats,
    /// (goal, met) for the time and the RSS.
    goals: Option<[(Goal, bool); 2]>,
}

fn lines(program: Program, m: &[Measured; 3]) -> Vec<Line> {
    let plain = (Stats::of(&m[0].wall), Stats::of(&m[0].rss));
    ARMS.iter()
        .zip(m)
        .map(|(&arm, m)| {
            let (time, rss) = (Stats::of(&m.wall), Stats::of(&m.rss));
            let medians = (
                (plain.0.median, time.median),
                (plain.1.median as u64, rss.median as u64),
            );
            let goals = goals(program, arm).map(|(t, r)| {
                let (t_met, r_met) = (t.met(medians.0, medians.1), r.met(medians.0, medians.1));
                [(t, t_met), (r, r_met)]
            });
            Line {
                arm,
                time,
                rss,
                goals,
            }
        })
        .collect()
}

fn arm_name(arm: Arm) -> &'static str {
    match arm {
        Arm::Plain => "plain",
        Arm::Prezero => "prezero",
        Arm::Lazy => "lazy",
    }
}

impl Shown<'_> {
    pub(super) fn print(
        &self,
        planned: &[Planned],
        measured: &[[Measured; 3]],
        skipped: &[(Program, String)],
    ) {
        let table = Table::new(" ")
            .left(16)
            .left(7)
            .right(8)
            .right(13)
            .right(6)
            .right(9)
            .right(13)
            .right(6)
            .gap("  ")
            .left(0);
        if !self.json {
            println!(
                "# prezero bench programs: {} repetitions, interleaved; medians (min..max); x: \
                 plain time / the arm's (above 1 is faster); RSS: wait4's peak (the largest one \
                 process of the tree), x: the arm's / plain's; prezero: prezero run, lazy: \
                 prezero run --lazy, no other flag",
                self.reps
            );
            table.print(&[
                "program", "arm", "time", "spread", "x", "peak RSS", "spread", "x", "goals",
            ]);
        }
        for (plan, m) in planned.iter().zip(measured) {
            let p = plan.program;
            if !self.json {
                println!("# {}: {}", p.name(), p.what(self.setting));
            }
            let all = lines(p, m);
            let plain = (all[0].time.median, all[0].rss.median);
            for (line, arm) in all.iter().zip(m) {
                if self.json {
                    self.row(p, line, arm, plain);
                    continue;
                }
                let secs = |ns: f64| format!("{:.2}", ns / 1e9);
                let mib = |b: f64| format!("{:.0}", b / (1u64 << 20) as f64);
                let goals: Vec<String> = (line.goals.iter().flatten())
                    .map(|(g, met)| format!("{} {}", g.text(), if *met { "ok" } else { "NO" }))
                    .collect();
                table.print(&[
                    p.name().to_string(),
                    arm_name(line.arm).to_string(),
                    format!("{} s", secs(line.time.median)),
                    format!("({}..{})", secs(line.time.min), secs(line.time.max)),
                    format!("{:.2}x", plain.0 / line.time.median.max(1.0)),
                    format!("{} MiB", mib(line.rss.median)),
                    format!("({}..{})", mib(line.rss.min), mib(line.rss.max)),
                    format!("{:.2}x", line.rss.median / plain.1.max(1.0)),
                    goals.join(", "),
                ]);
                for note in &arm.notes {
                    println!("#   {}: {note}", arm_name(line.arm));
                }
            }
        }
        if !self.json {
            println!(
                "# goals: every program under each prezero arm >= 0.97x plain time and <= 1.1x \
                 plain peak RSS + 16 MiB; where the time is the first touch of large zeroed \
                 memory (java-pretouch, python-bytearray, numpy) >= 2x under --lazy. Memory \
                 left at the start: {} MiB; sizes at {:.0}% of the full ones",
                self.room >> 20,
                self.scale * 100.0
            );
            for (p, why) in skipped {
                println!("# no {} row: {why}", p.name());
            }
        }
    }

    /// The JSON row of one program in one arm.
    fn row(&self, p: Program, line: &Line, m: &Measured, plain: (f64, f64)) {
        let goal = |i: usize| line.goals.as_ref().map(|g| &g[i]);
        Row::Programs(rows::Programs {
            program: p.name().to_string(),
            command: p.what(self.setting),
            arm: arm_name(line.arm).to_string(),
            runs: m.wall.len() as u64,
            time_ms: round3(line.time.median / 1e6),
            time_min_ms: round3(line.time.min / 1e6),
            time_max_ms: round3(line.time.max / 1e6),
            peak_rss_bytes: line.rss.median as u64,
            peak_rss_min_bytes: line.rss.min as u64,
            peak_rss_max_bytes: line.rss.max as u64,
            speedup: round3(plain.0 / line.time.median.max(1.0)),
            rss_ratio: round3(line.rss.median / plain.1.max(1.0)),
            first_touch: p.first_touch(),
            time_goal: goal(0).map(|(g, _)| g.text().to_string()),
            time_goal_met: goal(0).map(|(_, met)| *met),
            rss_goal: goal(1).map(|(g, _)| g.text().to_string()),
            rss_goal_met: goal(1).map(|(_, met)| *met),
            scale: round3(self.scale),
            notes: m.notes.clone(),
        })
        .print();
    }
}
