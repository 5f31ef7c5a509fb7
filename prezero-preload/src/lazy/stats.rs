//! What the lazy mode did, and its line at exit (`PREZERO_STATS=1`),
//! beside the cache's.

use crate::stats::Counters;
use std::io::Write;

/// What the lazy mode counts: one counter each, in [`LAZY`].
#[derive(Clone, Copy)]
pub enum Count {
    /// Faults the handler answered.
    Faults,
    /// Huge pages moved into a block for a fault.
    Moved,
    /// Slots of small pages moved into a block.
    MovedSmall,
    /// Of those moved in, the freed ones the handler scrubbed itself (nothing
    /// was ready in the reserve).
    ScrubbedOnDemand,
    /// Blocks the handler copied zeroes into (nothing in the reserve at all).
    Copied,
    /// 4 KiB pages the handler mapped (edges, partly populated blocks, an empty
    /// reserve that could not be filled).
    Small,
    /// Freed huge pages moved back into the reserve.
    Recycled,
    /// Slots the kernel populated with a fresh huge page.
    Filled,
    /// Slots the kernel populated with small pages (it had no huge page).
    FilledSmall,
    /// Slots scrubbed (recycled pages cleared).
    Scrubbed,
    /// Slots given back to the kernel (idle).
    Released,
    /// The program's mappings registered (interposed `mmap`).
    Mappings,
    /// A moved huge page arrived split (the kernel kept the block's empty page
    /// table): from then on every slot moves a page-table entry at a time.
    Split,
    /// Faults the handler could not serve, handed to the kernel.
    Unserved,
    /// READY slots the kernel had taken back (marked free, under pressure).
    Reclaimed,
    /// First touches of a block away from the last served: the page alone.
    Sparse,
    /// Slots the handler filled itself for a block the program asked huge
    /// pages for (the reserve had none ready; counted in `Filled` too).
    FilledNow,
    /// Mappings that asked for huge pages handed to the kernel's own faults
    /// (moved huge pages arrive split here).
    ToKernel,
    /// Mappings handed to the kernel's own faults because threads faulted in
    /// them at once with the reserve empty.
    Contended,
}

impl Count {
    /// How many there are: the last one's index, plus one.
    const N: usize = Count::Contended as usize + 1;
}

impl From<Count> for usize {
    fn from(c: Count) -> usize {
        c as usize
    }
}

/// What the lazy mode did in this process: the counters' one owner.
pub static LAZY: Counters<Count, { Count::N }> = Counters::new();

/// The line, if the lazy mode did anything in this process.
pub fn print() {
    use Count::*;
    let c = |k| LAZY.get(k);
    if c(Faults) == 0 && c(Mappings) == 0 && c(Recycled) == 0 {
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
        c(Faults),
        c(Moved) + c(MovedSmall),
        c(MovedSmall),
        c(ScrubbedOnDemand),
        c(Copied),
        c(Small),
        c(Recycled),
        c(Filled) + c(FilledSmall),
        c(FilledSmall),
        c(Scrubbed),
        c(Released),
        c(Mappings),
        if c(Split) > 0 {
            "; moved huge pages arrived split: they move a page at a time"
        } else {
            ""
        },
        Note(c(Unserved), "faults handed to the kernel"),
        Note(c(Reclaimed), "reserve slots the kernel took back"),
        Note(c(Sparse), "first touches of a block given their page alone"),
        Note(
            c(FilledNow),
            "slots filled for a fault that asked for huge pages"
        ),
        Note(
            c(ToKernel),
            "mappings that asked for huge pages handed to the kernel"
        ),
        Note(
            c(Contended),
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
