//! The report's first section: real programs plainly, under `prezero run`
//! and under `prezero run --lazy` (`bench programs`), with the goals,
//! met or not: what a user who tries prezero on a program will see.

use super::fmt::{esc, ms, table, times};
use crate::rows::Programs;
use crate::units::human_size;

/// "goal: met" or "goal: NOT met".
fn goal(g: &Option<String>, met: Option<bool>) -> String {
    match (g, met) {
        (Some(g), Some(true)) => format!("{g}: met"),
        (Some(g), _) => format!("{g}: NOT met"),
        _ => String::new(),
    }
}

pub fn render(rows: &[Programs]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let missed = rows
        .iter()
        .filter(|p| p.time_goal_met == Some(false) || p.rss_goal_met == Some(false))
        .count();
    let mut h = format!(
        "<section id=\"programs\"><h2>Real programs</h2>\n<p>Unmodified programs from Debian's \
         packages plainly, under <code>prezero run</code> and under <code>prezero run \
         --lazy</code> (no other flag), interleaved; medians of {} runs and their spread; \
         × plain: plain time / the arm's (above 1 is faster), and the arm's peak RSS / plain's \
         (wait4's: the largest one process of the program's tree). {missed} of {} rows miss a \
         goal.</p>\n",
        rows.iter().map(|p| p.runs).max().unwrap_or(0),
        rows.iter().filter(|p| p.arm != "plain").count(),
    );
    let bytes = |b: u64| human_size(b as usize);
    h += &table(
        &[
            "program",
            "arm",
            "time",
            "min",
            "max",
            "× plain",
            "peak RSS",
            "min",
            "max",
            "RSS × plain",
            "time goal",
            "RSS goal",
        ],
        rows.iter().map(|p| {
            vec![
                p.program.clone(),
                p.arm.clone(),
                ms(p.time_ms),
                ms(p.time_min_ms),
                ms(p.time_max_ms),
                times(p.speedup),
                bytes(p.peak_rss_bytes),
                bytes(p.peak_rss_min_bytes),
                bytes(p.peak_rss_max_bytes),
                times(p.rss_ratio),
                goal(&p.time_goal, p.time_goal_met),
                goal(&p.rss_goal, p.rss_goal_met),
            ]
        }),
    );
    let mut commands: Vec<(&str, &str)> = Vec::new();
    for p in rows {
        if !commands.iter().any(|(n, _)| *n == p.program) {
            commands.push((&p.program, &p.command));
        }
    }
    h += "<ul class=\"note\">\n";
    for (name, command) in commands {
        h += &format!("<li>{}: <code>{}</code></li>\n", esc(name), esc(command));
    }
    for p in rows.iter().filter(|p| !p.notes.is_empty()) {
        h += &format!(
            "<li>{} {}: {}</li>\n",
            esc(&p.program),
            esc(&p.arm),
            esc(&p.notes.join("; "))
        );
    }
    h += "</ul></section>\n";
    h
}
