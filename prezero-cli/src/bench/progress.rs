//! The progress bar of long benches.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar on stderr that stays hidden for the first second, so quick
/// runs print nothing extra.
pub struct Progress {
    bar: ProgressBar,
    start: Instant,
    shown: bool,
}

impl Progress {
    pub fn new(total: u64) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} {msg}")
                .expect("static template")
                .progress_chars("=> "),
        );
        Progress {
            bar,
            start: Instant::now(),
            shown: false,
        }
    }

    pub fn step(&mut self, msg: String) {
        if !self.shown && self.start.elapsed() > Duration::from_secs(1) {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown = true;
        }
        self.bar.set_message(msg);
        self.bar.inc(1);
    }

    /// A line on stderr, above the bar where it is shown.
    pub fn println(&self, line: String) {
        self.bar.suspend(|| eprintln!("{line}"));
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
