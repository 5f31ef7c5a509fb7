//! NUMA placement of what prezero touches for others: prefault and parallel
//! clear told the node of each part put every page of it there. On a
//! one-node machine these hold trivially; `scripts/guest-tests.sh` runs them
//! in guests of 2 and 4 nodes, where they are the promise.

mod common;

/// Says why a test checks nothing here; in a NUMA guest of
/// `scripts/guest-tests.sh` (`PREZERO_REQUIRE=numa`) that is a failure,
/// whatever the reason (nodes, pages on each).
fn skip(why: &str) {
    prezero_testkit::skip("numa", why);
}

use prezero::numa::{placement, NodePart, Topology};
use prezero::{HugetlbReservation, PageKind, Region};

const MB2: usize = 2 << 20;

/// Nodes with memory and CPUs, in reverse order, so that part `i` of a range
/// is on another node than a plain first touch from the test's thread would
/// give (the parts follow the list, not the CPU the caller is on).
fn nodes() -> Vec<u32> {
    let t = Topology::read();
    let mut v: Vec<u32> = t
        .nodes
        .iter()
        .filter(|n| n.has_memory && !n.cpus.is_empty())
        .map(|n| n.id)
        .collect();
    v.reverse();
    println!("nodes {v:?} of {} online", t.nodes.len());
    v
}

/// The parts tile `len` bytes in the order of `nodes`, and every page of
/// each is on its node.
fn assert_parts_on(ptr: *const u8, len: usize, page: usize, nodes: &[u32], parts: &[NodePart]) {
    assert_eq!(parts.len(), nodes.len(), "{parts:?}");
    let mut at = 0;
    for (part, &node) in parts.iter().zip(nodes) {
        assert_eq!((part.offset, part.node), (at, node), "{parts:?}");
        at += part.len;
        // SAFETY: the part is inside the range of `len` bytes at `ptr`.
        let p = placement(unsafe { ptr.add(part.offset) }, part.len, page).unwrap();
        assert!(p.all_on(node), "{part:?} should be on node {node}: {p:?}");
        println!("{part:?}: {} pages, all on node {node}", p.present());
    }
    assert_eq!(at, len);
}

#[test]
fn prefault_on_nodes_puts_every_page_of_each_part_on_its_node() {
    let nodes = nodes();
    for kind in [PageKind::Base, PageKind::Thp] {
        let region = Region::new(nodes.len() * 8 * MB2, kind).unwrap();
        let parts = prezero::prefault_on_nodes(&region, &nodes, 2 * nodes.len()).unwrap();
        assert_parts_on(region.as_ptr(), region.len(), 4096, &nodes, &parts);
        assert!(region.as_slice().iter().all(|&b| b == 0));
    }
}

#[test]
fn prefault_on_nodes_takes_each_nodes_own_hugetlb_pages() {
    let nodes = nodes();
    if let Some(why) = prezero_testkit::hugetlb_unmappable(MB2) {
        skip(&why);
        return;
    }
    let want: Vec<(u32, usize)> = nodes.iter().map(|&n| (n, 4)).collect();
    let _pages = match HugetlbReservation::ensure_free_on_nodes(MB2, &want) {
        Ok(r) => r,
        Err(e) => {
            skip(&format!(
                "cannot reserve 4 hugetlb pages on every node: {e}"
            ));
            return;
        }
    };
    let region = Region::new(nodes.len() * 4 * MB2, PageKind::Huge2M).unwrap();
    let parts = prezero::prefault_on_nodes(&region, &nodes, nodes.len()).unwrap();
    assert_parts_on(region.as_ptr(), region.len(), MB2, &nodes, &parts);
}

#[test]
fn a_parallel_clear_on_nodes_first_touches_each_part_on_its_node() {
    let nodes = nodes();
    let mut region = Region::new(nodes.len() * 4 * MB2, PageKind::Base).unwrap();
    let parts =
        prezero::clear_parallel_on_nodes(region.as_mut_slice(), &nodes, 2 * nodes.len()).unwrap();
    assert_parts_on(region.as_ptr(), region.len(), 4096, &nodes, &parts);
    // Cleared for real, also memory already dirty (placed where it was).
    region.as_mut_slice().fill(common::DIRTY);
    prezero::clear_parallel_on_nodes(region.as_mut_slice(), &nodes, 1).unwrap();
    assert!(region.as_slice().iter().all(|&b| b == 0));
}

#[test]
fn nodes_that_do_not_exist_and_empty_lists_are_errors() {
    let region = Region::new(MB2, PageKind::Base).unwrap();
    for bad in [&[9999u32][..], &[][..]] {
        assert!(prezero::prefault_on_nodes(&region, bad, 1).is_err());
        let mut buf = vec![1u8; 4096];
        assert!(prezero::clear_parallel_on_nodes(&mut buf, bad, 1).is_err());
    }
    assert!(prezero::prefault_on_nodes(&region, &nodes(), 0).is_err());
    let e = prezero::prefault_on_nodes(&region, &[9999], 1).unwrap_err();
    assert!(e.to_string().contains("9999"), "{e}");
}

/// A pool at capacity, its chunks freed by a thread on one node: a thread on
/// another gets only chunks whose pages are on its own node (another node's
/// chunk has its pages dropped first), every byte zero. No scrubber: a chunk
/// it is scrubbing is not handed out, and at capacity the second thread's
/// fourth chunk was then Exhausted (aarch64 under qemu-user, whose scrubber
/// is slow).
#[test]
fn a_pool_hands_a_thread_only_chunks_of_its_node() {
    let nodes = nodes();
    let (a, b) = (nodes[0], nodes[nodes.len() - 1]);
    let pool = std::sync::Arc::new(
        prezero::Pool::builder()
            .chunk_size(MB2)
            .backing(PageKind::Base)
            .scrubbers(0)
            .capacity(4 * MB2)
            .build()
            .unwrap(),
    );
    let t = Topology::read();
    let on = |node: u32, f: Box<dyn FnOnce() + Send>| {
        let t = t.clone();
        std::thread::spawn(move || {
            prezero::numa::run_on_node(&t, node).unwrap();
            f()
        })
        .join()
        .unwrap()
    };
    let p = pool.clone();
    on(
        a,
        Box::new(move || {
            let mut chunks: Vec<_> = (0..4).map(|_| p.alloc_zeroed().unwrap()).collect();
            for c in &mut chunks {
                c.fill(common::DIRTY);
            }
        }),
    );
    let p = pool.clone();
    on(
        b,
        Box::new(move || {
            let mut chunks: Vec<_> = (0..4).map(|_| p.alloc_zeroed().unwrap()).collect();
            for c in &mut chunks {
                assert!(c.iter().all(|&x| x == 0), "a chunk handed out was not zero");
                c.fill(1);
                let placed = placement(c.as_ptr(), c.len(), 4096).unwrap();
                assert!(placed.all_on(b), "a chunk for node {b}: {placed:?}");
            }
        }),
    );
}

/// Bad input to the calls that place memory: an error that leaves the
/// buffer as it was, an empty buffer is nothing to do, and a thread count no
/// machine has is as many as the pages (it once spun for good).
#[test]
fn placing_calls_take_garbage_calmly() {
    let mut buf = vec![0xaau8; 8192];
    assert!(prezero::clear_parallel_on_nodes(&mut buf, &[9999], 1).is_err());
    assert!(
        buf.iter().all(|&b| b == 0xaa),
        "an error cleared the buffer"
    );
    let node = nodes()[0];
    assert_eq!(
        prezero::clear_parallel_on_nodes(&mut [], &[node], 1).unwrap(),
        vec![]
    );
    let t = std::time::Instant::now();
    prezero::clear_parallel_on_nodes(&mut buf, &[node], usize::MAX).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
    // 16 pages: as many threads as pages is 16, which qemu-user (the aarch64
    // run) starts in time; 4 MiB made it 1024 threads and ten minutes there.
    let region = Region::new(16 * 4096, PageKind::Base).unwrap();
    prezero::prefault_on_nodes(&region, &[node], usize::MAX).unwrap();
    // SAFETY: the region's own range.
    unsafe { prezero::prefault_raw(region.as_ptr(), region.len(), usize::MAX) }.unwrap();
    // A hang guard, not a time to meet.
    assert!(
        t.elapsed() < std::time::Duration::from_secs(300),
        "{:?}",
        t.elapsed()
    );
}
