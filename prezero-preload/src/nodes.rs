//! The NUMA nodes the cache keeps memory apart for, read once at start
//! without allocating, and which of its lanes a request belongs to.
//!
//! On a machine of one node there is one lane and nothing here runs past a
//! comparison. On one of several, each node with memory has a lane of its
//! own (its part of the range is bound there, so fresh pages come from it),
//! and one more lane takes the requests of threads whose policy spreads
//! pages (interleave, several nodes) or runs on a node without memory: its
//! part is not bound, so its pages are placed by the faulting thread's own
//! policy, as the kernel would place them.

use std::ffi::CStr;
use std::io::Write;

use crate::sys::{self, each_in_list, Policy};

/// Most nodes with lanes of their own; a machine with more has one lane.
pub const MAX_NODES: usize = 64;
/// Lanes: one per node, and the spread lane.
pub const MAX_LANES: usize = MAX_NODES + 1;

/// The nodes with memory, ascending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nodes {
    ids: [u32; MAX_NODES],
    n: usize,
}

impl Nodes {
    /// The nodes of a kernel list (`0-1,3`); `None` for garbage or more than
    /// [`MAX_NODES`].
    pub fn parse(text: &[u8]) -> Option<Nodes> {
        let mut nodes = Nodes {
            ids: [0; MAX_NODES],
            n: 0,
        };
        let mut ok = true;
        each_in_list(text, |id| {
            if nodes.n == MAX_NODES || (nodes.n > 0 && id <= nodes.ids[nodes.n - 1]) {
                ok = false;
            } else {
                nodes.ids[nodes.n] = id;
                nodes.n += 1;
            }
        })?;
        ok.then_some(nodes)
    }

    /// The nodes of a file of sysfs's node directory (`has_memory`,
    /// `online`), or `None` where it does not say.
    pub fn read_list(name: &CStr) -> Option<Nodes> {
        let mut path = [0u8; 64];
        let mut w = &mut path[..];
        write!(w, "/sys/devices/system/node/{}\0", name.to_str().ok()?).ok()?;
        let mut buf = [0u8; 512];
        let n = sys::read_file_start(CStr::from_bytes_until_nul(&path).ok()?, &mut buf).ok()?;
        Nodes::parse(&buf[..n])
    }

    /// The ids, ascending.
    pub fn ids(&self) -> &[u32] {
        &self.ids[..self.n]
    }

    /// Keeps the nodes `keep` says.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        let mut n = 0;
        for i in 0..self.n {
            if keep(self.ids[i]) {
                self.ids[n] = self.ids[i];
                n += 1;
            }
        }
        self.n = n;
    }

    /// The machine's nodes with memory (`has_memory`), or `None` where sysfs
    /// does not say (then the cache has one lane).
    pub fn read() -> Option<Nodes> {
        Nodes::read_list(c"has_memory")
    }

    /// The node of lane `lane`, if it is a node's.
    pub fn node_of(&self, lane: usize) -> Option<u32> {
        (lane < self.n).then(|| self.ids[lane])
    }

    /// How many lanes: one for a single node, else one per node and the
    /// spread lane.
    pub fn lanes(&self) -> usize {
        if self.n <= 1 {
            1
        } else {
            self.n + 1
        }
    }

    /// The lane a request of a thread under `policy`, running on `cpu_node`,
    /// belongs to.
    pub fn lane_for(&self, policy: Policy, cpu_node: Option<u32>) -> usize {
        if self.n <= 1 {
            return 0;
        }
        let of = |node: u32| self.ids[..self.n].iter().position(|&id| id == node);
        let lane = match policy {
            Policy::Node(n) => of(n),
            Policy::Local => cpu_node.and_then(of),
            Policy::Spread => None,
        };
        // A node without memory, or pages spread: the unbound lane.
        lane.unwrap_or(self.n)
    }
}

/// The lane of the calling thread, for a request: its memory policy, and
/// under local allocation the node of the CPU it runs on.
pub fn caller_lane(nodes: &Nodes) -> usize {
    if nodes.lanes() == 1 {
        return 0;
    }
    let policy = sys::thread_policy();
    let cpu_node = match policy {
        Policy::Local => sys::current_node(),
        _ => None,
    };
    nodes.lane_for(policy, cpu_node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lists_parse_and_map_to_lanes() {
        let one = Nodes::parse(b"0\n").unwrap();
        assert_eq!(one.lanes(), 1);
        assert_eq!(one.lane_for(Policy::Spread, Some(0)), 0);
        let some = Nodes::parse(b"0-1,3\n").unwrap();
        assert_eq!(some.lanes(), 4);
        assert_eq!(some.node_of(2), Some(3));
        assert_eq!(some.node_of(3), None, "the spread lane has no node");
        assert_eq!(some.lane_for(Policy::Local, Some(1)), 1);
        assert_eq!(
            some.lane_for(Policy::Local, Some(2)),
            3,
            "no memory: spread"
        );
        assert_eq!(some.lane_for(Policy::Local, None), 3);
        assert_eq!(
            some.lane_for(Policy::Node(3), Some(0)),
            2,
            "policy over CPU"
        );
        assert_eq!(some.lane_for(Policy::Spread, Some(0)), 3);
        for bad in [&b"a"[..], b"1-0", b"0,0", b"3,1", b"0-99999", b"-1", b"0-"] {
            assert_eq!(Nodes::parse(bad), None, "{:?}", std::str::from_utf8(bad));
        }
        assert_eq!(Nodes::parse(b"").map(|n| n.lanes()), Some(1));
        let mut cpus = vec![];
        assert_eq!(each_in_list(b"0-3,8,10-11\n", |c| cpus.push(c)), Some(()));
        assert_eq!(cpus, [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(each_in_list(b"0-70000", |_| {}), None, "too long a run");
    }

    #[test]
    fn this_machine_reads() {
        let nodes = Nodes::read().expect("has_memory");
        let lane = caller_lane(&nodes);
        assert!(lane < nodes.lanes());
    }
}
