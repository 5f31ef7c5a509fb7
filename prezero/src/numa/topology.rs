//! The machine's NUMA nodes as sysfs shows them now: their CPUs, memory,
//! free hugetlb pages per page size, and the distance table.

use std::path::Path;

use crate::error::{Error, Result};
use crate::sys;

const NODES: &str = "/sys/devices/system/node";

/// One online NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The kernel's node id.
    pub id: u32,
    /// Its online CPUs, ascending (none for a memory-only node, such as CXL memory).
    pub cpus: Vec<usize>,
    /// Whether the node has memory the kernel can allocate (`has_memory`).
    pub has_memory: bool,
    /// `MemTotal` of the node, in bytes.
    pub mem_total: u64,
    /// `MemFree` of the node, in bytes.
    pub mem_free: u64,
    /// The node's hugetlb pools, smallest page first.
    pub hugetlb: Vec<NodeHugetlb>,
    /// Distances to every node of [`Topology::nodes`], in that order (10 is local).
    pub distances: Vec<u32>,
}

/// A node's hugetlb pages of one size (`total` reserved on the node, `free`
/// of those not in use).
pub type NodeHugetlb = crate::mm::HugetlbPool;

/// The online nodes, ascending by id. On a kernel without NUMA (no
/// `/sys/devices/system/node`), one node 0 with every CPU and all memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Online nodes, ascending by id.
    pub nodes: Vec<Node>,
    /// Ids the kernel could bring online (`possible`): an id in here but not in
    /// `nodes` is offline, any other does not exist.
    pub possible: Vec<u32>,
    /// The nodes this process may take memory from (`Mems_allowed` of its
    /// cpuset); `None` where the kernel does not say (then all).
    pub allowed: Option<Vec<u32>>,
}

impl Topology {
    /// Reads the topology now (free memory changes; the rest rarely does).
    pub fn read() -> Topology {
        read_from(Path::new(NODES)).unwrap_or_else(single_node)
    }

    /// The node with id `id`, if online.
    pub fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The node a request may name: online, with memory, and in this
    /// process's cpuset. A clear error otherwise: no such node, offline, one
    /// without memory (CPU-only), or one the cpuset leaves out.
    pub fn memory_node(&self, id: u32) -> Result<&Node> {
        let online: Vec<u32> = self.nodes.iter().map(|n| n.id).collect();
        match self.node(id) {
            Some(n) if n.has_memory && !self.is_allowed(id) => Err(Error::invalid(format!(
                "NUMA node {id} is outside this process's cpuset (nodes it may use: {})",
                list(self.memory_nodes().into_iter())
            ))),
            Some(n) if n.has_memory => Ok(n),
            Some(_) => Err(Error::invalid(format!(
                "NUMA node {id} has no memory (nodes with memory: {})",
                list(self.nodes.iter().filter(|n| n.has_memory).map(|n| n.id))
            ))),
            None if self.possible.contains(&id) => Err(Error::invalid(format!(
                "NUMA node {id} is offline (online: {})",
                list(online.iter().copied())
            ))),
            None => Err(Error::invalid(format!(
                "NUMA node {id} does not exist (online: {})",
                list(online.iter().copied())
            ))),
        }
    }

    /// The node whose CPUs include `cpu`.
    pub fn node_of_cpu(&self, cpu: usize) -> Option<u32> {
        self.nodes
            .iter()
            .find(|n| n.cpus.contains(&cpu))
            .map(|n| n.id)
    }

    /// The distance from node `from` to node `to` (10 is local), as the kernel
    /// reports it.
    pub fn distance(&self, from: u32, to: u32) -> Option<u32> {
        let at = self.nodes.iter().position(|n| n.id == to)?;
        self.node(from)?.distances.get(at).copied()
    }

    /// Ids of the nodes with memory this process may use (its cpuset's),
    /// ascending.
    pub fn memory_nodes(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter(|n| n.has_memory && self.is_allowed(n.id))
            .map(|n| n.id)
            .collect()
    }

    fn is_allowed(&self, id: u32) -> bool {
        self.allowed.as_ref().is_none_or(|a| a.contains(&id))
    }

    /// Where memory of a thread on node `id` goes under local allocation:
    /// `id` if it has memory this process may use, else the nearest node that
    /// has (the kernel's fallback for a CPU-only node); ties by id.
    pub fn nearest_memory_node(&self, id: u32) -> Option<u32> {
        let mem = self.memory_nodes();
        if mem.contains(&id) {
            return Some(id);
        }
        mem.into_iter()
            .min_by_key(|&to| (self.distance(id, to).unwrap_or(u32::MAX), to))
    }

    /// `cpus` of node `id` this thread may run on (its affinity, a cpuset):
    /// the CPUs to fill the node's memory from; empty where there are none.
    pub fn usable_cpus(&self, id: u32) -> Vec<usize> {
        let mine = sys::thread_affinity().unwrap_or_default();
        self.node(id).map_or(Vec::new(), |n| {
            n.cpus
                .iter()
                .copied()
                .filter(|c| mine.contains(c))
                .collect()
        })
    }
}

/// Ids as a comma-separated list, for messages.
fn list(ids: impl Iterator<Item = u32>) -> String {
    let v: Vec<String> = ids.map(|i| i.to_string()).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(",")
    }
}

/// Parses a kernel list (`0-3,8,10-11`) into ascending ids, as
/// `prezero_sys::raw::each_in_list` walks it.
pub(crate) fn parse_list(text: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    sys::raw::each_in_list(text.as_bytes(), |id| out.push(id as usize))?;
    out.sort_unstable();
    out.dedup();
    Some(out)
}

fn ids(dir: &Path, file: &str) -> Option<Vec<u32>> {
    let v = parse_list(&sys::read_text(dir.join(file))?)?;
    v.into_iter().map(|i| u32::try_from(i).ok()).collect()
}

/// The topology under `dir` (a copy of `/sys/devices/system/node` in tests).
pub(crate) fn read_from(dir: &Path) -> Option<Topology> {
    let online = ids(dir, "online")?;
    let possible = ids(dir, "possible").unwrap_or_else(|| online.clone());
    // Before 2.6.23 there is no has_memory: every online node then counts.
    let with_memory = ids(dir, "has_memory").unwrap_or_else(|| online.clone());
    let nodes = online
        .iter()
        .map(|&id| {
            let d = dir.join(format!("node{id}"));
            let (mem_total, mem_free) = meminfo(&d);
            Node {
                id,
                cpus: sys::read_text(d.join("cpulist"))
                    .and_then(|t| parse_list(&t))
                    .unwrap_or_default(),
                has_memory: with_memory.contains(&id),
                mem_total,
                mem_free,
                hugetlb: node_hugetlb(&d),
                distances: sys::read_text(d.join("distance"))
                    .map(|t| {
                        t.split_whitespace()
                            .filter_map(|w| w.parse().ok())
                            .collect()
                    })
                    .unwrap_or_default(),
            }
        })
        .collect();
    Some(Topology {
        nodes,
        possible,
        allowed: allowed_nodes(),
    })
}

/// `Mems_allowed_list` of `/proc/self/status`: the nodes the cpuset allows.
fn allowed_nodes() -> Option<Vec<u32>> {
    let status = sys::read_text("/proc/self/status")?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Mems_allowed_list:"))?;
    let v = parse_list(line.trim())?;
    v.into_iter().map(|i| u32::try_from(i).ok()).collect()
}

/// `MemTotal` and `MemFree` of a node's `meminfo` ("Node 0 MemTotal: 123 kB").
fn meminfo(node_dir: &Path) -> (u64, u64) {
    let text = sys::read_text(node_dir.join("meminfo")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| {
                let mut w = l.split_whitespace().skip(2);
                (w.next()? == name).then(|| w.next()?.parse::<u64>().ok())?
            })
            .map_or(0, |kib| kib << 10)
    };
    (field("MemTotal:"), field("MemFree:"))
}

fn node_hugetlb(node_dir: &Path) -> Vec<NodeHugetlb> {
    crate::mm::pools_in(&node_dir.join("hugepages"))
}

/// A kernel without NUMA sysfs: one node holding everything.
fn single_node() -> Topology {
    let memory = crate::mm::memory();
    let mem_total = sys::raw::meminfo(b"MemTotal:").unwrap_or(0) as u64;
    Topology {
        nodes: vec![Node {
            id: 0,
            cpus: sys::thread_affinity().unwrap_or_default(),
            has_memory: true,
            mem_total,
            mem_free: memory.available as u64,
            // The machine's pools are this one node's.
            hugetlb: memory.hugetlb,
            distances: vec![10],
        }],
        possible: vec![0],
        allowed: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_lists_parse_and_garbage_does_not() {
        assert_eq!(
            parse_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_list("1"), Some(vec![1]));
        assert_eq!(parse_list(""), Some(vec![]));
        assert_eq!(parse_list("3-1"), None);
        assert_eq!(parse_list("a"), None);
        assert_eq!(parse_list("0-99999999"), None);
    }

    /// A fake sysfs tree of two nodes, one without CPUs, and one possible offline.
    #[test]
    fn a_two_node_tree_reads_with_its_distances_and_bad_ids_say_why() {
        let dir = prezero_testkit::TempDir::new("topo");
        let w = |p: &str, t: &str| {
            let p = dir.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, t).unwrap();
        };
        w("online", "0-1\n");
        w("possible", "0-2\n");
        w("has_memory", "0-1\n");
        w("node0/cpulist", "0-1\n");
        w("node0/distance", "10 21\n");
        w(
            "node0/meminfo",
            "Node 0 MemTotal:        1048576 kB\nNode 0 MemFree:          524288 kB\n",
        );
        w("node0/hugepages/hugepages-2048kB/nr_hugepages", "64\n");
        w("node0/hugepages/hugepages-2048kB/surplus_hugepages", "2\n");
        w("node0/hugepages/hugepages-2048kB/free_hugepages", "60\n");
        w("node1/cpulist", "\n");
        w("node1/distance", "21 10\n");
        w(
            "node1/meminfo",
            "Node 1 MemTotal: 2048 kB\nNode 1 MemFree: 1024 kB\n",
        );
        let mut t = read_from(&dir).unwrap();
        t.allowed = None;
        assert_eq!(t.nodes.len(), 2);
        assert_eq!(t.nodes[0].cpus, vec![0, 1]);
        assert_eq!(t.nodes[0].mem_total, 1 << 30);
        assert_eq!(t.nodes[0].mem_free, 512 << 20);
        assert_eq!(
            t.nodes[0].hugetlb,
            vec![NodeHugetlb {
                page_size: 2 << 20,
                total: 64,
                free: 60,
                reserved: None,
                surplus: 2,
            }]
        );
        assert!(t.nodes[1].cpus.is_empty());
        assert_eq!(t.distance(0, 1), Some(21));
        assert_eq!(t.distance(1, 1), Some(10));
        assert_eq!(t.node_of_cpu(1), Some(0));
        assert_eq!(t.memory_nodes(), vec![0, 1]);
        assert!(t.memory_node(1).is_ok());
        let offline = t.memory_node(2).unwrap_err().to_string();
        assert!(offline.contains("offline"), "{offline}");
        let missing = t.memory_node(7).unwrap_err().to_string();
        assert!(missing.contains("does not exist"), "{missing}");
        // Node 1 has no CPUs here; a CPU-less view: node 0's nearest is itself,
        // and an id without memory falls to the nearest that has.
        assert_eq!(t.nearest_memory_node(0), Some(0));
        t.nodes[1].has_memory = false;
        assert_eq!(t.nearest_memory_node(1), Some(0));
        // A cpuset that leaves node 0 out.
        t.nodes[1].has_memory = true;
        t.allowed = Some(vec![1]);
        assert_eq!(t.memory_nodes(), vec![1]);
        let outside = t.memory_node(0).unwrap_err().to_string();
        assert!(outside.contains("cpuset"), "{outside}");
        assert_eq!(t.nearest_memory_node(0), Some(1));
    }

    #[test]
    fn this_machine_has_a_node_with_memory_and_every_cpu_we_may_use() {
        let t = Topology::read();
        assert!(!t.memory_nodes().is_empty());
        for cpu in sys::thread_affinity().unwrap() {
            assert!(t.node_of_cpu(cpu).is_some(), "cpu {cpu} in no node");
        }
    }
}
