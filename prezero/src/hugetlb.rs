//! Temporary hugetlb reservations: raise the pool for a run, put it back after.

use std::sync::{Mutex, MutexGuard};

use crate::cpu::{hugetlb_pool, HugetlbPool};
use crate::error::{Error, Result};
use crate::sys;

/// Serialises reservations of one page size in this process, so two of them
/// never restore over each other's pages: [0] for 2 MiB and other sizes, [1] for 1 GiB.
static LOCKS: [Mutex<()>; 2] = [Mutex::new(()), Mutex::new(())];

/// While alive, the hugetlb pool of one page size has been grown so that a
/// requested number of pages were free; dropping it writes the previous pool size
/// back (on every path: success, error, unwinding). Needs root.
///
/// One reservation per page size at a time per process: a second `ensure_free`
/// of the same size waits until the first is dropped (so do not hold two of one
/// size in one thread).
#[derive(Debug)]
pub struct HugetlbReservation {
    page_size: usize,
    previous: usize,
    raised: bool,
    _lock: MutexGuard<'static, ()>,
}

impl HugetlbReservation {
    /// Makes at least `pages` pages of `page_size` bytes free, growing the pool by
    /// the shortfall. Errors: no such page size, not permitted (not root), or the
    /// kernel could not find enough contiguous memory (then the pool is put back).
    pub fn ensure_free(page_size: usize, pages: usize) -> Result<HugetlbReservation> {
        let lock = LOCKS[usize::from(page_size == 1 << 30)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let pool = hugetlb_pool(page_size).ok_or(Error::Unsupported {
            kernel: "hugetlb",
            needs: "a kernel with hugetlb pages of this size",
        })?;
        let mut r = HugetlbReservation {
            page_size,
            previous: pool.total,
            raised: false,
            _lock: lock,
        };
        if pool.free >= pages {
            return Ok(r);
        }
        let want = pool.total + (pages - pool.free);
        sys::write_text(HugetlbPool::nr_path(page_size), &want.to_string())
            .map_err(|e| Error::os("write nr_hugepages", e))?;
        r.raised = true;
        let now = hugetlb_pool(page_size).map_or(0, |p| p.free);
        if now < pages {
            // Dropping `r` restores the pool.
            return Err(Error::HugetlbShortage {
                page_size,
                needed: pages,
                free: now,
                reserve_cmd: format!("echo {want} > {} (the kernel found only {now} free pages; try soon after boot)", HugetlbPool::nr_path(page_size)),
            });
        }
        Ok(r)
    }

    /// The pool size that will be restored.
    pub fn previous_total(&self) -> usize {
        self.previous
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> usize {
        self.page_size
    }
}

impl Drop for HugetlbReservation {
    fn drop(&mut self) {
        if self.raised {
            let _ = sys::write_text(
                HugetlbPool::nr_path(self.page_size),
                &self.previous.to_string(),
            );
        }
    }
}
