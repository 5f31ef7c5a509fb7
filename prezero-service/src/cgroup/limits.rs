//! What the kernel would let a cgroup allocate: for hugetlb pages of a size,
//! the room below `hugetlb.<size>.max` (v1: `limit_in_bytes`) and, where
//! hugetlb pages count as memory (cgroup2's `memory_hugetlb_accounting`),
//! below `memory.max`, at the cgroup and every ancestor, as the kernel checks
//! a charge. The room counts what the daemon lends the cgroup's tenants out
//! of its own pages, which the kernel does not see.

use std::os::fd::{AsFd, BorrowedFd};

use super::parse::{levels, relative};
use super::{Hierarchies, Opened, Root};
use prezero_sys as sys;

/// The tightest limit met: the room left at one level, and what sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Limit {
    /// Bytes that may still be charged there.
    pub(crate) room: u64,
    /// The cgroup (the tenant's or an ancestor) whose limit it is.
    pub(crate) at: Vec<u8>,
    /// The file that sets it ("hugetlb.2MB.max", "memory.max").
    pub(crate) file: String,
}

/// The kernel's name of a hugetlb size in its cgroup files: "2MB", "1GB".
pub(crate) fn size_name(page: usize) -> String {
    match page {
        p if p >= 1 << 30 => format!("{}GB", p >> 30),
        p if p >= 1 << 20 => format!("{}MB", p >> 20),
        p => format!("{}KB", p >> 10),
    }
}

/// A number from a cgroup file: `None` for "max" (no limit) or a file that is
/// not there (the controller is not enabled at that level).
fn read_num(dir: BorrowedFd<'_>, file: &str) -> Option<u64> {
    let f = sys::open_beneath(dir, file.as_bytes(), libc::O_RDONLY).ok()?;
    let text = std::io::read_to_string(std::fs::File::from(f)).ok()?;
    text.trim().parse().ok()
}

/// `memory.stat`'s `file` bytes: page cache the kernel reclaims before a
/// charge fails, so not in the way of one.
fn file_pages(dir: BorrowedFd<'_>) -> u64 {
    let Ok(f) = sys::open_beneath(dir, b"memory.stat", libc::O_RDONLY) else {
        return 0;
    };
    let text = std::io::read_to_string(std::fs::File::from(f)).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("file "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

impl Hierarchies {
    /// The tightest limit on charging `page`-byte hugetlb pages to the cgroup
    /// `cg`, each level's room less `lent(hierarchy, level)` (what the daemon
    /// lends the tenants at or below that level of that hierarchy: `None` the
    /// unified one, else a v1 one's controllers); `None` where no level
    /// limits them.
    pub(crate) fn limit(
        &self,
        cg: &Opened,
        page: usize,
        lent: impl Fn(Option<&str>, &[u8]) -> u64,
    ) -> Option<Limit> {
        let size = size_name(page);
        let mut tight: Option<Limit> = None;
        let mut consider = |l: Limit| {
            if tight.as_ref().is_none_or(|t| l.room < t.room) {
                tight = Some(l);
            }
        };
        let roots = self.v2.iter().chain(self.v1.iter().filter(|r| {
            r.v1.as_deref()
                .is_some_and(|c| c.split(',').any(|c| c == "hugetlb"))
        }));
        for root in roots {
            let hier = root.v1.as_deref();
            let Some(path) = cg.path_in(hier) else {
                continue;
            };
            for level in levels(path) {
                let Ok(dir) = sys::open_beneath(
                    root.dir.as_fd(),
                    relative(level),
                    libc::O_RDONLY | libc::O_DIRECTORY,
                ) else {
                    continue;
                };
                for l in level_limits(root, dir.as_fd(), &size) {
                    consider(Limit {
                        room: l.0.saturating_sub(lent(hier, level)),
                        at: level.to_vec(),
                        file: l.1,
                    });
                }
            }
        }
        tight
    }
}

/// One level's limits on hugetlb pages of `size`: (room, file) each.
fn level_limits(root: &Root, dir: BorrowedFd<'_>, size: &str) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let (max, cur) = match root.v1 {
        None => (
            format!("hugetlb.{size}.max"),
            format!("hugetlb.{size}.current"),
        ),
        Some(_) => (
            format!("hugetlb.{size}.limit_in_bytes"),
            format!("hugetlb.{size}.usage_in_bytes"),
        ),
    };
    if let Some(m) = read_num(dir, &max) {
        let used = read_num(dir, &cur).unwrap_or(0);
        out.push((m.saturating_sub(used), max));
    }
    if root.v1.is_none() && root.hugetlb_in_memory {
        if let Some(m) = read_num(dir, "memory.max") {
            let mut used = read_num(dir, "memory.current").unwrap_or(0);
            if used > m / 2 {
                used = used.saturating_sub(file_pages(dir));
            }
            out.push((m.saturating_sub(used), "memory.max".into()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_named_as_the_kernel_names_them() {
        assert_eq!(size_name(2 << 20), "2MB");
        assert_eq!(size_name(1 << 30), "1GB");
        assert_eq!(size_name(64 << 10), "64KB");
    }
}
