//! Placing a range on a node before its pages exist (`mbind`), and checking
//! where its pages are (`move_pages` with no target: a question, not a move).

use crate::error::{Error, Result};
use crate::sys;

/// A part of a range and the node it was put on (what
/// [`prefault_on_nodes`](crate::prefault_on_nodes) and
/// [`clear_parallel_on_nodes`](crate::clear_parallel_on_nodes) made).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodePart {
    /// Bytes from the start of the range.
    pub offset: usize,
    /// Bytes in the part.
    pub len: usize,
    /// The node it belongs on.
    pub node: u32,
}

/// Where the pages of a range are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// Pages present, per node: `(node, pages)`, ascending by node.
    pub on: Vec<(u32, usize)>,
    /// Pages not present (never touched, or given back).
    pub absent: usize,
    /// Pages mapped whose node the kernel would not say: the shared zero
    /// page (read, never written: no page of its own yet), and before 6.x a
    /// page NUMA balancing has marked for a hinting fault (`move_pages`
    /// answers for both as for a hole).
    pub hidden: usize,
}

impl Placement {
    /// Pages present on `node`.
    pub fn pages_on(&self, node: u32) -> usize {
        self.on
            .iter()
            .find(|&&(n, _)| n == node)
            .map_or(0, |&(_, p)| p)
    }

    /// Pages present anywhere.
    pub fn present(&self) -> usize {
        self.on.iter().map(|&(_, p)| p).sum()
    }

    /// Every page present, known, and on `node`.
    pub fn all_on(&self, node: u32) -> bool {
        self.absent == 0 && self.hidden == 0 && self.pages_on(node) == self.present()
    }
}

/// Where the pages of `[ptr, ptr+len)` are, one lookup per `page_size` bytes
/// (the mapping's page size: a hugetlb or THP page answers for all of it).
/// Errors: `page_size` not a power of two, or part of the range not mapped.
pub fn placement(ptr: *const u8, len: usize, page_size: usize) -> Result<Placement> {
    if !page_size.is_power_of_two() {
        return Err(Error::invalid(
            "placement: page size must be a power of two",
        ));
    }
    let start = ptr as usize & !(page_size - 1);
    let end = (ptr as usize)
        .checked_add(len)
        .ok_or_else(|| Error::invalid("placement: range wraps"))?;
    // Before 6.x `move_pages` answers EFAULT both for a page never touched
    // and for no mapping at all: the mapping is checked first, so an EFAULT
    // below is a hole.
    sys::check_mapped(start, end - start).map_err(|e| Error::os("mincore (placement)", e))?;
    let pages: Vec<*const u8> = (start..end)
        .step_by(page_size)
        .map(|a| a as *const u8)
        .collect();
    let status = match sys::page_nodes(&pages) {
        Ok(s) => s,
        // A kernel without NUMA: every page there is is on node 0.
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => pages
            .iter()
            .map(|&p| {
                let present = sys::resident_pages(p as *mut u8, 1).is_ok_and(|n| n == 1);
                if present {
                    0
                } else {
                    -libc::ENOENT
                }
            })
            .collect(),
        Err(e) => return Err(Error::os("move_pages", e)),
    };
    let mut p = Placement::default();
    for (s, &page) in status.into_iter().zip(&pages) {
        match s {
            n if n >= 0 => match p.on.iter_mut().find(|(node, _)| *node == n as u32) {
                Some((_, count)) => *count += 1,
                None => p.on.push((n as u32, 1)),
            },
            // No node: a hole, unless the page is there (mincore), which
            // only a NUMA hinting mark hides from move_pages.
            e if e == -libc::ENOENT || e == -libc::EFAULT => {
                if sys::resident_pages(page as *mut u8, 1).is_ok_and(|n| n == 1) {
                    p.hidden += 1;
                } else {
                    p.absent += 1;
                }
            }
            e => {
                return Err(Error::os(
                    "move_pages (page status)",
                    std::io::Error::from_raw_os_error(e.saturating_neg()),
                ))
            }
        }
    }
    p.on.sort_unstable();
    Ok(p)
}

/// Makes `[ptr, ptr+len)` take its pages from `node` from now on: preferred
/// (other nodes when `node` is short, as local allocation falls back), or
/// with `strict`, bound (`MPOL_BIND`: never another node, a shortage is an
/// allocation failure). Pages present already stay where they are. The range
/// must be page-aligned and mapped. On a kernel without NUMA, nothing.
pub fn bind(ptr: *mut u8, len: usize, node: u32, strict: bool) -> Result<()> {
    let mode = if strict {
        libc::MPOL_BIND
    } else {
        libc::MPOL_PREFERRED
    };
    match sys::mbind(ptr, len, mode, &[node], false) {
        // A kernel without NUMA has one node: nothing to bind.
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => Ok(()),
        r => r.map_err(|e| Error::os("mbind", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numa::{caller_node, Topology};
    use crate::region::{PageKind, Region};

    #[test]
    fn pages_touched_are_on_a_node_and_untouched_ones_absent() {
        let mut r = Region::new(16 * 4096, PageKind::Base).unwrap();
        let p = placement(r.as_ptr(), r.len(), 4096).unwrap();
        assert_eq!(p.absent, 16);
        assert_eq!(p.present(), 0);
        for i in 0..8 {
            r.as_mut_slice()[i * 4096] = 1;
        }
        let p = placement(r.as_ptr(), r.len(), 4096).unwrap();
        assert_eq!((p.present(), p.absent), (8, 8));
        assert!(Topology::read().node(p.on[0].0).is_some());
        assert!(placement(r.as_ptr(), r.len(), 3000).is_err());
        assert!(placement(0x1000 as *const u8, 4096, 4096).is_err());
    }

    #[test]
    fn a_range_bound_to_a_node_faults_its_pages_there() {
        // The node this thread's fresh pages come from: on a node of CPUs
        // only, the nearest with memory (binding to the CPU-only node is
        // EINVAL: a thread scheduled there in the 3-node guest failed so).
        let node = caller_node().unwrap();
        for strict in [false, true] {
            let mut r = Region::new(32 * 4096, PageKind::Base).unwrap();
            bind(r.as_ptr(), r.len(), node, strict).unwrap();
            r.as_mut_slice().fill(1);
            let p = placement(r.as_ptr(), r.len(), 4096).unwrap();
            assert!(p.all_on(node), "{p:?}");
        }
        let r = Region::new(4096, PageKind::Base).unwrap();
        assert!(bind(r.as_ptr(), r.len(), 5000, false).is_err());
    }
}
