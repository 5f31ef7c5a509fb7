//! The client's tests: the local file fallback, passing files across `exec`,
//! requests too large to round, and the tiling a daemon's answer must obey.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use super::held::tile;
use super::*;
use crate::SEALS;
use prezero_sys as sys;

const M: u64 = 2 << 20;

/// The descriptor flags (`F_GETFD`): `FD_CLOEXEC` or 0.
fn fd_flags(fd: BorrowedFd<'_>) -> libc::c_int {
    // SAFETY: fcntl(F_GETFD) takes no argument and touches no memory.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) }
}

/// What every local file is: one segment of `len` bytes (the whole file),
/// on `page` pages, sealed, populated with zeros, close-on-exec here.
fn check_local_file(f: &SegmentFiles, len: usize, page: PageKind) {
    assert_eq!((f.len(), f.page()), (len, page));
    let s = f.segments();
    assert_eq!((s.len(), s[0].offset, s[0].len), (1, 0, len));
    let fd = s[0].fd;
    let st = sys::fstat(fd).unwrap();
    assert_eq!(st.st_size as usize, len);
    if page.is_hugetlb() {
        assert_eq!(st.st_blksize as usize, page.page_size());
    }
    assert_eq!(sys::seals(fd).unwrap(), SEALS);
    assert_eq!(fd_flags(fd), libc::FD_CLOEXEC);
    assert!(sys::ftruncate(fd, 0).is_err(), "sealed against shrinking");
    let mut buf = vec![0xa5u8; len];
    let file = std::fs::File::from(fd.try_clone_to_owned().unwrap());
    let n = std::os::unix::fs::FileExt::read_at(&file, &mut buf, 0).unwrap();
    assert_eq!(n, buf.len());
    assert!(prezero::is_zero(&buf));
}

#[test]
fn a_local_hugetlb_file_is_whole_pages_sealed_populated_zero_and_can_be_inherited() {
    let _pages = match prezero::HugetlbReservation::ensure_free(M as usize, 4) {
        Ok(r) => r,
        Err(e) => {
            prezero_testkit::skip(
                "hugetlb",
                format!("the hugetlb local file (cannot reserve four 2 MiB pages: {e})"),
            );
            return;
        }
    };
    // qemu-user reserves the pages but cannot map them.
    let Ok(probe) = sys::mmap_anon(M as usize, libc::MAP_HUGETLB) else {
        prezero_testkit::skip(
            "hugetlb",
            "the hugetlb local file (hugetlb pages cannot be mapped here)",
        );
        return;
    };
    // SAFETY: the probe mapping just made, unused.
    unsafe { sys::munmap(probe, M as usize) }.unwrap();
    let len = 8 << 20;
    let f = local_file(len - 4096, PageKind::Huge2M, 2, "no service".into(), None).unwrap();
    assert_eq!(
        f.source(),
        &Source::Local {
            reason: "no service".into()
        }
    );
    check_local_file(&f, len, PageKind::Huge2M);
    let files = f.into_inherited().unwrap();
    assert_eq!((files.len(), files[0].offset, files[0].len), (1, 0, len));
    assert_eq!(fd_flags(files[0].fd.as_fd()), 0);
}

#[test]
fn a_plain_local_file_is_whole_base_pages_not_hugetlb_pages() {
    // 1 GiB pages are rarely free: then a plain memfd of two base pages
    // serves 4097 bytes, not a 1 GiB one.
    let free = prezero::mm::hugetlb_pool(1 << 30).map_or(0, |p| p.free);
    if free > 0 {
        prezero_testkit::skip(
            "state",
            format!("the plain local file ({free} 1 GiB pages are free)"),
        );
        return;
    }
    let f = local_file(4097, PageKind::Huge1G, 2, "no service".into(), None).unwrap();
    let base = PageKind::Base.page_size();
    check_local_file(&f, 4097usize.next_multiple_of(base), PageKind::Base);
    let Source::Local { reason } = f.source() else {
        panic!("{:?}", f.source())
    };
    assert!(
        reason.starts_with("no service; local 1GB memfd: 1 1GB hugetlb pages needed, 0 free")
            && reason.ends_with("used a plain memfd (base pages)"),
        "{reason}"
    );
}

#[test]
fn pass_to_clears_close_on_exec_in_the_child_only_and_refuses_stale_numbers() {
    let f = local_file(4096, PageKind::Huge1G, 1, "no service".into(), None).unwrap();
    let fd = f.segments()[0].fd.as_raw_fd();
    let mut cmd = std::process::Command::new("sh");
    // readlink, a child of sh, inherits the descriptor too.
    cmd.args(["-c", &format!("readlink /proc/$$/fd/{fd}")]);
    f.pass_to(&mut cmd).unwrap();
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let link = String::from_utf8_lossy(&out.stdout);
    assert!(link.starts_with("/memfd:prezero-local"), "{link}");
    assert_eq!(
        fd_flags(f.segments()[0].fd),
        libc::FD_CLOEXEC,
        "still close-on-exec here"
    );
    // Without the hook the child has no such descriptor.
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("readlink /proc/$$/fd/{fd}")])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    // Once the file is closed the number names nothing, or something else.
    drop(f);
    let e = cmd.output().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{e}");
}

#[test]
fn a_request_whose_rounding_overflows_is_an_error() {
    let client = Client::local("no service");
    for bytes in [usize::MAX, usize::MAX - (M as usize) + 2] {
        let e = client
            .alloc_files(bytes, PageKind::Huge2M, AllocOptions::default())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains(&format!(
                "{bytes} bytes rounded up to whole 2MB pages is more than the address space"
            )),
            "{e}"
        );
        let e = client
            .alloc_with(bytes, PageKind::Huge1G, AllocOptions::default())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("more than the address space"), "{e}");
    }
}

#[test]
fn segments_must_tile_the_request() {
    let m = M as usize;
    assert_eq!(tile(&[M], m, m).unwrap(), vec![(0, m)]);
    assert_eq!(tile(&[4 * M], 3 * m, m).unwrap(), vec![(0, 3 * m)]);
    assert_eq!(
        tile(&[M, M, 4 * M], 4 * m, m).unwrap(),
        vec![(0, m), (m, m), (2 * m, 2 * m)]
    );
    for (lens, len, why) in [
        (&[][..], m, "none"),
        (&[M][..], 2 * m, "cover"),
        (&[M, M, M][..], 2 * m, "more than"),
        (&[4 * M, M][..], 2 * m, "more than"),
        (&[0, M][..], m, "whole pages"),
        (&[M + 4096][..], m, "whole pages"),
        (&[u64::MAX][..], m, "whole pages"),
        (&[M, u64::MAX][..], 2 * m, "whole pages"),
    ] {
        let e = tile(lens, len, m).unwrap_err().to_string();
        assert!(e.contains(why), "{lens:?} for {len}: {e}");
    }
    // Lengths whose sum overflows never wrap into a "cover".
    let huge = (usize::MAX / m * m) as u64;
    assert!(tile(&[huge, huge], m, m).is_err());
}

/// The local fallback for a node puts every page on it, mapped or as a file,
/// whichever node the calling thread runs on.
#[test]
fn a_local_fallback_for_a_node_is_on_that_node() {
    let topology = prezero::numa::Topology::read();
    for node in topology.memory_nodes() {
        let m = local(
            8 << 20,
            PageKind::Huge2M,
            2,
            "no service".into(),
            Some(node),
        )
        .unwrap();
        let p = prezero::numa::placement(m.as_ptr(), m.len(), 4096).unwrap();
        assert!(p.all_on(node), "mapped, node {node}: {p:?}");
        // A plain memfd (1 GiB pages are rarely free) or a hugetlb one.
        let f = local_file(
            4 << 20,
            PageKind::Huge1G,
            2,
            "no service".into(),
            Some(node),
        )
        .unwrap();
        let (fd, len) = (f.segments()[0].fd, f.len());
        let q = sys::mmap_shared_ro(fd, len, libc::MAP_POPULATE).unwrap();
        let p = prezero::numa::placement(q.as_ptr(), len, f.page().page_size());
        // SAFETY: the mapping just made.
        unsafe { sys::munmap(q, len) }.unwrap();
        let p = p.unwrap();
        assert!(p.all_on(node), "file, node {node}: {p:?}");
    }
}

/// A node whose hugetlb pool lacks the pages while another's has them: the
/// kernel, asked to prefer the node, takes them from the other; the local
/// fallback does not hand those out as the node's memory, but THP on it.
#[test]
fn a_local_fallback_never_hands_out_another_nodes_hugetlb_pages() {
    let t = prezero::numa::Topology::read();
    let nodes = t.memory_nodes();
    let [elsewhere, wanted, ..] = nodes[..] else {
        prezero_testkit::skip("numa", "one memory node");
        return;
    };
    let free = |n: u32| {
        prezero::numa::Topology::read()
            .node(n)
            .and_then(|n| n.hugetlb.iter().find(|h| h.page_size == M as usize))
            .map_or(0, |h| h.free)
    };
    let _held = match prezero::HugetlbReservation::ensure_free_on_nodes(
        M as usize,
        &[(elsewhere, free(elsewhere) + 4)],
    ) {
        Ok(r) => r,
        Err(e) => {
            prezero_testkit::skip(
                "hugetlb",
                format!("cannot reserve 4 hugetlb pages on node {elsewhere}: {e}"),
            );
            return;
        }
    };
    let short = free(wanted) < 4;
    let m = local(
        8 << 20,
        PageKind::Huge2M,
        2,
        "no service".into(),
        Some(wanted),
    )
    .unwrap();
    let p = prezero::numa::placement(m.as_ptr(), m.len(), 4096).unwrap();
    assert!(p.all_on(wanted), "node {wanted}: {p:?}");
    let Source::Local { reason } = m.source() else {
        panic!("not local")
    };
    if short {
        assert!(reason.contains("used THP"), "{reason}");
    }
}
