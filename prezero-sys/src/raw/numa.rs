//! The NUMA part of the OS layer: memory policies (a range's, the calling
//! thread's), which node a page is on, and which CPUs a thread runs on; in
//! `sys`'s manner (numbers in, numbers out, no allocation).

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{read_file_start, Errno};

/// Set for good once the program enters a seccomp filter: its allow-list
/// was written for what the program calls, and placement calls are ours
/// (a compute program's filter killed it at our `mbind` on two nodes).
/// Every call here then answers as a kernel without NUMA would, and pages
/// go where the program's own faults would put them.
static FORBIDDEN: AtomicBool = AtomicBool::new(false);

/// No call of this file's reaches the kernel from now on.
pub fn forbid_numa_calls() {
    FORBIDDEN.store(true, Ordering::Release);
}

/// ENOSYS where the calls are forbidden: what a kernel without NUMA says.
fn allowed() -> Result<(), Errno> {
    if FORBIDDEN.load(Ordering::Acquire) {
        return Err(Errno(libc::ENOSYS));
    }
    Ok(())
}

/// Node masks of the policy calls: the kernel's largest `MAX_NUMNODES`.
const MASK_WORDS: usize = 1024 / 64;
/// `maxnode` for a mask of [`MASK_WORDS`] (numactl passes the same: the
/// kernel reads `maxnode - 1` bits).
const MAXNODE: libc::c_ulong = (MASK_WORDS * 64 + 1) as libc::c_ulong;
/// `MPOL_PREFERRED_MANY`, which the C headers here predate.
const MPOL_PREFERRED_MANY: c_int = 5;
/// `MPOL_F_RELATIVE_NODES`, a flag in a policy's mode.
const MPOL_F_RELATIVE_NODES: c_int = 1 << 14;
/// `get_mempolicy`'s flags: the policy of the mapping at an address; the
/// nodes the calling thread's cpuset allows.
const MPOL_F_ADDR: libc::c_ulong = 1 << 1;
const MPOL_F_MEMS_ALLOWED: libc::c_ulong = 1 << 2;

/// The mask of `node` alone.
fn one_node(node: u32) -> Result<[u64; MASK_WORDS], Errno> {
    let n = node as usize;
    if n >= MASK_WORDS * 64 {
        return Err(Errno(libc::EINVAL));
    }
    let mut mask = [0u64; MASK_WORDS];
    mask[n / 64] = 1 << (n % 64);
    Ok(mask)
}

/// `mbind(addr, len, mode, {node})`.
fn mbind_one(addr: usize, len: usize, mode: c_int, node: u32) -> Result<(), Errno> {
    allowed()?;
    let mask = one_node(node)?;
    // SAFETY: the mask is a local of MASK_WORDS words, MAXNODE its size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len,
            mode as libc::c_ulong,
            mask.as_ptr(),
            MAXNODE,
            0 as libc::c_ulong,
        )
    };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// Makes `[addr, addr+len)` take its pages from `node` from now on,
/// another when it is short (`mbind`, `MPOL_PREFERRED`). Pages present stay.
///
/// pre: none (placement only: contents never change; the kernel checks the
/// range and the node).
pub fn prefer_node(addr: usize, len: usize, node: u32) -> Result<(), Errno> {
    mbind_one(addr, len, libc::MPOL_PREFERRED, node)
}

/// Where the calling thread's new pages go, by its memory policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// The node of the CPU that faults (the default, `MPOL_LOCAL`, or a
    /// preferred policy without a node).
    Local,
    /// One node (bind or preferred of exactly one node).
    Node(u32),
    /// Several nodes: interleave, or bind or preferred of more than one.
    Spread,
}

/// A policy as the kernel states it (its mode with flags, its mask): what
/// [`set_thread_policy`] puts back.
#[derive(Clone, Copy)]
pub struct RawPolicy {
    mode: c_int,
    mask: [u64; MASK_WORDS],
}

impl RawPolicy {
    /// What it means for a page.
    pub fn policy(&self) -> Policy {
        let nodes: u32 = self.mask.iter().map(|w| w.count_ones()).sum();
        // A mask relative to the cpuset's nodes names no node by itself.
        if self.mode & MPOL_F_RELATIVE_NODES != 0 {
            return Policy::Spread;
        }
        // The high bits of the mode are flags (static or relative nodes).
        match (self.mode & 0xff, nodes) {
            (libc::MPOL_BIND | libc::MPOL_PREFERRED | MPOL_PREFERRED_MANY, 1) => {
                let word = self.mask.iter().position(|&w| w != 0).unwrap_or(0);
                Policy::Node((word * 64) as u32 + self.mask[word].trailing_zeros())
            }
            (libc::MPOL_DEFAULT | libc::MPOL_LOCAL, _) | (libc::MPOL_PREFERRED, 0) => Policy::Local,
            _ => Policy::Spread,
        }
    }
}

/// Whether the calling thread's cpuset allows pages on `node` (true where
/// the kernel cannot say).
///
/// pre: none.
pub fn node_allowed(node: u32) -> bool {
    let n = node as usize;
    get_mempolicy(0, MPOL_F_MEMS_ALLOWED)
        .is_none_or(|p| n < MASK_WORDS * 64 && p.mask[n / 64] & (1 << (n % 64)) != 0)
}

/// `get_mempolicy(addr, flags)`: the calling thread's policy (0, 0), the
/// mapping's at `addr` (`MPOL_F_ADDR`), or the nodes allowed (the mask of
/// `MPOL_F_MEMS_ALLOWED`).
fn get_mempolicy(addr: usize, flags: libc::c_ulong) -> Option<RawPolicy> {
    allowed().ok()?;
    let mut p = RawPolicy {
        mode: 0,
        mask: [0; MASK_WORDS],
    };
    // SAFETY: both out-pointers are the local's fields, of the sizes given;
    // an address is only looked up, never accessed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut p.mode as *mut c_int,
            p.mask.as_mut_ptr(),
            (MASK_WORDS * 64) as libc::c_ulong,
            addr,
            flags,
        )
    };
    (r == 0).then_some(p)
}

/// The calling thread's memory policy, as stated (`None`: a kernel
/// without NUMA).
///
/// pre: none.
pub fn raw_thread_policy() -> Option<RawPolicy> {
    get_mempolicy(0, 0)
}

/// The calling thread's memory policy. A kernel without NUMA (ENOSYS) has
/// one node: local.
///
/// pre: none.
pub fn thread_policy() -> Policy {
    raw_thread_policy().map_or(Policy::Local, |p| p.policy())
}

/// The policy of the mapping at `addr`, where it has one of its own
/// (`mbind`); `None` where the faulting thread's governs (or the kernel
/// cannot say).
///
/// pre: none.
pub fn range_policy(addr: usize) -> Option<Policy> {
    let p = get_mempolicy(addr.max(1), MPOL_F_ADDR)?;
    (p.mode & 0xff != libc::MPOL_DEFAULT).then(|| p.policy())
}

/// Sets the calling thread's policy back to `p`.
///
/// pre: none (placement of later pages only).
pub fn set_thread_policy(p: &RawPolicy) -> Result<(), Errno> {
    allowed()?;
    // SAFETY: the mask is p's, MASK_WORDS words.
    let r = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            p.mode as libc::c_ulong,
            p.mask.as_ptr(),
            MAXNODE,
        )
    };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// The calling thread's later pages from `node`, another when it is short
/// (`set_mempolicy`, `MPOL_PREFERRED`).
///
/// pre: none (placement of later pages only).
pub fn prefer_thread_node(node: u32) -> Result<(), Errno> {
    set_thread_policy(&RawPolicy {
        mode: libc::MPOL_PREFERRED,
        mask: one_node(node)?,
    })
}

/// The node of the page at `addr`, if one is present (`move_pages` asked
/// nothing to move).
///
/// pre: none (the address is looked up, never accessed).
pub fn page_node(addr: usize) -> Option<u32> {
    allowed().ok()?;
    let page = addr as *const u8;
    let mut status: c_int = -1;
    // SAFETY: one page pointer and one status, both locals; no nodes are
    // given, so nothing moves.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0 as libc::c_int,
            1 as libc::c_ulong,
            &page as *const *const u8,
            std::ptr::null::<c_int>(),
            &mut status as *mut c_int,
            0 as libc::c_int,
        )
    };
    (r == 0 && status >= 0).then_some(status as u32)
}

/// The CPU the calling thread runs on now.
///
/// pre: none.
pub fn current_cpu() -> Option<u32> {
    allowed().ok()?;
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).ok()
}

/// The node of the CPU the calling thread runs on now.
///
/// pre: none.
pub fn current_node() -> Option<u32> {
    allowed().ok()?;
    getcpu().ok().map(|(_, node)| node)
}

/// The CPU and node the calling thread runs on now (`getcpu`).
///
/// pre: none.
pub fn getcpu() -> Result<(u32, u32), Errno> {
    let (mut cpu, mut node) = (0u32, 0u32);
    // SAFETY: both out-pointers are locals; the third argument (a cache) is
    // unused since Linux 2.6.24 and may be null.
    let r = unsafe {
        libc::syscall(
            libc::SYS_getcpu,
            &mut cpu as *mut u32,
            &mut node as *mut u32,
            std::ptr::null::<u8>(),
        )
    };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok((cpu, node))
}

/// CPU masks: up to this many CPUs (`NR_CPUS` of Debian's x86_64 kernels;
/// `sched_getaffinity` refuses a mask shorter than the kernel's).
pub const CPU_WORDS: usize = 8192 / 64;

/// The CPUs thread `tid` (0: the caller) may run on.
///
/// pre: none.
pub fn affinity(tid: c_int) -> Result<[u64; CPU_WORDS], Errno> {
    allowed()?;
    let mut mask = [0u64; CPU_WORDS];
    // SAFETY: the kernel writes at most the mask's bytes, given.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_getaffinity,
            tid,
            std::mem::size_of_val(&mask),
            mask.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(mask)
}

/// The calling thread runs on the CPUs of `mask` only.
///
/// pre: none.
pub fn set_affinity(mask: &[u64; CPU_WORDS]) -> Result<(), Errno> {
    allowed()?;
    // SAFETY: the kernel reads the mask's bytes, given.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_setaffinity,
            0,
            std::mem::size_of_val(mask),
            mask.as_ptr(),
        )
    };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// The CPU thread `tid` of this process last ran on (field 39 of
/// `/proc/self/task/TID/stat`; for a thread waiting on a page fault, the
/// one it faulted on).
///
/// pre: none.
pub fn thread_cpu(tid: u32) -> Option<u32> {
    allowed().ok()?;
    let mut path = [0u8; 48];
    let mut w = &mut path[..];
    use std::io::Write;
    write!(w, "/proc/self/task/{tid}/stat\0").ok()?;
    let path = std::ffi::CStr::from_bytes_until_nul(&path).ok()?;
    let mut buf = [0u8; 1024];
    let n = read_file_start(path, &mut buf).ok()?;
    // The name (field 2) may hold spaces and parentheses: fields count from
    // the last ')', after which field 3 comes.
    let after = buf[..n].iter().rposition(|&b| b == b')')? + 1;
    let field = buf[after..n]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty())
        .nth(39 - 3)?;
    std::str::from_utf8(field).ok()?.parse().ok()
}
