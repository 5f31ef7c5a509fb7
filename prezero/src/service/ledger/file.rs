//! The ledger file: every segment's file, `dev ino page-size` a line, under a
//! header naming the boot it was written in, written whole whenever segments
//! come or go, so that a restarted daemon can tell its predecessor's segments
//! from any other file (`adopt.rs` reads it at start-up).

use std::collections::HashMap;
use std::io;
use std::path::Path;

use super::Ledger;
use crate::region::PageKind;
use crate::service::log;
use crate::service::replace_file::replace_file;
use crate::service::segment::Segment;
use crate::sys;

/// How the ledger file's first line starts (the format); the id of the boot
/// it was written in follows.
const HEADER: &str = "prezero-ledger 1";

/// This boot's id, if the kernel gives one.
fn boot_id() -> Option<String> {
    sys::read_text("/proc/sys/kernel/random/boot_id").filter(|b| !b.is_empty())
}

/// Records every segment's file, `dev ino page-size` a line, so that a
/// restarted daemon can tell its predecessor's files from any other. Written
/// whole (a temporary file renamed over the old one) when segments come or
/// go; a failure (a full disk) leaves the old file as it was.
pub(crate) fn write_ledger(path: &Path, ledger: &Ledger<Segment>) -> io::Result<()> {
    let mut text = match boot_id() {
        Some(boot) => format!("{HEADER} {boot}\n"),
        None => format!("{HEADER}\n"),
    };
    for (_, e) in ledger.entries() {
        let (dev, ino) = e.file;
        let page = ledger.shapes()[e.pool].page;
        text.push_str(&format!("{dev} {ino} {page}\n"));
    }
    replace_file(path, text.as_bytes(), 0o600, None)
}

/// The segments a previous instance recorded in its ledger, keyed by
/// `(dev, ino)`. A ledger that is not a regular file of ours, that others
/// could have written, or that was written before the machine last booted,
/// is ignored (logged).
pub(super) fn read_ledger(path: &Path) -> HashMap<(u64, u64), PageKind> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let mut wanted = HashMap::new();
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
    else {
        return wanted;
    };
    let me = sys::geteuid();
    let trusted = f
        .metadata()
        .is_ok_and(|m| m.is_file() && m.uid() == me && m.mode() & 0o022 == 0);
    let mut text = String::new();
    if !trusted || f.read_to_string(&mut text).is_err() {
        log(&format!(
            "ignoring the ledger {}: not a regular file of uid {me} that only it may write",
            path.display()
        ));
        return wanted;
    }
    let mut lines = text.lines();
    // No segment outlives a boot, and inode numbers start again at each, so
    // the lines of a ledger from before the last boot (one kept on a disk)
    // can name files of this one: a client's local memfd, named and sealed
    // as segments are, would be taken over. A header without a boot id is an
    // older daemon's, of this boot as far as anyone can tell.
    let written_in = lines
        .next()
        .and_then(|h| h.strip_prefix(HEADER))
        .map(str::trim);
    if let (Some(then), Some(now)) = (written_in.filter(|b| !b.is_empty()), boot_id()) {
        if then != now {
            log(&format!(
                "ignoring the ledger {}: written before the machine last booted \
                 (boot {then}, now {now}), so nothing it lists can still be held",
                path.display()
            ));
            return wanted;
        }
    }
    for line in lines {
        let f: Vec<u64> = line
            .split_ascii_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        let page = match f.get(2) {
            Some(&p) if p == PageKind::Huge2M.page_size() as u64 => PageKind::Huge2M,
            Some(&p) if p == PageKind::Huge1G.page_size() as u64 => PageKind::Huge1G,
            _ => continue,
        };
        wanted.insert((f[0], f[1]), page);
    }
    wanted
}
