//! A chunk's ways in and out of the pool (its slice, its raw pointer, its
//! drop after the pool's), over the unsafe code that hands out its bytes: run
//! under Miri too, so the pool is built here without what Miri cannot run
//! (CPUID, sysfs, scrubber threads at idle priority).

use std::sync::Arc;

use super::{Kernels, Pool, Settings, Shared};
use crate::clear::KernelFn;
use crate::region::{PageKind, Region};

/// Less than a page: the mappings are made here, not rounded by `Region::new`,
/// and Miri checks every byte of every chunk the pool hands out.
const CHUNK: usize = 256;

/// A pool of `chunks` zeroed chunks mapped up front (so it never grows),
/// cleared by the portable kernel, with no scrubber: every freed chunk is
/// cleared on the spot by the next `alloc_zeroed`.
fn pool(chunks: usize) -> Pool {
    let shared = Arc::new(Shared::new(Settings {
        chunk_size: CHUNK,
        backing: PageKind::Base,
        max_chunks: chunks,
        low: chunks,
        high: chunks,
        verify: true,
        hot_chunks: 1,
        kernels: Kernels {
            hot: KernelFn::PORTABLE,
            cold: KernelFn::PORTABLE,
        },
        multi_node: false,
    }));
    for _ in 0..chunks {
        shared.adopt(Region::base_unrounded(CHUNK).unwrap(), false, None);
    }
    Pool {
        shared,
        scrubbers: Vec::new(),
    }
}

#[test]
fn a_raw_chunk_comes_back_once_and_is_cleared_for_the_next_taker() {
    let pool = pool(2);
    let mut c = pool.alloc_zeroed().unwrap();
    assert_eq!(c.len(), CHUNK);
    assert!(crate::is_zero(&c));
    c.fill(0xa5);
    let raw = c.into_raw();
    assert_eq!(pool.stats().raw, 1);
    // SAFETY: a raw chunk is CHUNK bytes, ours until `free_raw`.
    unsafe { raw.as_ptr().write_bytes(0x5a, CHUNK) };

    let other = pool.alloc_zeroed().unwrap();
    assert!(
        pool.free_raw(other.as_ptr().cast_mut()).is_err(),
        "a Chunk's, not raw"
    );
    assert!(
        pool.free_raw(raw.as_ptr().wrapping_add(1)).is_err(),
        "inside a chunk"
    );
    pool.free_raw(raw.as_ptr()).unwrap();
    assert!(pool.free_raw(raw.as_ptr()).is_err(), "freed twice");
    assert_eq!(pool.stats().raw, 0);
    drop(other);

    // The dirty chunks come back cleared, through the kernel's raw pointer.
    let (a, b) = (pool.alloc_zeroed().unwrap(), pool.alloc_zeroed().unwrap());
    assert!(crate::is_zero(&a) && crate::is_zero(&b));
    assert_eq!(
        pool.stats().bytes_cleared_hot + pool.stats().bytes_cleared_cold,
        2 * CHUNK as u64
    );
}

#[test]
fn a_chunk_outlives_its_pool() {
    let pool = pool(1);
    let mut c = pool.alloc().unwrap();
    drop(pool);
    c.fill(1);
    assert_eq!(c.iter().map(|&b| usize::from(b)).sum::<usize>(), CHUNK);
    // Its drop frees it into the shared part the pool left behind, then
    // unmaps the last mapping.
    drop(c);
}
