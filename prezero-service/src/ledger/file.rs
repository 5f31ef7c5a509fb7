//! The ledger file: every segment's file, `dev ino page-size` a line, under a
//! header naming the boot it was written in, written whole whenever segments
//! come or go, so that a restarted daemon can tell its predecessor's segments
//! from any other file (`adopt.rs` reads it at start-up).

use std::collections::HashMap;
use std::io;
use std::path::Path;

use super::Ledger;
use crate::log;
use crate::replace_file::replace_file;
use crate::segment::Segment;
use prezero::region::PageKind;
use prezero_sys as sys;

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
    let files = ledger.entries().map(|(_, e)| {
        let (dev, ino) = e.file;
        (dev, ino, ledger.shapes()[e.pool].page)
    });
    let text = ledger_text(boot_id().as_deref(), files);
    replace_file(path, text.as_bytes(), 0o600, None)
}

/// The ledger file's text: the header naming `boot`, then each segment's
/// `(dev, ino, page size)` a line.
pub(crate) fn ledger_text(
    boot: Option<&str>,
    files: impl Iterator<Item = (u64, u64, usize)>,
) -> String {
    let mut text = match boot {
        Some(boot) => format!("{HEADER} {boot}\n"),
        None => format!("{HEADER}\n"),
    };
    for (dev, ino, page) in files {
        text.push_str(&format!("{dev} {ino} {page}\n"));
    }
    text
}

/// The segments a previous instance recorded in its ledger, keyed by
/// `(dev, ino)`. A ledger that is not a regular file of ours, that others
/// could have written, or that was written before the machine last booted,
/// is ignored (logged).
pub(super) fn read_ledger(path: &Path) -> HashMap<(u64, u64), PageKind> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
    else {
        return HashMap::new();
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
        return HashMap::new();
    }
    parse_ledger(&text, boot_id().as_deref()).unwrap_or_else(|why| {
        log(&format!("ignoring the ledger {}: {why}", path.display()));
        HashMap::new()
    })
}

/// The segments a ledger file's text lists, keyed by `(dev, ino)`, read in
/// the boot `now`; why it is ignored if it was written in another.
pub(crate) fn parse_ledger(
    text: &str,
    now: Option<&str>,
) -> Result<HashMap<(u64, u64), PageKind>, String> {
    let mut wanted = HashMap::new();
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
    if let (Some(then), Some(now)) = (written_in.filter(|b| !b.is_empty()), now) {
        if then != now {
            return Err(format!(
                "written before the machine last booted (boot {then}, now {now}), \
                 so nothing it lists can still be held"
            ));
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
    Ok(wanted)
}
