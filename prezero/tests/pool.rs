//! The pre-zeroed pool: what it hands out, what it refuses, and what it does
//! under concurrency.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use prezero::{Error, PageKind, Pool, PoolStats};

mod common;

const CHUNK: usize = 64 * 1024;

fn small_pool(chunks: usize) -> prezero::PoolBuilder {
    Pool::builder()
        .backing(PageKind::Base)
        .chunk_size(CHUNK)
        .capacity(chunks * CHUNK)
}

fn balanced(s: &PoolStats) -> bool {
    s.zeroed + s.dirty + s.scrubbing + s.in_use == s.mapped
}

/// Builds the pool, then keeps the calling test's thread on the node it runs
/// on now, for the tests that count where hand-outs came from: a chunk freed
/// on one node and taken on another is served fresh (its pages dropped, to be
/// placed anew by the taker), which a thread the scheduler moves across nodes
/// would see (a 4-node guest did). After the build: the scrubber it starts
/// keeps every CPU (pinned beside the test's thread, at SCHED_IDLE, it could
/// wait behind the other tests' threads).
fn on_this_node(b: prezero::PoolBuilder) -> Pool {
    let pool = b.build().unwrap();
    stay_on_this_node();
    pool
}

/// Keeps the calling test's thread on the node it runs on now.
fn stay_on_this_node() {
    if let Some(node) = prezero::numa::current_node() {
        let t = prezero::numa::Topology::read();
        prezero::numa::run_on_node(&t, node).unwrap();
    }
}

#[test]
fn hands_out_zero_chunks_again_and_again() {
    let pool = on_this_node(small_pool(4).verify(true));
    for round in 0..50 {
        let mut chunks: Vec<_> = (0..4).map(|_| pool.alloc_zeroed().unwrap()).collect();
        for c in &mut chunks {
            assert_eq!(c.len(), CHUNK);
            assert!(prezero::is_zero(c), "round {round}: non-zero chunk");
            c.fill(0xa5);
        }
    }
    let s = pool.stats();
    assert!(balanced(&s), "{s:?}");
    assert_eq!(s.mapped, 4);
    assert_eq!(
        s.bytes_fresh,
        4 * CHUNK as u64,
        "fresh memory is mapped once and never cleared"
    );
}

#[test]
fn bad_configurations_are_errors() {
    let bad = [
        small_pool(4).chunk_size(0),
        small_pool(4).chunk_size(4096 + 1),
        small_pool(4).capacity(0),
        small_pool(4).capacity(CHUNK - 1),
        small_pool(4).low_watermark(3).high_watermark(2),
        small_pool(4).high_watermark(5),
        small_pool(4).prefill(5),
        Pool::builder().backing(PageKind::Huge2M).chunk_size(4096),
    ];
    for b in bad {
        assert!(
            matches!(b.clone().build(), Err(Error::InvalidArgument(_))),
            "{b:?}"
        );
    }
}

#[test]
fn capacity_one_and_exhaustion() {
    let pool = small_pool(1).build().unwrap();
    let a = pool.alloc_zeroed().unwrap();
    assert!(matches!(pool.alloc_zeroed(), Err(Error::Exhausted { .. })));
    assert!(matches!(pool.alloc(), Err(Error::Exhausted { .. })));
    drop(a);
    let b = pool.alloc_zeroed().unwrap();
    assert!(prezero::is_zero(&b));
}

#[test]
fn no_scrubber_and_zero_watermarks_clear_synchronously() {
    let pool = on_this_node(
        small_pool(2)
            .scrubbers(0)
            .low_watermark(0)
            .high_watermark(0),
    );
    for _ in 0..20 {
        let mut a = pool.alloc_zeroed().unwrap();
        let mut b = pool.alloc_zeroed().unwrap();
        assert!(prezero::is_zero(&a) && prezero::is_zero(&b));
        a.fill(1);
        b.fill(2);
    }
    let s = pool.stats();
    assert_eq!(s.bytes_scrubbed, 0);
    assert!(s.bytes_cleared_hot + s.bytes_cleared_cold > 0);
    assert_eq!(s.scrubber_priority, "none (no scrubber)");
}

#[test]
fn scrubber_prezeroes_freed_chunks() {
    let pool = on_this_node(small_pool(8).hot_window(0));
    let mut held: Vec<_> = (0..8).map(|_| pool.alloc_zeroed().unwrap()).collect();
    for c in &mut held {
        c.fill(0xee);
    }
    drop(held);
    let t = Instant::now();
    while pool.stats().bytes_scrubbed < 8 * CHUNK as u64 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "scrubber never finished: {:?}",
            pool.stats()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let s = pool.stats();
    assert!(balanced(&s));
    assert!(
        s.scrubber_priority.contains("SCHED_IDLE") || s.scrubber_priority.contains("nice"),
        "{}",
        s.scrubber_priority
    );
    let held: Vec<_> = (0..8).map(|_| pool.alloc_zeroed().unwrap()).collect();
    assert!(held.iter().all(|c| prezero::is_zero(c)));
    assert_eq!(
        pool.stats().served_zeroed,
        8,
        "every hand-out should come prezeroed"
    );
}

#[test]
fn alloc_prefers_dirty_chunks() {
    // Kept on its node before the build (no scrubber to start), so the
    // prefilled chunk is placed where it is taken (6.12's 4-node guest moved
    // the thread between the build and the pinning: the chunk was served
    // fresh).
    stay_on_this_node();
    let pool = small_pool(2).scrubbers(0).prefill(1).build().unwrap();
    let mut a = pool.alloc().unwrap(); // the prefilled zeroed chunk: nothing dirty yet
    a.fill(3);
    let a_ptr = a.as_ptr();
    drop(a);
    let b = pool.alloc().unwrap();
    assert_eq!(b.as_ptr(), a_ptr, "alloc() should reuse the dirty chunk");
    assert_eq!(pool.stats().served_unzeroed, 2);
}

#[test]
fn raw_chunks_and_bad_frees() {
    let pool = small_pool(2).build().unwrap();
    let other = small_pool(1).build().unwrap();
    let c = pool.alloc_zeroed().unwrap();
    let p = c.into_raw();
    assert_eq!(pool.stats().raw, 1);
    // Foreign, interior, never-allocated and other-pool pointers are refused.
    let mut local = [0u8; 16];
    assert!(matches!(
        pool.free_raw(local.as_mut_ptr()),
        Err(Error::InvalidArgument(_))
    ));
    // SAFETY: pointer arithmetic inside the chunk, never dereferenced.
    assert!(pool.free_raw(unsafe { p.as_ptr().add(64) }).is_err());
    assert!(other.free_raw(p.as_ptr()).is_err());
    // A chunk still owned by a Chunk value is not the caller's to free raw.
    let owned = pool.alloc_zeroed().unwrap();
    assert!(pool.free_raw(owned.as_ptr() as *mut u8).is_err());
    drop(owned);
    assert_eq!(pool.free_raw(p.as_ptr()).map_err(|e| e.to_string()), Ok(()));
    let e = pool.free_raw(p.as_ptr()).unwrap_err();
    assert!(e.to_string().contains("freed twice"), "{e}");
    assert!(balanced(&pool.stats()));
}

#[test]
fn raw_chunks_outlive_the_pool() {
    let pool = small_pool(1).build().unwrap();
    let p = pool.alloc_zeroed().unwrap().into_raw();
    let c = small_pool(1).build().unwrap().alloc_zeroed().unwrap();
    drop(pool);
    // SAFETY: the raw chunk stays mapped (leaked) after its pool is dropped.
    unsafe { std::ptr::write_bytes(p.as_ptr(), 7, CHUNK) };
    // A Chunk keeps its (dropped) pool's memory alive too.
    assert!(prezero::is_zero(&c));
}

#[test]
fn trim_returns_memory_and_trimmed_chunks_are_not_scrubbed() {
    let pool = on_this_node(small_pool(6).scrubbers(0));
    let mut held: Vec<_> = (0..6).map(|_| pool.alloc_zeroed().unwrap()).collect();
    for c in &mut held {
        c.fill(9);
    }
    drop(held);
    assert_eq!(pool.trim(2 * CHUNK).unwrap(), 4 * CHUNK);
    let s = pool.stats();
    assert_eq!((s.released, s.dirty, s.mapped), (4, 2, 6), "{s:?}");
    assert!(balanced(&s));
    assert_eq!(pool.trim(0).unwrap(), 2 * CHUNK);
    let held: Vec<_> = (0..6).map(|_| pool.alloc_zeroed().unwrap()).collect();
    assert!(held.iter().all(|c| prezero::is_zero(c)));
    let s = pool.stats();
    assert_eq!(s.served_released, 6);
    assert_eq!(
        s.bytes_cleared_hot + s.bytes_cleared_cold + s.bytes_scrubbed,
        0,
        "{s:?}"
    );
}

#[test]
fn alloc_zeroed_timeout_waits_for_a_free() {
    let pool = small_pool(1).build().unwrap();
    let a = pool.alloc_zeroed().unwrap();
    let t = Instant::now();
    assert!(matches!(
        pool.alloc_zeroed_timeout(Duration::from_millis(30)),
        Err(Error::Exhausted { .. })
    ));
    assert!(t.elapsed() >= Duration::from_millis(30));
    std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(a);
        });
        let b = pool.alloc_zeroed_timeout(Duration::from_secs(10)).unwrap();
        assert!(prezero::is_zero(&b));
    });
}

#[test]
fn shutdown_while_the_scrubber_is_mid_chunk() {
    // One large chunk keeps the scrubber busy for a while; dropping the pool must
    // stop it at the next bounded step, and the chunk must not be lost.
    let big = 256 << 20;
    let pool = Pool::builder()
        .backing(PageKind::Base)
        .chunk_size(big)
        .capacity(2 * big)
        .build()
        .unwrap();
    let mut a = pool.alloc_zeroed().unwrap();
    let mut b = pool.alloc_zeroed().unwrap();
    a.fill(1);
    b.fill(1);
    drop(a);
    drop(b); // freed after a hand-out in between: cold, queued for the scrubber
    let t = Instant::now();
    while pool.stats().scrubbing == 0 && t.elapsed() < Duration::from_secs(2) {
        std::hint::spin_loop();
    }
    // Keep both cores busy, as a loaded machine would: the idle-priority
    // scrubber must still stop promptly when the pool goes away.
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..prezero::cpu().logical_cpus {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        std::thread::sleep(Duration::from_millis(50));
        let t = Instant::now();
        drop(pool);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        // Stopping takes one bounded step; unmapping 512 MiB takes the rest.
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "shutdown took {:?}",
            t.elapsed()
        );
    });
}

#[test]
fn verify_mode_catches_a_non_zero_hand_out() {
    let pool = small_pool(1).scrubbers(0).verify(true).build().unwrap();
    let p = pool.alloc_zeroed().unwrap().into_raw();
    pool.free_raw(p.as_ptr()).unwrap();
    pool.trim(0).unwrap(); // now "released": known zero without clearing
                           // A bug elsewhere writes to memory it no longer owns...
                           // SAFETY: the chunk is still mapped; the pool is not touching it.
    unsafe { p.as_ptr().wrapping_add(100).write_volatile(1) };
    // ...and verify mode refuses to hand it out as zero.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.alloc_zeroed().map(drop)
    }));
    let msg = r
        .expect_err("verify mode must panic")
        .downcast::<String>()
        .unwrap();
    assert!(msg.contains("byte 100 non-zero"), "{msg}");
    assert!(balanced(&pool.stats()));
}

#[test]
fn hugetlb_backing_without_pages_is_a_clear_error() {
    let Some(p) = prezero::mm::hugetlb_pool(1 << 30) else {
        prezero_testkit::skip("hugetlb", "no 1 GiB hugetlb pool");
        return;
    };
    if p.free > 0 {
        prezero_testkit::skip(
            "state",
            "1 GiB hugetlb pages are reserved here, cannot test the shortage",
        );
        return;
    }
    let pool = Pool::builder()
        .backing(PageKind::Huge1G)
        .chunk_size(1 << 30)
        .capacity(1 << 30)
        .build()
        .unwrap();
    let e = pool.alloc_zeroed().unwrap_err();
    assert!(matches!(e, Error::HugetlbShortage { .. }), "{e:?}");
    let s = pool.stats();
    assert_eq!((s.mapped, s.in_use), (0, 0), "nothing may leak: {s:?}");
    assert!(prezero::is_zero(&[]));
}

/// Random alloc/free from many threads, every chunk dirtied before it goes back,
/// verify on: no hand-out may ever show a non-zero byte, and the counts balance.
#[test]
fn stress_many_threads_a_million_operations() {
    let ops_total = AtomicUsize::new(0);
    for threads in 1..=8 {
        let pool = Pool::builder()
            .backing(PageKind::Base)
            .chunk_size(4096)
            .capacity(48 * 4096)
            .low_watermark(8)
            .high_watermark(24)
            // Odd runs send every free to the scrubber, even runs reuse hot chunks.
            .hot_window(if threads % 2 == 1 { 0 } else { 16 * 4096 })
            // At normal priority the scrubber races the allocators even on a
            // loaded machine (at SCHED_IDLE it may, correctly, never run).
            .scrub_priority(prezero::ScrubPriority::Normal)
            .verify(true)
            .build()
            .unwrap();
        let per_thread = 1_000_000 / 8 / threads + 1;
        std::thread::scope(|s| {
            for t in 0..threads {
                let pool = &pool;
                let ops_total = &ops_total;
                s.spawn(move || {
                    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64 + 1);
                    let mut held = Vec::new();
                    for _ in 0..per_thread {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let r = rng % 10;
                        if r < 5 || held.is_empty() {
                            let got = if r == 0 {
                                pool.alloc()
                            } else {
                                pool.alloc_zeroed()
                            };
                            match got {
                                Ok(mut c) => {
                                    if r != 0 {
                                        assert!(c[0] == 0 && c[4095] == 0);
                                    }
                                    c.fill((rng >> 8) as u8 | 1);
                                    held.push(c);
                                }
                                Err(Error::Exhausted { .. }) => drop(held.pop()),
                                Err(e) => panic!("{e}"),
                            }
                        } else {
                            let i = (rng >> 16) as usize % held.len();
                            drop(held.swap_remove(i));
                        }
                    }
                    ops_total.fetch_add(per_thread, Ordering::Relaxed);
                });
            }
        });
        let s = pool.stats();
        assert!(balanced(&s), "{s:?}");
        assert_eq!(s.in_use, 0, "{s:?}");
        if threads % 2 == 1 {
            assert!(s.bytes_scrubbed > 0, "the scrubber never ran: {s:?}");
        } else {
            assert!(s.served_hot > 0, "hot reuse never happened: {s:?}");
        }
    }
    assert!(ops_total.load(Ordering::Relaxed) >= 1_000_000);
}

/// Scrubbed chunks held for later are the machine's: marked free
/// (`MADV_FREE`), the kernel may take them back without swap, and a chunk
/// it took (paged out here, as a machine short of memory does) hands out
/// zero all the same.
#[test]
fn scrubbed_chunks_are_memory_the_kernel_can_take_back() {
    const MADV_PAGEOUT: libc::c_int = 21;
    let pool = small_pool(16).hot_window(0).build().unwrap();
    let mut held: Vec<_> = (0..16).map(|_| pool.alloc_zeroed().unwrap()).collect();
    for c in &mut held {
        c.fill(0x5a);
    }
    let spans: Vec<(usize, usize)> = held
        .iter()
        .map(|c| (c.as_ptr() as usize, c.len()))
        .collect();
    drop(held);
    let t = Instant::now();
    while pool.stats().bytes_scrubbed < 16 * CHUNK as u64 {
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", pool.stats());
        std::thread::sleep(Duration::from_millis(1));
    }
    // The kernel marks pages free in per-CPU batches (up to 15 pages may
    // wait), and other tests' memory counts too: at least half this pool's.
    // Under an emulator (qemu-user ignores MADV_FREE) LazyFree says nothing.
    let marked = common::lazy_free();
    if common::lazy_free_shows_madv_free() {
        assert!(marked >= 8 * CHUNK as u64, "LazyFree {marked} bytes");
    } else {
        prezero_testkit::skip(
            "kernel",
            "LazyFree does not show MADV_FREE here (an emulator?)",
        );
    }
    for (p, len) in spans {
        // SAFETY: the pool's own chunks, zero and unused (Zeroed): paging
        // them out only drops clean pages, which read zero after.
        unsafe { libc::madvise(p as *mut libc::c_void, len, MADV_PAGEOUT) };
    }
    let held: Vec<_> = (0..16).map(|_| pool.alloc_zeroed().unwrap()).collect();
    assert!(held.iter().all(|c| prezero::is_zero(c)));
}
