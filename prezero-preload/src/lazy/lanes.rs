//! Which lane of the reserve serves a fault, on a machine of several NUMA
//! nodes: the kernel would place the page by the mapping's policy (`mbind`:
//! the cache binds each lane of its range to its node), else by the
//! faulting thread's (a bind or preferred node; interleave; local: the node
//! of the CPU it faults on, or where that node has no memory the nearest
//! one with memory). The reserve's lanes are the cache's: one per node with
//! memory, and the spread lane, unbound, for spread policies.
//!
//! A thread's own policy cannot be read from another thread: the process's
//! (the main thread's when the preload loads: what `numactl` set, which
//! every thread inherits) stands for it. The faulting thread's CPU comes
//! from its affinity where that names one lane's CPUs, else from
//! `/proc/self/task/TID/stat`. A mapping whose own policy spreads over
//! several nodes (`mbind`) gets no lane: small pages, which the kernel
//! places by that policy.
//!
//! The lanes are the nodes with memory the cpuset allows: a node lane's
//! pages stay within what the program may use.
//!
//! On a machine of one node there is one lane and nothing here runs past a
//! comparison.

use std::ffi::CStr;
use std::io::Write;
use std::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::nodes::{Nodes, MAX_NODES};
use crate::sys::{self, each_in_list, Policy, RawPolicy, CPU_WORDS};

const MAX_CPUS: usize = CPU_WORDS * 64;
const UNKNOWN: u8 = u8::MAX;

/// 1 on a machine of one node (or where sysfs does not say).
static LANES: AtomicUsize = AtomicUsize::new(1);
/// The node of each node lane.
static NODE: [AtomicU32; MAX_NODES] = [const { AtomicU32::new(0) }; MAX_NODES];
/// The lane of a local fault on each CPU: its node's, or on a node without
/// memory the nearest node's.
static CPU_LANE: [AtomicU8; MAX_CPUS] = [const { AtomicU8::new(UNKNOWN) }; MAX_CPUS];

/// The process's memory policy, taken when the preload loads.
static PROCESS: OnceLock<Option<RawPolicy>> = OnceLock::new();

/// Takes the calling thread's policy as the process's (at load time, in the
/// main thread).
pub fn take_process_policy() {
    let _ = PROCESS.get_or_init(sys::raw_thread_policy);
}

/// The process's memory policy as stated (`None`: not taken, or no NUMA).
pub fn process_raw() -> Option<RawPolicy> {
    *PROCESS.get_or_init(sys::raw_thread_policy)
}

/// What the process's policy means for a page.
pub fn process() -> Policy {
    process_raw().map_or(Policy::Local, |p| p.policy())
}

/// Reads the topology (before the reserve and its threads exist).
pub fn init() {
    let Some(mut mem) = Nodes::read() else { return };
    mem.retain(sys::node_allowed);
    if mem.lanes() == 1 {
        return;
    }
    let online = Nodes::read_list(c"online").unwrap_or(mem);
    for (lane, &id) in mem.ids().iter().enumerate() {
        NODE[lane].store(id, Ordering::Relaxed);
    }
    for &id in online.ids() {
        let target = if mem.ids().contains(&id) {
            Some(id)
        } else {
            nearest(id, &online, &mem)
        };
        let Some(lane) = target.and_then(|t| mem.ids().iter().position(|&m| m == t)) else {
            continue;
        };
        let mut buf = [0u8; 4096];
        // A list that fills the buffer may be cut in a number.
        if let Some(n) = read_node_file(id, c"cpulist", &mut buf).filter(|&n| n < buf.len()) {
            let _ = each_in_list(&buf[..n], |cpu| {
                if let Some(c) = CPU_LANE.get(cpu as usize) {
                    c.store(lane as u8, Ordering::Relaxed);
                }
            });
        }
    }
    LANES.store(mem.lanes(), Ordering::Release);
}

/// `/sys/devices/system/node/nodeID/NAME` into `buf`: the bytes read.
fn read_node_file(id: u32, name: &CStr, buf: &mut [u8]) -> Option<usize> {
    let mut path = [0u8; 96];
    let mut w = &mut path[..];
    write!(
        w,
        "/sys/devices/system/node/node{id}/{}\0",
        name.to_str().ok()?
    )
    .ok()?;
    sys::read_file_start(CStr::from_bytes_until_nul(&path).ok()?, buf).ok()
}

/// The node with memory nearest node `id` (its `distance` file lists the
/// distance to each online node, in order); the lowest id of a tie.
fn nearest(id: u32, online: &Nodes, mem: &Nodes) -> Option<u32> {
    let mut buf = [0u8; 512];
    let n = read_node_file(id, c"distance", &mut buf)?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    text.split_whitespace()
        .zip(online.ids())
        .filter(|(_, to)| mem.ids().contains(to))
        .filter_map(|(d, &to)| Some((d.parse::<u32>().ok()?, to)))
        .min()
        .map(|(_, to)| to)
}

/// The lanes: 1, or one per node with memory and the spread lane.
pub fn count() -> usize {
    LANES.load(Ordering::Relaxed)
}

fn spread() -> usize {
    count() - 1
}

/// The node of lane `lane`, if it is a node's (not the spread lane's).
pub fn node(lane: usize) -> Option<u32> {
    (lane < spread()).then(|| NODE[lane].load(Ordering::Relaxed))
}

fn of_node(node: u32) -> Option<usize> {
    (0..spread()).find(|&l| NODE[l].load(Ordering::Relaxed) == node)
}

/// The lane of a fault at `addr` by thread `tid` (0: unknown); `None`
/// where the mapping's own policy spreads its pages or names a node
/// without a lane (the fault gets small pages, placed by that policy).
pub fn for_fault(addr: usize, tid: u32) -> Option<usize> {
    if count() == 1 {
        return Some(0);
    }
    let lane = match sys::range_policy(addr) {
        Some(Policy::Node(n)) => return of_node(n),
        Some(Policy::Spread) => return None,
        Some(Policy::Local) => of_thread(tid),
        None => match process() {
            Policy::Node(n) => of_node(n),
            Policy::Spread => None,
            Policy::Local => of_thread(tid),
        },
    };
    Some(lane.unwrap_or(spread()))
}

/// The lane of the calling thread's local faults, or as its policy says.
pub fn of_caller() -> usize {
    if count() == 1 {
        return 0;
    }
    let lane = match sys::thread_policy() {
        Policy::Node(n) => of_node(n),
        Policy::Spread => None,
        Policy::Local => sys::current_cpu().and_then(of_cpu),
    };
    lane.unwrap_or(spread())
}

fn of_cpu(cpu: u32) -> Option<usize> {
    let l = CPU_LANE.get(cpu as usize)?.load(Ordering::Relaxed);
    (l != UNKNOWN).then_some(l as usize)
}

/// The lane of thread `tid`'s local faults: the one all the CPUs it may run
/// on belong to, else its current CPU's.
fn of_thread(tid: u32) -> Option<usize> {
    if tid == 0 {
        return None;
    }
    if let Ok(mask) = sys::affinity(tid as i32) {
        // The set bits only: a mask of 8192 CPUs has few.
        let mut lanes = mask.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                (w != 0).then(|| {
                    let bit = w.trailing_zeros();
                    w &= w - 1;
                    of_cpu(i as u32 * 64 + bit)
                })
            })
        });
        if let Some(Some(first)) = lanes.next() {
            if lanes.all(|l| l == Some(first)) {
                return Some(first);
            }
        }
    }
    sys::thread_cpu(tid).and_then(of_cpu)
}

/// The lane a huge page present at `addr` moves back into: its node's (a
/// process whose pages are spread takes from the spread lane only: there);
/// `None` where the kernel cannot say.
pub fn of_page(addr: usize) -> Option<usize> {
    if count() == 1 {
        return Some(0);
    }
    if process() == Policy::Spread {
        return Some(spread());
    }
    sys::page_node(addr).and_then(of_node)
}

/// Binds the calling thread (lane `lane`'s worker) to those of the CPUs it
/// may run on whose local faults the lane serves: it clears its node's
/// pages. The spread lane's stays where it may run (and takes the process's
/// policy: it fills that lane); so does one no CPU of the node is allowed
/// to (`taskset`, a cpuset).
pub fn bind_worker(lane: usize) {
    if node(lane).is_none() {
        if let Some(p) = process_raw() {
            let _ = sys::set_thread_policy(&p);
        }
        return;
    }
    let Ok(mut mask) = sys::affinity(0) else {
        return;
    };
    for c in 0..MAX_CPUS {
        if of_cpu(c as u32) != Some(lane) {
            mask[c / 64] &= !(1 << (c % 64));
        }
    }
    if mask.iter().any(|&w| w != 0) {
        let _ = sys::set_affinity(&mask);
    }
}
