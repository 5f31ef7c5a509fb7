//! What the program took, kept for its next run (`PREZERO_HISTORY`, which
//! `prezero run --lazy` sets to a file per command): the bytes of the blocks
//! the lazy mode served whole. At start, `config.rs` reads it and the
//! reserve fills that much ahead, so a program that computes before it
//! touches its memory finds it ready; a wrong guess is given back after the
//! idle time, and this run's figure replaces it.

use std::io::Write;
use std::sync::atomic::Ordering::Relaxed;

use super::{stats, HUGE};
use crate::config;
use crate::sys;

/// At exit (`atexit`): writes this run's figure, in decimal, to the file
/// (created, or replacing a figure); nothing where it cannot (a program
/// that changed who it is, say).
pub extern "C" fn record() {
    let Some(path) = config::history_file() else {
        return;
    };
    // A file that holds anything but a figure is not a history: never
    // overwritten (a variable naming /etc/passwd in a root program's
    // environment must not cost it).
    let mut old = [0u8; 32];
    if let Ok(n) = sys::read_file_start(path, &mut old) {
        if n == old.len() || !old[..n].iter().all(|&b| b.is_ascii_digit() || b == b'\n') {
            return;
        }
    }
    let blocks =
        stats::MOVED.load(Relaxed) + stats::MOVED_SMALL.load(Relaxed) + stats::COPIED.load(Relaxed);
    const LEN: usize = 24;
    let mut buf = [0u8; LEN];
    let mut w = &mut buf[..];
    let _ = writeln!(w, "{}", blocks.saturating_mul(HUGE as u64));
    let len = LEN - w.len();
    let _ = sys::replace_file(path, &buf[..len]);
}
