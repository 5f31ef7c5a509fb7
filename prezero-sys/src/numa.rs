//! NUMA: memory policies (`mbind`, `get_mempolicy`), where pages are
//! (`move_pages` with no target), the CPU a thread runs on and the CPUs it may
//! run on. glibc wraps none of the policy calls (libnuma does), so they are
//! raw system calls here.

use std::io;

/// Node masks are this many bits: the kernel's largest `MAX_NUMNODES`
/// (`CONFIG_NODES_SHIFT=10` on distribution kernels). A node id at or past it
/// is refused before any call.
pub const MASK_BITS: usize = 1024;
const MASK_WORDS: usize = MASK_BITS / 64;

/// A set of node ids, as the policy calls take and give them.
pub type NodeMask = [u64; MASK_WORDS];

/// `mode` values of the policy calls not in the `libc` crate.
pub const MPOL_PREFERRED_MANY: libc::c_int = 5;
/// Linux 6.9.
pub const MPOL_WEIGHTED_INTERLEAVE: libc::c_int = 6;
/// `get_mempolicy`'s mode flag: the mask is relative to the cpuset's nodes.
pub const MPOL_F_RELATIVE_NODES: libc::c_int = 1 << 14;
/// The mode without its flags (`MPOL_F_STATIC_NODES`, `_RELATIVE_NODES`,
/// `_NUMA_BALANCING`).
pub const MPOL_MODE_MASK: libc::c_int = 0xff;
/// `mbind` flag: fail where a page already present is on another node.
const MPOL_MF_STRICT: libc::c_uint = 1;

/// The mask holding `nodes` (ids below [`MASK_BITS`]), or EINVAL.
///
/// pre: none.
pub fn mask_of(nodes: &[u32]) -> io::Result<NodeMask> {
    let mut mask = [0u64; MASK_WORDS];
    for &n in nodes {
        let n = n as usize;
        if n >= MASK_BITS {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        mask[n / 64] |= 1 << (n % 64);
    }
    Ok(mask)
}

/// The node ids in `mask`, ascending.
///
/// pre: none.
pub fn nodes_of(mask: &NodeMask) -> Vec<u32> {
    (0..MASK_BITS)
        .filter(|&n| mask[n / 64] & (1 << (n % 64)) != 0)
        .map(|n| n as u32)
        .collect()
}

/// The calling thread's memory policy: its mode (`MPOL_*`, with its flags:
/// [`MPOL_MODE_MASK`] takes them off) and node mask (empty for the default
/// and local policies).
///
/// pre: none.
pub fn thread_mempolicy() -> io::Result<(libc::c_int, NodeMask)> {
    let mut mode: libc::c_int = 0;
    let mut mask = [0u64; MASK_WORDS];
    // SAFETY: both out-pointers are locals of the sizes given (`MASK_BITS`
    // bits of mask); no address is passed (flags 0).
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            MASK_BITS as libc::c_ulong,
            std::ptr::null::<u8>(),
            0 as libc::c_ulong,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((mode, mask))
}

/// Sets the policy of `[addr, addr+len)` (`mbind`): `mode` over `nodes`.
/// Pages present already stay where they are (no `MPOL_MF_MOVE`); with
/// `strict`, one present on another node is EIO. Contents never change.
///
/// pre: none (the range is the kernel's to check: one not mapped is EFAULT,
/// one not page-aligned EINVAL).
// The pointer goes to the kernel, which checks the range; nothing here reads it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn mbind(
    addr: *mut u8,
    len: usize,
    mode: libc::c_int,
    nodes: &[u32],
    strict: bool,
) -> io::Result<()> {
    let mask = mask_of(nodes)?;
    let flags = if strict { MPOL_MF_STRICT } else { 0 };
    // SAFETY: the mask is a local of MASK_BITS bits; the kernel reads
    // `maxnode - 1` bits of it (its historic off-by-one, which numactl's
    // callers pass for too). A policy changes placement, never contents, so no
    // range can make this unsound.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len as libc::c_ulong,
            mode as libc::c_ulong,
            mask.as_ptr(),
            (MASK_BITS + 1) as libc::c_ulong,
            flags as libc::c_ulong,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Where each page whose address is in `pages` is: its node, or a negative
/// errno (`-ENOENT`: not present; `-EFAULT`: not mapped). `move_pages` with
/// no target nodes moves nothing; it only answers.
///
/// pre: none (addresses are only looked up).
pub fn page_nodes(pages: &[*const u8]) -> io::Result<Vec<i32>> {
    let mut status = vec![i32::MIN; pages.len()];
    // One call per batch keeps the kernel's work per call bounded.
    for (addrs, out) in pages.chunks(4096).zip(status.chunks_mut(4096)) {
        // SAFETY: `addrs` and `out` hold `addrs.len()` entries each; a null
        // `nodes` asks for the status only; pid 0 is this process.
        let r = unsafe {
            libc::syscall(
                libc::SYS_move_pages,
                0 as libc::c_long,
                addrs.len() as libc::c_ulong,
                addrs.as_ptr(),
                std::ptr::null::<libc::c_int>(),
                out.as_mut_ptr(),
                0 as libc::c_long,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(status)
}

/// The CPU and node the calling thread runs on now.
///
/// pre: none.
pub fn getcpu() -> io::Result<(u32, u32)> {
    Ok(crate::raw::getcpu()?)
}

/// The CPU the calling thread runs on now: `sched_getcpu`, which glibc
/// answers from the vDSO or rseq without a system call.
///
/// pre: none.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

/// The CPUs the calling thread may run on, ascending.
///
/// pre: none.
pub fn thread_affinity() -> io::Result<Vec<usize>> {
    // SAFETY: a cpu_set_t is plain bits; all zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a local of the size given; pid 0 is the calling thread.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE, the set's size.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Lets the calling thread run only on `cpus` (ids below `CPU_SETSIZE`).
///
/// pre: none (an empty or offline set is the kernel's EINVAL).
pub fn set_thread_affinity(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: a cpu_set_t is plain bits; all zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: `cpu` was checked to be below CPU_SETSIZE just above.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a local of the size given; pid 0 is the calling thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
