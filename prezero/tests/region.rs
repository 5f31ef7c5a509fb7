//! Regions of every page kind, prefault, and hugetlb reservations.

mod common;

use prezero::{Error, HugetlbReservation, PageKind, Region};

const MB2: usize = 2 << 20;
const GB1: usize = 1 << 30;

/// Whether any page of `[start, start+len)` is mapped, probing every `step`
/// bytes: mincore fails with ENOMEM on an unmapped page. (Not /proc/self/maps:
/// qemu-user rebuilds that from the host's, and while another thread maps or
/// unmaps it can leave a mapping out.)
fn mapped(start: usize, len: usize, step: usize) -> bool {
    (start..start + len).step_by(step).any(|p| {
        let mut v = 0u8;
        // SAFETY: one byte for the one page asked about; the kernel validates
        // the address and writes nothing else.
        unsafe { libc::mincore(p as *mut libc::c_void, 1, &mut v) == 0 }
    })
}

fn resident(ptr: *mut u8, len: usize) -> usize {
    let mut v = vec![0u8; len.div_ceil(4096)];
    // SAFETY: v has a byte per page; the kernel validates the range.
    assert_eq!(unsafe { libc::mincore(ptr.cast(), len, v.as_mut_ptr()) }, 0);
    v.iter().filter(|&&b| b & 1 != 0).count()
}

/// Serialises this file's tests: those that read or change hugetlb pool
/// counts, and those that check an address is unmapped after a drop (another
/// test's mapping could take the address meanwhile: seen in a 3-node guest).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reserves `pages` hugetlb pages for the test, or says why not (also when
/// they could not be mapped anyway). Call with `serial` held.
fn reserve(page_size: usize, pages: usize) -> Option<HugetlbReservation> {
    if prezero::mm::hugetlb_pool(page_size).is_some() {
        if let Some(why) = prezero_testkit::hugetlb_unmappable(page_size) {
            prezero_testkit::skip("hugetlb", why);
            return None;
        }
    }
    match HugetlbReservation::ensure_free(page_size, pages) {
        Ok(r) => Some(r),
        Err(e) => {
            prezero_testkit::skip(
                "hugetlb",
                format!(
                    "cannot reserve {pages} hugetlb pages of {} KiB: {e}",
                    page_size / 1024
                ),
            );
            None
        }
    }
}

fn check_region(kind: PageKind, size: usize, rounded: usize) {
    let mut r = Region::new(size, kind).unwrap();
    assert_eq!(r.len(), rounded, "{kind} {size}");
    assert_eq!(r.kind(), kind);
    let (start, len) = (r.as_ptr() as usize, r.len());
    assert_eq!(
        start % kind.page_size(),
        0,
        "{kind} region not aligned to its pages"
    );
    assert!(
        prezero::is_zero(r.as_slice()),
        "fresh {kind} region not zero"
    );
    r.as_mut_slice().fill(0x5a);
    assert!(r.as_slice().iter().all(|&b| b == 0x5a));
    // A hugetlb page is mapped or unmapped whole.
    let step = if kind.is_hugetlb() {
        kind.page_size()
    } else {
        PageKind::Base.page_size()
    };
    assert!(mapped(start, len, step));
    drop(r);
    // Mapped again may be another thread's new mapping in the hole the drop
    // left (a thread libtest spawns, in the 3-node guest): the region is
    // still there only if its bytes are.
    assert!(
        !(mapped(start, len, step) && still_holds(start, len, 0x5a)),
        "{kind} region still mapped after drop"
    );
}

/// Whether the first and last 4 KiB at `start..start + len` can be read and
/// are all `byte`, read without touching the address space (a range that is
/// someone else's now may not be readable).
fn still_holds(start: usize, len: usize, byte: u8) -> bool {
    [start, start + len - 4096].iter().all(|&at| {
        let mut buf = [0u8; 4096];
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: buf.len(),
        };
        let me = std::process::id() as libc::pid_t;
        // SAFETY: writes into `buf` only; the remote side is read by the
        // kernel, which fails the call rather than fault on a bad address.
        let n = unsafe { libc::process_vm_readv(me, &local, 1, &remote, 1, 0) };
        n == 4096 && buf.iter().all(|&b| b == byte)
    })
}

#[test]
fn base_and_thp_regions() {
    let _serial = serial();
    check_region(PageKind::Base, 1, 4096);
    check_region(PageKind::Base, 4096 * 3 + 1, 4096 * 4);
    check_region(PageKind::Thp, 1, MB2);
    check_region(PageKind::Thp, 3 * MB2 - 7, 3 * MB2);
}

#[test]
fn hugetlb_2m_regions() {
    let _serial = serial();
    let Some(_r) = reserve(MB2, 3) else { return };
    check_region(PageKind::Huge2M, 1, MB2);
    check_region(PageKind::Huge2M, 2 * MB2 + 1, 3 * MB2);
}

#[test]
fn hugetlb_1g_regions() {
    let _serial = serial();
    let Some(_r) = reserve(GB1, 1) else { return };
    check_region(PageKind::Huge1G, 12345, GB1);
}

#[test]
fn bad_sizes_are_errors() {
    let _serial = serial();
    for kind in PageKind::ALL {
        assert!(
            matches!(Region::new(0, kind), Err(Error::InvalidArgument(_))),
            "{kind}"
        );
        assert!(Region::new(usize::MAX - 5, kind).is_err(), "{kind}");
    }
}

/// The process's hugetlb mappings: not all its mappings, which the threads
/// libtest starts meanwhile add to (a stack, a malloc arena: a 4-node guest
/// saw more than two).
fn hugetlb_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("anon_hugepage"))
        .count()
}

#[test]
fn hugetlb_shortage_is_a_clear_error_and_leaks_nothing() {
    let _serial = serial();
    for kind in [PageKind::Huge2M, PageKind::Huge1G] {
        let Some(pool) = prezero::mm::hugetlb_pool(kind.page_size()) else {
            prezero_testkit::skip("hugetlb", format!("no hugetlb pool for {kind}"));
            continue;
        };
        let maps_before = hugetlb_mappings();
        let e = Region::new((pool.free + 1) * kind.page_size(), kind).unwrap_err();
        match &e {
            Error::HugetlbShortage {
                needed,
                reserve_cmd,
                ..
            } => {
                assert_eq!(*needed, pool.free + 1);
                assert!(reserve_cmd.contains("nr_hugepages"), "{reserve_cmd}");
            }
            other => panic!("{kind}: expected HugetlbShortage, got {other:?}"),
        }
        assert!(e.to_string().contains("reserve more with"));
        assert_eq!(
            hugetlb_mappings(),
            maps_before,
            "a failed hugetlb region left a mapping behind"
        );
    }
}

#[test]
fn prefault_populates_every_page_with_any_thread_count() {
    let _serial = serial();
    for threads in 1..=4 {
        for pages in [1, 7, 37, 1001] {
            let r = Region::new(pages * 4096, PageKind::Base).unwrap();
            assert_eq!(resident(r.as_ptr(), r.len()), 0);
            assert_eq!(prezero::prefault(&r, threads).unwrap(), r.len());
            assert_eq!(
                resident(r.as_ptr(), r.len()),
                pages,
                "{pages} pages, {threads} threads"
            );
            assert!(prezero::is_zero(r.as_slice()));
        }
        let r = Region::new(5 * MB2, PageKind::Thp).unwrap();
        prezero::prefault(&r, threads).unwrap();
        assert_eq!(resident(r.as_ptr(), r.len()), r.len() / 4096);
    }
}

#[test]
fn prefault_raw_keeps_contents_and_covers_partial_pages() {
    let _serial = serial();
    let mut r = Region::new(20 * 4096, PageKind::Base).unwrap();
    r.as_mut_slice()[5 * 4096 + 9] = 7;
    // SAFETY: the range lies inside the region.
    let n = unsafe { prezero::prefault_raw(r.as_ptr().wrapping_add(100), 19 * 4096, 3) }.unwrap();
    assert!(n >= 19 * 4096);
    assert_eq!(resident(r.as_ptr(), r.len()), 20);
    assert_eq!(r.as_slice()[5 * 4096 + 9], 7);
}

#[test]
fn prefault_of_unmapped_or_protected_memory_is_an_error() {
    let _serial = serial();
    // Below mmap_min_addr nothing can ever be mapped.
    // SAFETY: the kernel validates the range; nothing is written.
    let e = unsafe { prezero::prefault_raw(0x1000 as *mut u8, 4 * 4096, 2) }.unwrap_err();
    assert!(matches!(e, Error::Os { .. }), "{e:?}");
    let r = Region::new(4 * 4096, PageKind::Base).unwrap();
    // SAFETY: r's mapping is ours and nothing borrows it mutably; after this
    // it is read-only, and nothing writes to it.
    let rc = unsafe { libc::mprotect(r.as_ptr().cast(), r.len(), libc::PROT_READ) };
    assert_eq!(rc, 0);
    // SAFETY: the range is mapped (read-only); prefault must refuse, not crash.
    assert!(unsafe { prezero::prefault_raw(r.as_ptr(), r.len(), 1) }.is_err());
    assert!(matches!(
        prezero::prefault(&r, 0),
        Err(Error::InvalidArgument(_))
    ));
    // Found by the fuzz target `ffi` (pz_prefault): a length running past the
    // end of the address space overflowed the rounding to whole pages (a
    // panic, stopped at the C boundary as -ENOTRECOVERABLE).
    for len in [usize::MAX, usize::MAX - r.as_ptr() as usize + 1] {
        // SAFETY: refused before the kernel sees it.
        let e = unsafe { prezero::prefault_raw(r.as_ptr(), len, 1) }.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{len}: {e:?}");
    }
    // SAFETY: as above, or refused by the kernel (not mapped).
    assert!(unsafe { prezero::prefault_raw(r.as_ptr(), 1 << 63, 1) }.is_err());
}

#[test]
fn prefault_hugetlb_2m() {
    let _serial = serial();
    let Some(_r) = reserve(MB2, 5) else { return };
    for threads in 1..=3 {
        let r = Region::new(5 * MB2, PageKind::Huge2M).unwrap();
        assert_eq!(prezero::prefault(&r, threads).unwrap(), 5 * MB2);
        assert!(prezero::is_zero(r.as_slice()));
        drop(r);
    }
}

#[test]
fn a_reservation_is_restored_even_when_the_work_fails() {
    let _serial = serial();
    let Some(before) = prezero::mm::hugetlb_pool(MB2) else {
        prezero_testkit::skip("hugetlb", "no 2 MiB hugetlb pool");
        return;
    };
    if let Some(why) = prezero_testkit::hugetlb_unmappable(MB2) {
        prezero_testkit::skip("hugetlb", why);
        return;
    }
    let work = || -> prezero::Result<()> {
        let r = HugetlbReservation::ensure_free(MB2, before.free + 2)?;
        let region = Region::new(2 * MB2, PageKind::Huge2M)?;
        prezero::prefault(&region, 1)?;
        assert!(
            prezero::mm::hugetlb_pool(MB2).unwrap().total > r.previous_total() || before.free >= 2
        );
        Err(Error::InvalidArgument("injected failure".into()))
    };
    match work() {
        Err(Error::InvalidArgument(m)) => assert_eq!(m, "injected failure"),
        Err(e) => {
            prezero_testkit::skip("hugetlb", format!("cannot reserve hugetlb pages here: {e}"));
            return;
        }
        Ok(()) => unreachable!(),
    }
    // The region and the reservation are gone; the pool is back where it was.
    assert_eq!(prezero::mm::hugetlb_pool(MB2).unwrap().total, before.total);
}

/// The other process of the next test, which runs it (ignored otherwise: it
/// is no test by itself): reserves two pages more than are free, says so,
/// and drops them when its stdin closes.
#[test]
#[ignore = "the second process of reservations_of_two_processes_do_not_undo_each_other"]
fn other_process_holding_a_reservation() {
    let _serial = serial();
    if std::env::var_os("PREZERO_TEST_HOLD_HUGETLB").is_none() {
        return;
    }
    let free = prezero::mm::hugetlb_pool(MB2).unwrap().free;
    let r = HugetlbReservation::ensure_free(MB2, free + 2).unwrap();
    println!("held {}", r.previous_total());
    let _ = std::io::Read::read(&mut std::io::stdin(), &mut [0u8; 1]);
}

/// Two processes reserve, the first to reserve gives back first: each gives
/// back only what it added (writing back the size it found would take the
/// other's pages, then leave two behind for good).
#[test]
fn reservations_of_two_processes_do_not_undo_each_other() {
    use std::io::BufRead;
    let _serial = serial();
    let Some(before) = prezero::mm::hugetlb_pool(MB2) else {
        prezero_testkit::skip("hugetlb", "no 2 MiB hugetlb pool");
        return;
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        prezero_testkit::skip("root", "reserving hugetlb pages needs root");
        return;
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "other_process_holding_a_reservation",
            "--ignored",
            "--nocapture",
        ])
        .env("PREZERO_TEST_HOLD_HUGETLB", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("held") {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            prezero_testkit::skip("state", "the other process could not reserve two pages");
            let _ = child.wait();
            return;
        }
    }
    let theirs = prezero::mm::hugetlb_pool(MB2).unwrap();
    match HugetlbReservation::ensure_free(MB2, theirs.free + 2) {
        Ok(mine) => {
            drop(child.stdin.take());
            assert!(child.wait().unwrap().success());
            let after_theirs = prezero::mm::hugetlb_pool(MB2).unwrap();
            assert_eq!(after_theirs.total, before.total + 2, "mine stay");
            assert!(after_theirs.free >= before.free + 2, "{after_theirs:?}");
            drop(mine);
        }
        Err(e) => {
            drop(child.stdin.take());
            let _ = child.wait();
            prezero_testkit::skip(
                "hugetlb",
                format!("cannot reserve two more hugetlb pages: {e}"),
            );
        }
    }
    assert_eq!(prezero::mm::hugetlb_pool(MB2).unwrap().total, before.total);
}

/// Each node's own pool grows by what that node lacks, and only by that; the
/// pages mapped under a thread on the node come from it; all goes back.
#[test]
fn a_reservation_on_every_node_grows_each_nodes_pool_and_gives_it_back() {
    let _serial = serial();
    let topology = prezero::numa::Topology::read();
    let nodes: Vec<u32> = topology.memory_nodes();
    let before: Vec<_> = nodes
        .iter()
        .map(|&n| {
            topology
                .node(n)
                .unwrap()
                .hugetlb
                .iter()
                .find(|p| p.page_size == MB2)
                .copied()
        })
        .collect();
    if before.iter().any(Option::is_none) {
        prezero_testkit::skip("kernel", "no per-node 2 MiB hugetlb pool in sysfs");
        return;
    }
    if let Some(why) = prezero_testkit::hugetlb_unmappable(MB2) {
        prezero_testkit::skip("hugetlb", why);
        return;
    }
    let want: Vec<(u32, usize)> = nodes
        .iter()
        .zip(&before)
        .map(|(&n, b)| (n, b.unwrap().free + 2))
        .collect();
    let r = match HugetlbReservation::ensure_free_on_nodes(MB2, &want) {
        Ok(r) => r,
        Err(e) => {
            prezero_testkit::skip(
                "hugetlb",
                format!("cannot reserve 2 pages more on every node: {e}"),
            );
            return;
        }
    };
    let now = prezero::numa::Topology::read();
    for (&(n, pages), b) in want.iter().zip(&before) {
        let p = now
            .node(n)
            .unwrap()
            .hugetlb
            .iter()
            .find(|p| p.page_size == MB2)
            .unwrap();
        assert!(p.free >= pages, "node {n}: {p:?}");
        assert_eq!(
            p.total,
            b.unwrap().total + 2,
            "node {n} grew by its shortfall"
        );
    }
    drop(r);
    let after = prezero::numa::Topology::read();
    for (&n, b) in nodes.iter().zip(&before) {
        let p = after
            .node(n)
            .unwrap()
            .hugetlb
            .iter()
            .find(|p| p.page_size == MB2)
            .unwrap();
        assert_eq!(p.total, b.unwrap().total, "node {n} given back");
    }
    let bad = HugetlbReservation::ensure_free_on_nodes(MB2, &[(9999, 1)]).unwrap_err();
    assert!(bad.to_string().contains("node 9999"), "{bad}");
}
