//! What the lazy mode did, and its line at exit (`PREZERO_STATS=1`),
//! beside the cache's.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Faults the handler answered.
pub static FAULTS: AtomicU64 = AtomicU64::new(0);
/// Huge pages moved into a block for a fault.
pub static MOVED: AtomicU64 = AtomicU64::new(0);
/// Slots of small pages moved into a block.
pub static MOVED_SMALL: AtomicU64 = AtomicU64::new(0);
/// Of those moved in, the freed ones the handler scrubbed itself (nothing
/// was ready in the reserve).
pub static SYNC: AtomicU64 = AtomicU64::new(0);
/// Blocks the handler copied zeroes into (nothing in the reserve at all).
pub static COPIED: AtomicU64 = AtomicU64::new(0);
/// 4 KiB pages the handler mapped (edges, partly populated blocks, an empty
/// reserve that could not be filled).
pub static SMALL: AtomicU64 = AtomicU64::new(0);
/// Freed huge pages moved back into the reserve.
pub static RECYCLED: AtomicU64 = AtomicU64::new(0);
/// Slots the kernel populated with a fresh huge page.
pub static FILLED: AtomicU64 = AtomicU64::new(0);
/// Slots the kernel populated with small pages (it had no huge page).
pub static FILLED_SMALL: AtomicU64 = AtomicU64::new(0);
/// Slots scrubbed (recycled pages cleared).
pub static SCRUBBED: AtomicU64 = AtomicU64::new(0);
/// Slots given back to the kernel (idle).
pub static RELEASED: AtomicU64 = AtomicU64::new(0);
/// The program's mappings registered (interposed `mmap`).
pub static MAPPINGS: AtomicU64 = AtomicU64::new(0);
/// A moved huge page arrived split (the kernel kept the block's empty page
/// table): from then on every slot moves a page-table entry at a time.
pub static SPLIT: AtomicU64 = AtomicU64::new(0);
/// Faults the handler could not serve, handed to the kernel.
pub static UNSERVED: AtomicU64 = AtomicU64::new(0);
/// READY slots the kernel had taken back (marked free, under pressure).
pub static RECLAIMED: AtomicU64 = AtomicU64::new(0);
/// First touches of a block away from the last served: the page alone.
pub static SPARSE: AtomicU64 = AtomicU64::new(0);
/// Slots the handler filled itself for a block the program asked huge
/// pages for (the reserve had none ready; counted in FILLED too).
pub static FILLED_NOW: AtomicU64 = AtomicU64::new(0);
/// Mappings that asked for huge pages handed to the kernel's own faults
/// (moved huge pages arrive split here).
pub static TO_KERNEL: AtomicU64 = AtomicU64::new(0);
/// Mappings handed to the kernel's own faults because threads faulted in
/// them at once with the reserve empty.
pub static CONTENDED: AtomicU64 = AtomicU64::new(0);

const ALL: [&AtomicU64; 19] = [
    &FAULTS,
    &MOVED,
    &MOVED_SMALL,
    &SYNC,
    &COPIED,
    &SMALL,
    &RECYCLED,
    &FILLED,
    &FILLED_SMALL,
    &SCRUBBED,
    &RELEASED,
    &MAPPINGS,
    &SPLIT,
    &UNSERVED,
    &RECLAIMED,
    &SPARSE,
    &FILLED_NOW,
    &TO_KERNEL,
    &CONTENDED,
];

/// A forked child starts its own account.
pub fn reset() {
    for c in ALL {
        c.store(0, Relaxed);
    }
}

/// The line, if the lazy mode did anything in this process.
pub fn print() {
    if FAULTS.load(Relaxed) == 0 && MAPPINGS.load(Relaxed) == 0 && RECYCLED.load(Relaxed) == 0 {
        return;
    }
    const LEN: usize = 1024;
    let mut buf = [0u8; LEN];
    let mut w = &mut buf[..];
    let _ = writeln!(
        w,
        "prezero-preload: lazy: pid {}: {} faults: {} blocks moved in ({} of small pages, {} \
         scrubbed on demand), {} blocks copied from zeroes, {} small pages; \
         {} moved back; reserve filled {} ({} with small pages), scrubbed {}, gave back {}; {} \
         mappings registered{}{}{}{}{}{}{}",
        std::process::id(),
        FAULTS.load(Relaxed),
        MOVED.load(Relaxed) + MOVED_SMALL.load(Relaxed),
        MOVED_SMALL.load(Relaxed),
        SYNC.load(Relaxed),
        COPIED.load(Relaxed),
        SMALL.load(Relaxed),
        RECYCLED.load(Relaxed),
        FILLED.load(Relaxed) + FILLED_SMALL.load(Relaxed),
        FILLED_SMALL.load(Relaxed),
        SCRUBBED.load(Relaxed),
        RELEASED.load(Relaxed),
        MAPPINGS.load(Relaxed),
        if SPLIT.load(Relaxed) > 0 {
            "; moved huge pages arrived split: they move a page at a time"
        } else {
            ""
        },
        Note(UNSERVED.load(Relaxed), "faults handed to the kernel"),
        Note(
            RECLAIMED.load(Relaxed),
            "reserve slots the kernel took back"
        ),
        Note(
            SPARSE.load(Relaxed),
            "first touches of a block given their page alone"
        ),
        Note(
            FILLED_NOW.load(Relaxed),
            "slots filled for a fault that asked for huge pages"
        ),
        Note(
            TO_KERNEL.load(Relaxed),
            "mappings that asked for huge pages handed to the kernel"
        ),
        Note(
            CONTENDED.load(Relaxed),
            "mappings handed to the kernel (threads faulting at once, the reserve empty)"
        ),
    );
    let used = LEN - w.len();
    crate::sys::write_stderr(&buf[..used]);
}

/// "; N what", where N is not 0 (a note the line carries only then).
struct Note(u64, &'static str);

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self.0 {
            0 => Ok(()),
            n => write!(f, "; {n} {}", self.1),
        }
    }
}
