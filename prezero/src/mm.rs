//! The kernel's memory management as it stands now: its THP mode, its
//! hugetlb pools, its NUMA nodes, MemAvailable. Read afresh on every call,
//! since another process may change any of it at any time.

use std::path::Path;

use crate::sys;

/// Transparent huge page settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thp {
    /// "always", "madvise" or "never" (or "unavailable").
    pub mode: String,
    /// PMD (huge page) size in bytes, 0 if unknown.
    pub pmd_size: usize,
}

/// One hugetlb page size and its pool counts at the time of reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HugetlbPool {
    /// Page size in bytes.
    pub page_size: usize,
    /// Pages in the pool (`nr_hugepages`, /proc/meminfo's `HugePages_Total`).
    pub total: usize,
    /// Pages not yet handed out (`free_hugepages`, `HugePages_Free`).
    pub free: usize,
    /// Of the free pages, those promised to mappings that have not faulted
    /// them in yet (`resv_hugepages`, `HugePages_Rsvd`): the kernel's
    /// "reserved". Only the machine's pool says (`None` from a node's sysfs
    /// folder, which has no such file).
    pub reserved: Option<usize>,
    /// Pages beyond `total` the kernel made under overcommit
    /// (`surplus_hugepages`, `HugePages_Surp`).
    pub surplus: usize,
}

impl HugetlbPool {
    /// The sysfs file whose value is the machine's pool's size.
    pub fn nr_path(page_size: usize) -> String {
        format!("{}/nr_hugepages", pool_dir(None, page_size))
    }
}

/// Memory-management state of the kernel, read now.
#[derive(Debug, Clone)]
pub struct Memory {
    /// THP mode and size.
    pub thp: Thp,
    /// Every hugetlb size the kernel supports, smallest first.
    pub hugetlb: Vec<HugetlbPool>,
    /// NUMA nodes online (1 on a machine without NUMA).
    pub numa_nodes: usize,
    /// `uname -r`.
    pub kernel_release: String,
    /// `MemAvailable` in bytes: what can be allocated without swapping.
    pub available: usize,
}

/// The kernel's memory-management state at this moment.
pub fn memory() -> Memory {
    let thp_mode = sys::raw::thp_mode()
        .map_or("unavailable", sys::raw::ThpMode::name)
        .to_owned();
    let pmd_size =
        sys::read_usize("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size").unwrap_or(0);
    Memory {
        thp: Thp {
            mode: thp_mode,
            pmd_size,
        },
        hugetlb: pools_in(Path::new("/sys/kernel/mm/hugepages")),
        numa_nodes: numa_nodes(),
        kernel_release: sys::read_text("/proc/sys/kernel/osrelease").unwrap_or_default(),
        available: sys::mem_available(),
    }
}

/// The hugetlb pool of one page size, read now.
pub fn hugetlb_pool(page_size: usize) -> Option<HugetlbPool> {
    pool_at(Path::new(&pool_dir(None, page_size)), page_size)
}

/// The sysfs folder of `node`'s pool of `page_size` pages, or (`None`) the
/// machine's.
pub(crate) fn pool_dir(node: Option<u32>, page_size: usize) -> String {
    match node {
        Some(n) => format!(
            "/sys/devices/system/node/node{n}/hugepages/hugepages-{}kB",
            page_size / 1024
        ),
        None => format!("/sys/kernel/mm/hugepages/hugepages-{}kB", page_size / 1024),
    }
}

/// The pool whose sysfs folder is `dir`.
pub(crate) fn pool_at(dir: &Path, page_size: usize) -> Option<HugetlbPool> {
    Some(HugetlbPool {
        page_size,
        total: sys::read_usize(dir.join("nr_hugepages"))?,
        free: sys::read_usize(dir.join("free_hugepages"))?,
        reserved: sys::read_usize(dir.join("resv_hugepages")),
        // Absent from kernels without overcommit of this size: none.
        surplus: sys::read_usize(dir.join("surplus_hugepages")).unwrap_or(0),
    })
}

/// Every pool under `dir` (a `hugepages` folder: the machine's, or a
/// node's), smallest page first.
pub(crate) fn pools_in(dir: &Path) -> Vec<HugetlbPool> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut pools: Vec<HugetlbPool> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let kb: usize = name
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            pool_at(&e.path(), kb * 1024)
        })
        .collect();
    pools.sort_by_key(|p| p.page_size);
    pools
}

fn numa_nodes() -> usize {
    std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.strip_prefix("node")
                        .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
                })
                .count()
        })
        .unwrap_or(0)
        .max(1)
}
