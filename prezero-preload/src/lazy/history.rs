//! What the program took, kept for its next run (`PREZERO_HISTORY`, which
//! `prezero run --lazy --history` sets to a file per command): the bytes of the blocks
//! the lazy mode served whole. At start, `config.rs` reads it and the
//! reserve fills that much ahead, so a program that computes before it
//! touches its memory finds it ready; a wrong guess is given back after the
//! idle time, and this run's figure replaces it.

use std::io::Write;

use super::stats::Count;
use super::{stats, HUGE};
use crate::config;
use crate::sys;

/// At exit (`atexit`), in the program only (a forked child that calls
/// `exit` has its own count): writes this run's figure, in decimal, to the
/// file (created, or replacing a figure; a file that holds anything else is
/// not a history and stays as it is): the bytes of the blocks served whole,
/// at most the peak resident memory (a program that takes and frees the
/// same block in a loop is served it many times). Nothing where it cannot.
pub extern "C" fn record() {
    if !config::is_program() {
        return;
    }
    let blocks = stats::LAZY.get(Count::Moved)
        + stats::LAZY.get(Count::MovedSmall)
        + stats::LAZY.get(Count::Copied);
    let served = blocks.saturating_mul(HUGE as u64) as usize;
    let took = served.min(sys::peak_resident().unwrap_or(served));
    const LEN: usize = 24;
    let mut buf = [0u8; LEN];
    let mut w = &mut buf[..];
    let _ = writeln!(w, "{took}");
    let len = LEN - w.len();
    config::with_history(libc::O_RDWR | libc::O_CREAT, |fd| {
        let mut old = [0u8; 32];
        match sys::read_at_start(fd, &mut old) {
            Ok(0) => {}
            Ok(n) if config::figure(&old[..n]).is_some() => {}
            _ => return,
        }
        let _ = sys::replace_contents(fd, &buf[..len]);
    });
}
