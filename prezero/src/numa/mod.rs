//! NUMA placement: memory on the node that will use it.
//!
//! The kernel puts a page on the node of the thread that first touches it,
//! or where the memory policy says (`numactl`, `set_mempolicy`, `mbind`).
//! Whoever pre-touches memory for someone else (a scrubber, the service's
//! worker, a prefault thread) inherits the duty to place it, and to check
//! it. A remote page costs 1.5-2x the latency and a third to a half of the
//! bandwidth of a local one for as long as it lives, so memory on the wrong
//! node is a silent bug of the same family as a wrong byte.
//!
//! * [`Topology`]: the nodes, their CPUs, memory, hugetlb pages, distances.
//! * [`MemPolicy`], [`home_node`], [`caller_node`], [`current_node`],
//!   [`run_on_node`]: where a
//!   thread's memory goes, and putting a thread on a node.
//! * [`bind`], [`placement`]: placing a range before it is touched, and
//!   checking where its pages are.

mod placement;
mod policy;
mod topology;

pub use placement::{bind, placement, NodePart, Placement};
pub use policy::{caller_node, current_node, home_node, is_multi_node, run_on_node, MemPolicy};
pub use topology::{Node, NodeHugetlb, Topology};
