//! Temporary hugetlb reservations: raise the pool for a run, put it back after.

use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::mm::{hugetlb_pool, HugetlbPool};
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
    /// Pages added, per pool: the machine's (`None`) or one node's.
    added: Vec<(Option<u32>, usize)>,
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

/// Where the size of `node`'s pool of `page_size` pages is written: its own
/// file, or on a kernel without NUMA sysfs (one node) the machine's.
pub fn nr_path(node: u32, page_size: usize) -> String {
    let own = format!(
        "{}/nr_hugepages",
        crate::mm::pool_dir(Some(node), page_size)
    );
    if std::path::Path::new(&own).exists() || node != 0 || std::path::Path::new(NODES).exists() {
        own
    } else {
        HugetlbPool::nr_path(page_size)
    }
}

const NODES: &str = "/sys/devices/system/node";

/// The pool of one node (`Some`) or the machine's (`None`): where it is
/// written, and its pages now. On a kernel without NUMA sysfs node 0's pool
/// is the machine's.
fn pool_of(node: Option<u32>, page_size: usize) -> Result<(String, HugetlbPool)> {
    let node = node.filter(|&n| n != 0 || std::path::Path::new(NODES).exists());
    let Some(node) = node else {
        return Ok((HugetlbPool::nr_path(page_size), pool(page_size)?));
    };
    let dir = crate::mm::pool_dir(Some(node), page_size);
    match crate::mm::pool_at(std::path::Path::new(&dir), page_size) {
        Some(pool) => Ok((format!("{dir}/nr_hugepages"), pool)),
        None => Err(Error::invalid(format!(
            "no hugetlb pool of {} KiB pages on NUMA node {node} ({dir})",
            page_size / 1024
        ))),
    }
}

impl HugetlbReservation {
    /// Makes at least `pages` pages of `page_size` bytes free, growing the pool by
    /// the shortfall. Errors: no such page size, not permitted (not root), or the
    /// kernel could not find enough contiguous memory (then the pool is put back).
    pub fn ensure_free(page_size: usize, pages: usize) -> Result<HugetlbReservation> {
        Self::ensure(page_size, &[(None, pages)])
    }

    /// [`ensure_free`](Self::ensure_free) on NUMA nodes: at least `pages`
    /// pages free on each `(node, pages)`, growing each node's own pool
    /// (the machine's pool spreads new pages over every node). One
    /// reservation for all of them, since one per page size is held at a time.
    pub fn ensure_free_on_nodes(
        page_size: usize,
        nodes: &[(u32, usize)],
    ) -> Result<HugetlbReservation> {
        let wants: Vec<(Option<u32>, usize)> = nodes.iter().map(|&(n, p)| (Some(n), p)).collect();
        Self::ensure(page_size, &wants)
    }

    fn ensure(page_size: usize, wants: &[(Option<u32>, usize)]) -> Result<HugetlbReservation> {
        let lock = LOCKS[usize::from(page_size == 1 << 30)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut r = HugetlbReservation {
            page_size,
            previous: pool(page_size)?.total,
            added: Vec::new(),
            _lock: lock,
        };
        for &(node, pages) in wants {
            let (path, before) = pool_of(node, page_size)?;
            if before.free >= pages {
                continue;
            }
            // Every process that changes any of this size's pools through this
            // crate takes the machine pool's lock: a node's pool is part of it.
            let (want, now) = with_pool_locked(page_size, || {
                // Again under the lock: another process may have changed it.
                let (_, before) = pool_of(node, page_size)?;
                if node.is_none() {
                    r.previous = before.total;
                }
                let want = before.total + pages.saturating_sub(before.free);
                if want > before.total {
                    sys::write_text(&path, &want.to_string())
                        .map_err(|e| Error::os("write nr_hugepages", e))?;
                }
                // The kernel may have found fewer: what it reads back is what it did.
                let (_, after) = pool_of(node, page_size)?;
                r.added
                    .push((node, after.total.saturating_sub(before.total)));
                Ok((want, after.free))
            })?;
            if now < pages {
                // Dropping `r` gives back what was added.
                let on = node.map_or(String::new(), |n| format!(" on NUMA node {n}"));
                return Err(Error::HugetlbShortage {
                    page_size,
                    needed: pages,
                    free: now,
                    reserve_cmd: format!("echo {want} > {path} (the kernel found only {now} free pages{on}; try soon after boot)"),
                });
            }
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
        let page_size = self.page_size;
        for &(node, added) in self.added.iter().filter(|&&(_, a)| a > 0) {
            let _ = with_pool_locked(page_size, || {
                let (path, now) = pool_of(node, page_size)?;
                sys::write_text(&path, &now.total.saturating_sub(added).to_string())
                    .map_err(|e| Error::os("write nr_hugepages", e))
            });
        }
    }
}
