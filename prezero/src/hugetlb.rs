//! Temporary hugetlb reservations: raise the pool for a run, put it back after.

use std::sync::{Mutex, MutexGuard};

use crate::cpu::{hugetlb_pool, HugetlbPool};
use crate::error::{Error, Result};
use crate::sys;

/// Serialises reservations of one page size in this process, so one never
/// counts another's pages as free for itself: [0] for 2 MiB and other sizes,
/// [1] for 1 GiB.
static LOCKS: [Mutex<()>; 2] = [Mutex::new(()), Mutex::new(())];

/// While alive, the hugetlb pool of one page size has been grown so that a
/// requested number of pages were free; dropping it shrinks the pool by what
/// it added (on every path: success, error, unwinding). Needs root.
///
/// Other processes may reserve at the same time (a daemon, a test's child):
/// each change of the pool is a read-modify-write under an `flock` of the
/// pool's own `nr_hugepages` file, and each reservation gives back only what
/// it added, so two of them never undo each other or leave pages behind.
///
/// One reservation per page size at a time per process: a second `ensure_free`
/// of the same size waits until the first is dropped (so do not hold two of one
/// size in one thread).
#[derive(Debug)]
pub struct HugetlbReservation {
    page_size: usize,
    previous: usize,
    added: usize,
    _lock: MutexGuard<'static, ()>,
}

/// Runs `f` holding an exclusive `flock` on the pool's `nr_hugepages` (the
/// lock every process that changes the pool through this crate takes).
fn with_pool_locked<T>(page_size: usize, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let path = HugetlbPool::nr_path(page_size);
    let file = std::fs::File::open(&path).map_err(|e| Error::os("open nr_hugepages", e))?;
    // std's File::lock is flock(LOCK_EX) on Linux: released when the file is
    // closed, also when the process dies.
    file.lock()
        .map_err(|e| Error::os("flock nr_hugepages", e))?;
    // The lock goes with the file, after `f`.
    f()
}

/// The pool of `page_size` pages, or why there is none.
fn pool(page_size: usize) -> Result<HugetlbPool> {
    hugetlb_pool(page_size).ok_or(Error::Unsupported {
        kernel: "hugetlb",
        needs: "a kernel with hugetlb pages of this size",
    })
}

impl HugetlbReservation {
    /// Makes at least `pages` pages of `page_size` bytes free, growing the pool by
    /// the shortfall. Errors: no such page size, not permitted (not root), or the
    /// kernel could not find enough contiguous memory (then the pool is put back).
    pub fn ensure_free(page_size: usize, pages: usize) -> Result<HugetlbReservation> {
        let lock = LOCKS[usize::from(page_size == 1 << 30)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let before = pool(page_size)?;
        let mut r = HugetlbReservation {
            page_size,
            previous: before.total,
            added: 0,
            _lock: lock,
        };
        if before.free >= pages {
            return Ok(r);
        }
        let (want, now) = with_pool_locked(page_size, || {
            // Again under the lock: another process may have changed it.
            let before = pool(page_size)?;
            r.previous = before.total;
            let want = before.total + pages.saturating_sub(before.free);
            if want > before.total {
                sys::write_text(HugetlbPool::nr_path(page_size), &want.to_string())
                    .map_err(|e| Error::os("write nr_hugepages", e))?;
            }
            // The kernel may have found fewer: what it reads back is what it did.
            let after = pool(page_size)?;
            r.added = after.total.saturating_sub(before.total);
            Ok((want, after.free))
        })?;
        if now < pages {
            // Dropping `r` gives back what was added.
            return Err(Error::HugetlbShortage {
                page_size,
                needed: pages,
                free: now,
                reserve_cmd: format!("echo {want} > {} (the kernel found only {now} free pages; try soon after boot)", HugetlbPool::nr_path(page_size)),
            });
        }
        Ok(r)
    }

    /// The pool size before this reservation grew it.
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
        if self.added == 0 {
            return;
        }
        let (page_size, added) = (self.page_size, self.added);
        let _ = with_pool_locked(page_size, || {
            let total = pool(page_size)?.total;
            sys::write_text(
                HugetlbPool::nr_path(page_size),
                &total.saturating_sub(added).to_string(),
            )
            .map_err(|e| Error::os("write nr_hugepages", e))
        });
    }
}
