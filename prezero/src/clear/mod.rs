//! Clearing memory: the kernels, the choice between them, and the three ways of
//! ordering a large clear that the seeds describe.
//!
//! - [`clear`] / [`clear_with`]: one extent, one kernel (as Linux's multi-page
//!   huge-page clearing does: the CPU gets the whole extent, not a page at a time).
//! - [`clear_bounded`]: the extent in chunks with a callback between them (as Linux
//!   clears huge pages in 8-32 MB batches: a latency bound), keeping the kernel chosen for the whole extent.
//! - [`clear_near`]: locality order (Linux's huge-page fault clear):
//!   away from the hint first, streamed;
//!   the hint's neighbourhood last, with ordinary stores, so it is cache-hot.
//! - [`clear_parallel`]: the extent split on page boundaries over threads.

use std::fmt;
use std::ops::ControlFlow;
use std::str::FromStr;

mod classes;
mod dispatch;
mod kernel;
pub(crate) mod portable;

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod x86_64;

pub use classes::{SizeClass, SizeClasses, Temperature, MAX_CLASSES};
pub use dispatch::{active_size_classes, auto_kernel, forced_kernel};
pub use kernel::Kernel;
pub(crate) use kernel::KernelFn;

use crate::error::{Error, Result};
use dispatch::dispatch;

/// How to clear: let prezero choose for a temperature, or name a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Choose by size from the active [`SizeClasses`], for memory of this temperature.
    Auto(Temperature),
    /// Always this kernel (an error if the CPU lacks it).
    Kernel(Kernel),
}

impl Default for Strategy {
    fn default() -> Self {
        Strategy::Auto(Temperature::Unknown)
    }
}

impl From<Kernel> for Strategy {
    fn from(k: Kernel) -> Self {
        Strategy::Kernel(k)
    }
}

impl From<Temperature> for Strategy {
    fn from(t: Temperature) -> Self {
        Strategy::Auto(t)
    }
}

impl Strategy {
    /// The checked kernel that clears `len` bytes under this strategy.
    #[inline]
    pub(crate) fn kernel_for(self, len: usize) -> Result<KernelFn> {
        match self {
            Strategy::Auto(t) => Ok(dispatch().pick(len, t)),
            Strategy::Kernel(k) => k.require(),
        }
    }

    /// "auto", "auto-hot", "auto-cold", or the kernel's name.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Auto(Temperature::Unknown) => "auto",
            Strategy::Auto(Temperature::Hot) => "auto-hot",
            Strategy::Auto(Temperature::Cold) => "auto-cold",
            Strategy::Kernel(k) => k.name(),
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => Strategy::Auto(Temperature::Unknown),
            "auto-hot" => Strategy::Auto(Temperature::Hot),
            "auto-cold" => Strategy::Auto(Temperature::Cold),
            _ => Strategy::Kernel(s.parse()?),
        })
    }
}

/// Zeroes `buf` with the kernel `Auto` picks for its size (temperature unknown).
#[inline]
pub fn clear(buf: &mut [u8]) {
    dispatch().pick(buf.len(), Temperature::Unknown).clear(buf)
}

/// Zeroes `buf` with `strategy`: a [`Temperature`] (Auto for memory of that
/// temperature) or a [`Kernel`]. Errors only if the CPU lacks the named kernel.
pub fn clear_with(buf: &mut [u8], strategy: impl Into<Strategy>) -> Result<()> {
    strategy.into().kernel_for(buf.len())?.clear(buf);
    Ok(())
}

/// Zeroes `len` bytes at `ptr` (Auto, temperature unknown).
///
/// # Safety
/// `ptr` is valid for writes of `len` bytes, and nothing else accesses them meanwhile.
#[inline]
pub unsafe fn clear_raw(ptr: *mut u8, len: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { dispatch().pick(len, Temperature::Unknown).run(ptr, len) }
}

/// Zeroes `len` bytes at `ptr` with `strategy`.
///
/// # Safety
/// `ptr` is valid for writes of `len` bytes, and nothing else accesses them meanwhile.
pub unsafe fn clear_raw_with(
    ptr: *mut u8,
    len: usize,
    strategy: impl Into<Strategy>,
) -> Result<()> {
    let k = strategy.into().kernel_for(len)?;
    // SAFETY: forwarded from the caller.
    unsafe { k.run(ptr, len) };
    Ok(())
}

/// Zeroes `buf` in chunks of at most `max_chunk` bytes, calling `on_chunk(cleared)`
/// between chunks (not after the last); returning `ControlFlow::Break` stops there.
/// Returns the bytes cleared: exactly the prefix `buf[..n]` is zero, the rest untouched.
///
/// The kernel is chosen once for the *whole* extent (Auto, temperature unknown),
/// so a large clear keeps its extent kernel (streaming stores) even in small
/// chunks. Chunks of 4 KiB or more end on 4 KiB boundaries, so no chunk splits a
/// page or a cache line. `max_chunk == 0` is an error.
pub fn clear_bounded(
    buf: &mut [u8],
    max_chunk: usize,
    on_chunk: impl FnMut(usize) -> ControlFlow<()>,
) -> Result<usize> {
    clear_bounded_with(buf, Strategy::default(), max_chunk, on_chunk)
}

/// [`clear_bounded`] with a chosen strategy.
pub fn clear_bounded_with(
    buf: &mut [u8],
    strategy: impl Into<Strategy>,
    max_chunk: usize,
    on_chunk: impl FnMut(usize) -> ControlFlow<()>,
) -> Result<usize> {
    if max_chunk == 0 {
        return Err(Error::invalid(
            "clear_bounded: max_chunk must be at least 1",
        ));
    }
    let k = strategy.into().kernel_for(buf.len())?;
    Ok(bounded(k, buf, max_chunk, on_chunk))
}

pub(crate) fn bounded(
    k: KernelFn,
    buf: &mut [u8],
    max_chunk: usize,
    mut on_chunk: impl FnMut(usize) -> ControlFlow<()>,
) -> usize {
    let align = if max_chunk >= 4096 {
        4096
    } else if max_chunk >= 64 {
        64
    } else {
        1
    };
    let chunk = max_chunk / align * align;
    let base = buf.as_ptr() as usize;
    let len = buf.len();
    let mut done = 0;
    while done < len {
        // End on an aligned address so later chunks start on whole lines/pages;
        // chunk >= align, so every chunk makes progress.
        let end = if len - done <= max_chunk {
            len
        } else {
            (base + done + chunk) / align * align - base
        };
        k.clear(&mut buf[done..end]);
        done = end;
        if done < len && on_chunk(done).is_break() {
            break;
        }
    }
    done
}

/// The neighbourhood kept for last by [`clear_near`]: this many base pages on
/// each side of the hint's page (Linux's huge-page fault clear uses 2).
pub const NEAR_PAGES: usize = 2;

/// Zeroes `buf` in locality order around `hint` (an offset into `buf`): first
/// everything more than [`NEAR_PAGES`] base pages away, with the cold (streaming)
/// choice, then the hint's neighbourhood with the hot (temporal) choice, so the
/// lines the caller touches next are in cache. A `hint` past the end is clamped
/// to the last byte, as the kernel clamps its fault index.
pub fn clear_near(buf: &mut [u8], hint: usize) {
    if buf.is_empty() {
        return;
    }
    let page = crate::cpu::cpu().page_size;
    let base = buf.as_ptr() as usize;
    let hint_addr = base + hint.min(buf.len() - 1);
    let page_start = hint_addr & !(page - 1);
    let near_start = page_start.saturating_sub(NEAR_PAGES * page).max(base) - base;
    let near_end = (page_start + (NEAR_PAGES + 1) * page).min(base + buf.len()) - base;
    let (left, rest) = buf.split_at_mut(near_start);
    let (near, right) = rest.split_at_mut(near_end - near_start);
    let d = dispatch();
    // Right then left, as the kernel does: the common hint is the start of the buffer.
    d.pick(right.len(), Temperature::Cold).clear(right);
    d.pick(left.len(), Temperature::Cold).clear(left);
    d.pick(near.len(), Temperature::Hot).clear(near);
}

/// Zeroes `buf` using `threads` scoped threads (the caller's among them), split on
/// base-page boundaries. Fewer threads run when there are fewer pages than
/// threads. `threads == 0` is an error.
pub fn clear_parallel(buf: &mut [u8], threads: usize) -> Result<()> {
    clear_parallel_with(buf, Strategy::default(), threads)
}

/// [`clear_parallel`] with a chosen strategy; the kernel is chosen for the whole extent.
pub fn clear_parallel_with(
    buf: &mut [u8],
    strategy: impl Into<Strategy>,
    threads: usize,
) -> Result<()> {
    if threads == 0 {
        return Err(Error::invalid("clear_parallel: threads must be at least 1"));
    }
    let k = strategy.into().kernel_for(buf.len())?;
    let page = crate::cpu::cpu().page_size;
    let pages = buf.len().div_ceil(page);
    let threads = threads.min(pages).max(1);
    if threads == 1 {
        k.clear(buf);
        return Ok(());
    }
    // Part i covers [first_page + i*per, first_page + (i+1)*per) clipped to the
    // buffer: boundaries are page-aligned addresses, so no two threads share a page.
    let base = buf.as_ptr() as usize;
    let end = base + buf.len();
    let first_page = base & !(page - 1);
    let per = (end - first_page).div_ceil(page).div_ceil(threads) * page;
    std::thread::scope(|s| {
        let mut rest = buf;
        for i in 1..=threads {
            let cut = (first_page + i * per).clamp(base, end) - (end - rest.len());
            let (part, tail) = rest.split_at_mut(cut);
            rest = tail;
            if rest.is_empty() {
                // The caller's thread takes the last part instead of idling.
                k.clear(part);
                break;
            }
            s.spawn(move || k.clear(part));
        }
    });
    Ok(())
}

/// Zeroes `buf` as `nodes.len()` parts of about equal size, on page
/// boundaries (2 MiB ones when every part gets at least that, so a THP is not
/// shared): part `i` is cleared by `threads / nodes.len()` threads (at least
/// one) running on node `nodes[i]`'s CPUs. Pages the clear touches first land
/// on their part's node under local allocation (first-touch placement, as an
/// HPC code's own threads would place them); pages present already stay where
/// they are. A buffer too small for every node has fewer parts. Returns the
/// parts.
///
/// Errors (the buffer untouched): no nodes; `threads == 0`; a node that is
/// not online or has no CPUs this thread may run on. A CPU affinity refused
/// midway (a cpuset changed meanwhile) is an error too, but the buffer is
/// cleared all the same.
pub fn clear_parallel_on_nodes(
    buf: &mut [u8],
    nodes: &[u32],
    threads: usize,
) -> Result<Vec<crate::numa::NodePart>> {
    if nodes.is_empty() {
        return Err(Error::invalid("clear_parallel_on_nodes: no nodes given"));
    }
    if threads == 0 {
        return Err(Error::invalid("clear_parallel: threads must be at least 1"));
    }
    let topology = crate::numa::Topology::read();
    let mut cpus_of = Vec::with_capacity(nodes.len());
    for &n in nodes {
        if topology.node(n).is_none() {
            topology.memory_node(n)?;
        }
        let cpus = topology.usable_cpus(n);
        if cpus.is_empty() {
            return Err(Error::invalid(format!(
                "NUMA node {n} has no CPUs this thread may run on to clear from (bind the memory to it instead)"
            )));
        }
        cpus_of.push((n, cpus));
    }
    if buf.is_empty() {
        return Ok(Vec::new());
    }
    let k = Strategy::default().kernel_for(buf.len())?;
    let granule = if buf.len() >= nodes.len().saturating_mul(2 << 20) {
        2 << 20
    } else {
        crate::cpu::cpu().page_size
    };
    let base = buf.as_ptr() as usize;
    let parts = crate::prefault::node_parts(base, buf.len(), granule, nodes);
    let per_part = (threads / parts.len()).max(1);
    let mut pieces = Vec::new();
    for part in &parts {
        pieces.extend(
            crate::prefault::split(base + part.offset, part.len, granule, per_part)
                .into_iter()
                .map(|(_, len)| (len, part.node)),
        );
    }
    std::thread::scope(|s| {
        let mut rest = buf;
        let mut handles = Vec::new();
        for &(len, node) in &pieces {
            let (piece, tail) = rest.split_at_mut(len);
            rest = tail;
            let cpus = &cpus_of.iter().find(|(n, _)| *n == node).expect("checked").1;
            handles.push(s.spawn(move || -> Result<()> {
                // Refused (a cpuset changed meanwhile), the piece is still
                // cleared: the error tells only of its placement.
                let placed = crate::sys::set_thread_affinity(cpus)
                    .map_err(|e| Error::os("sched_setaffinity", e));
                k.clear(piece);
                placed
            }));
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("clear thread panicked"))
            .collect::<Result<Vec<()>>>()
    })?;
    Ok(parts)
}
