//! Where the calling thread's new memory goes: its memory policy (`numactl
//! --membind/--preferred/--interleave`, `set_mempolicy`) and the CPUs it may
//! run on; and putting a thread on a node's CPUs, so that what it touches
//! first lands there.

use crate::error::{Error, Result};
use crate::sys;

use super::Topology;

/// A thread's memory policy, as the kernel applies it to its new pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemPolicy {
    /// Local allocation: the node of the CPU that touches a page first (the
    /// default, `MPOL_DEFAULT` and `MPOL_LOCAL`).
    Local,
    /// Only these nodes (`numactl --membind`).
    Bind(Vec<u32>),
    /// These nodes first, any other when they are short (`--preferred`,
    /// `--preferred-many`).
    Preferred(Vec<u32>),
    /// Spread page by page over these nodes (`--interleave`, and weighted
    /// interleave).
    Interleave(Vec<u32>),
}

impl MemPolicy {
    /// The calling thread's policy. A kernel without NUMA support answers
    /// `ENOSYS`: that is local allocation on its one node.
    pub fn of_thread() -> MemPolicy {
        let Ok((mode, mask)) = sys::thread_mempolicy() else {
            return MemPolicy::Local;
        };
        let mut nodes = sys::nodes_of(&mask);
        if mode & sys::MPOL_F_RELATIVE_NODES != 0 {
            // The mask is relative to the cpuset's nodes: bit i is the i-th
            // allowed node (cyclically), as the kernel folds it.
            let allowed = layout().memory_nodes();
            if allowed.is_empty() {
                return MemPolicy::Local;
            }
            nodes = nodes
                .iter()
                .map(|&i| allowed[i as usize % allowed.len()])
                .collect();
            nodes.sort_unstable();
            nodes.dedup();
        }
        match mode & sys::MPOL_MODE_MASK {
            libc::MPOL_BIND => MemPolicy::Bind(nodes),
            // An empty preferred mask is the old spelling of local allocation.
            libc::MPOL_PREFERRED | sys::MPOL_PREFERRED_MANY if !nodes.is_empty() => {
                MemPolicy::Preferred(nodes)
            }
            libc::MPOL_INTERLEAVE | sys::MPOL_WEIGHTED_INTERLEAVE => MemPolicy::Interleave(nodes),
            _ => MemPolicy::Local,
        }
    }

    /// The one node this policy puts every page on, if there is one: a bind or
    /// preferred policy of a single node.
    pub fn single_node(&self) -> Option<u32> {
        match self {
            MemPolicy::Bind(n) | MemPolicy::Preferred(n) if n.len() == 1 => Some(n[0]),
            _ => None,
        }
    }
}

/// The node the calling thread's memory belongs on, when one node is clear: a
/// bind or preferred policy of one node; else, under local allocation, the
/// node holding every CPU the thread may run on (`numactl --cpunodebind`,
/// `taskset`). `None`: any node would do (the thread may run anywhere, or its
/// policy spreads pages).
pub fn home_node() -> Option<u32> {
    let policy = MemPolicy::of_thread();
    if let Some(n) = policy.single_node() {
        return Some(n);
    }
    if policy != MemPolicy::Local {
        return None;
    }
    let topology = layout();
    let cpus = sys::thread_affinity().ok()?;
    let mut nodes = cpus.iter().map(|&c| topology.node_of_cpu(c));
    let first = nodes.next()??;
    // A node of CPUs only: its memory comes from the nearest node that has.
    nodes
        .all(|n| n == Some(first))
        .then(|| topology.nearest_memory_node(first))?
}

/// The node the calling thread's next fresh page would come from: its
/// policy's one node, or under local allocation the node of the CPU it runs
/// on now; `None` where its policy spreads pages.
pub fn caller_node() -> Option<u32> {
    match MemPolicy::of_thread() {
        // A node of CPUs only: its memory comes from the nearest that has.
        MemPolicy::Local => layout().nearest_memory_node(current_node()?),
        p => p.single_node(),
    }
}

/// Whether this process may place memory on more than one node: read once
/// (node hot-plug aside, it does not change), so asking costs a load.
pub fn is_multi_node() -> bool {
    layout().memory_nodes().len() > 1
}

/// The topology as it was first read: for its shape (which nodes, their
/// CPUs, the distances), which the calls made on every allocation ask, not
/// for its free memory. Reading sysfs costs ~0.3 ms.
fn layout() -> &'static Topology {
    static LAYOUT: std::sync::OnceLock<Topology> = std::sync::OnceLock::new();
    LAYOUT.get_or_init(Topology::read)
}

/// The node of the CPU the calling thread runs on now (it may move after):
/// no system call, where the C library answers `sched_getcpu` without one.
pub fn current_node() -> Option<u32> {
    static NODE_OF_CPU: std::sync::OnceLock<Vec<Option<u32>>> = std::sync::OnceLock::new();
    let map = NODE_OF_CPU.get_or_init(|| {
        let t = layout();
        let most = t
            .nodes
            .iter()
            .flat_map(|n| n.cpus.iter())
            .max()
            .map_or(0, |&c| c + 1);
        (0..most).map(|cpu| t.node_of_cpu(cpu)).collect()
    });
    match sys::current_cpu().and_then(|cpu| map.get(cpu).copied().flatten()) {
        Some(node) => Some(node),
        // A CPU brought online since: ask the kernel.
        None => sys::getcpu().ok().map(|(_, node)| node),
    }
}

/// Lets the calling thread run only on `node`'s CPUs, so that memory it
/// touches first under local allocation lands on `node`, and is cleared by a
/// CPU near it. An error for a node that does not exist or has no CPUs (a
/// memory-only node: bind the memory instead, [`super::bind`]).
pub fn run_on_node(topology: &Topology, node: u32) -> Result<()> {
    let n = topology
        .node(node)
        .ok_or_else(|| Error::invalid(format!("NUMA node {node} is not online")))?;
    if n.cpus.is_empty() {
        return Err(Error::invalid(format!("NUMA node {node} has no CPUs")));
    }
    sys::set_thread_affinity(&n.cpus).map_err(|e| Error::os("sched_setaffinity", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_thread_has_the_default_policy_and_its_cpu_is_on_a_node() {
        // Under `numactl` the test process would have another: only check
        // what is true either way.
        let p = MemPolicy::of_thread();
        if p == MemPolicy::Local {
            assert_eq!(p.single_node(), None);
        }
        let t = Topology::read();
        let now = current_node().expect("getcpu");
        assert!(t.node(now).is_some(), "node {now} not in {t:?}");
    }

    /// Its home is that node, or for a node of CPUs only the nearest node
    /// with memory.
    #[test]
    fn a_thread_run_on_a_node_runs_there_and_its_home_is_that_node() {
        let t = Topology::read();
        for node in t.nodes.iter().filter(|n| !n.cpus.is_empty()) {
            let id = node.id;
            let t = t.clone();
            std::thread::spawn(move || {
                run_on_node(&t, id).unwrap();
                assert_eq!(current_node(), Some(id));
                if MemPolicy::of_thread() == MemPolicy::Local {
                    let home = t.nearest_memory_node(id);
                    assert_eq!(home_node(), home);
                    assert_eq!(caller_node(), home);
                }
            })
            .join()
            .unwrap();
        }
        assert!(run_on_node(&t, 100_000).is_err());
    }

    #[test]
    fn single_node_is_only_for_one_bound_or_preferred_node() {
        assert_eq!(MemPolicy::Bind(vec![1]).single_node(), Some(1));
        assert_eq!(MemPolicy::Preferred(vec![2]).single_node(), Some(2));
        assert_eq!(MemPolicy::Bind(vec![0, 1]).single_node(), None);
        assert_eq!(MemPolicy::Interleave(vec![1]).single_node(), None);
        assert_eq!(MemPolicy::Local.single_node(), None);
    }
}
