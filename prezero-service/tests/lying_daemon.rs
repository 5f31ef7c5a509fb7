//! The client against a daemon that lies: every field of an `ALLOC` answer
//! (counts, lengths, the files themselves, the sequence number) is checked,
//! refused with an error by `alloc_with` and `alloc_files` alike, given back
//! (RELEASE) when it got past the exchange, and nothing of it stays mapped or
//! open. The client must never map past its reservation or hand on a file
//! that could end early (SIGBUS) or cannot be mapped writable. One test, so
//! no other test maps or opens memfds meanwhile.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use prezero::{HugetlbReservation, PageKind};
use prezero_service::protocol::{self, Reply, Request, SegmentRecord};
use prezero_service::{AllocOptions, Client, NodeChoice, Source};
use prezero_testkit::TempDir;

const M: usize = 2 << 20;
const U: u64 = M as u64;

/// What the fake daemon answers one `ALLOC` with.
struct Lie {
    /// Segment records and the descriptors sent with them.
    records: Vec<(u64, OwnedFd)>,
    /// Extra descriptors sent with no record.
    extra_fds: Vec<OwnedFd>,
    /// Answer under another sequence number.
    wrong_seq: bool,
    /// The NUMA node the answer names.
    node: Option<u32>,
}

/// The seals the daemon's segments carry.
const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

fn memfd(hugetlb: bool, size: usize, seals: libc::c_int) -> OwnedFd {
    let name = CString::new("prezero-lie").unwrap();
    let flags =
        libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING | if hugetlb { libc::MFD_HUGETLB } else { 0 };
    // SAFETY: a fresh memfd; the name is NUL-terminated.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: the descriptor was just created and is ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate on our own descriptor.
    let r = unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) };
    assert_eq!(r, 0);
    if seals != 0 {
        // SAFETY: fcntl on our own descriptor.
        let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) };
        let e = std::io::Error::last_os_error();
        assert_eq!(r, 0, "F_ADD_SEALS {seals:#x}: {e}");
    }
    fd
}

/// A new open file description of `fd`'s file, opened `O_RDONLY` or `O_WRONLY`.
fn reopen(fd: OwnedFd, access: libc::c_int) -> OwnedFd {
    let f = std::fs::OpenOptions::new()
        .read(access == libc::O_RDONLY)
        .write(access == libc::O_WRONLY)
        .custom_flags(libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .unwrap();
    f.into()
}

fn pipe_end() -> OwnedFd {
    let mut p = [0; 2];
    // SAFETY: pipe writes two descriptors into the array.
    assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
    // SAFETY: ours, dropped at once.
    drop(unsafe { OwnedFd::from_raw_fd(p[1]) });
    // SAFETY: ours.
    unsafe { OwnedFd::from_raw_fd(p[0]) }
}

fn seqpacket() -> OwnedFd {
    // SAFETY: socket() has no memory-safety preconditions.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn listen_at(path: &Path) -> OwnedFd {
    let sock = seqpacket();
    // SAFETY: a zeroed sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, &s) in addr
        .sun_path
        .iter_mut()
        .zip(path.to_str().unwrap().as_bytes())
    {
        *d = s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    let at = (&addr as *const libc::sockaddr_un).cast();
    // SAFETY: a sockaddr_un of `len` bytes on the stack; the path fits (a
    // short temp path).
    assert_eq!(unsafe { libc::bind(sock.as_raw_fd(), at, len) }, 0);
    // SAFETY: listen on our own socket.
    assert_eq!(unsafe { libc::listen(sock.as_raw_fd(), 8) }, 0);
    sock
}

/// Serves one connection: answers its ALLOC with `lie`, its RELEASEs honestly;
/// the ids released, in order, once the client hangs up.
fn serve_one(listener: &OwnedFd, lie: Lie) -> Vec<u64> {
    // SAFETY: accept on our listening socket.
    let c = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC,
        )
    };
    assert!(c >= 0);
    // SAFETY: a fresh descriptor.
    let conn = unsafe { OwnedFd::from_raw_fd(c) };
    let mut buf = vec![0u8; protocol::MAX_MESSAGE + 1];
    let mut lie = Some(lie);
    let mut released = Vec::new();
    loop {
        let got = match protocol::recv(conn.as_fd(), &mut buf, 0) {
            Ok(g) if g.len > 0 => g,
            _ => return released,
        };
        let Ok((seq, req)) = Request::decode(&buf[..got.len]) else {
            return released;
        };
        match req {
            Request::Alloc { .. } => {
                let l = lie.take().expect("one ALLOC per connection");
                let (lens, fds): (Vec<u64>, Vec<OwnedFd>) = l.records.into_iter().unzip();
                let reply = Reply::Alloc {
                    total: lens.len() as u32,
                    first: 0,
                    segments: lens
                        .iter()
                        .enumerate()
                        .map(|(i, &len)| SegmentRecord {
                            id: i as u64 + 1,
                            len,
                        })
                        .collect(),
                    node: l.node,
                };
                let all: Vec<_> = fds.iter().chain(&l.extra_fds).map(|f| f.as_fd()).collect();
                let seq = if l.wrong_seq { seq + 99 } else { seq };
                protocol::send(conn.as_fd(), &reply.encode(seq), &all).unwrap();
            }
            Request::Release { ids } => {
                let r = Reply::Released {
                    count: ids.len() as u32,
                };
                released.extend(ids);
                let _ = protocol::send(conn.as_fd(), &r.encode(seq), &[]);
            }
            _ => return released,
        }
    }
}

/// Mappings of memfds in this process: what a refused answer must not leave.
fn memfd_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("/memfd:"))
        .count()
}

/// Descriptors of the fake daemon's memfds open in this process: what the
/// client must not keep of a refused answer, or of one it was done with.
fn lie_fds() -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|l| l.to_string_lossy().into_owned())
        .filter(|l| l.starts_with("/memfd:prezero-lie"))
        .collect()
}

fn lie(records: Vec<(u64, OwnedFd)>) -> Lie {
    Lie {
        records,
        extra_fds: vec![],
        wrong_seq: false,
        node: None,
    }
}

fn huge(size: usize) -> OwnedFd {
    memfd(true, size, SEALS)
}

/// Every lie: (name, bytes asked for, the answer (made when used, so that no
/// other lie's files are open meanwhile), what the error says, whether it gets
/// past the exchange, so its segments must be released).
type LieCase = (&'static str, usize, fn() -> Lie, &'static str, bool);

fn lies() -> Vec<LieCase> {
    vec![
        // Refused as it is read: every message of an answer brings a segment.
        (
            "no segments",
            4 * M,
            || lie(vec![]),
            "without a segment",
            false,
        ),
        (
            "too many",
            M,
            || lie(vec![(U, huge(M)), (U, huge(M)), (U, huge(M))]),
            "more than",
            true,
        ),
        ("too few", 4 * M, || lie(vec![(U, huge(M))]), "cover", true),
        (
            "ragged length",
            4 * M,
            || lie(vec![(4 * U + 4096, huge(4 * M))]),
            "whole pages",
            true,
        ),
        (
            "file shorter than its record",
            4 * M,
            || lie(vec![(4 * U, huge(M))]),
            "record says",
            true,
        ),
        (
            "record shorter than the request",
            4 * M,
            || lie(vec![(U, huge(M)), (U, huge(M))]),
            "cover",
            true,
        ),
        (
            "not hugetlb",
            4 * M,
            || lie(vec![(4 * U, memfd(false, 4 * M, SEALS))]),
            "pages",
            true,
        ),
        (
            "not sealed",
            4 * M,
            || lie(vec![(4 * U, memfd(true, 4 * M, 0))]),
            "sealed against shrinking",
            true,
        ),
        (
            "sealed against writing",
            4 * M,
            || {
                lie(vec![(
                    4 * U,
                    memfd(true, 4 * M, SEALS | libc::F_SEAL_WRITE),
                )])
            },
            "sealed against writing",
            true,
        ),
        (
            "sealed against future writes",
            4 * M,
            || {
                lie(vec![(
                    4 * U,
                    memfd(true, 4 * M, SEALS | libc::F_SEAL_FUTURE_WRITE),
                )])
            },
            "sealed against writing",
            true,
        ),
        (
            "read-only",
            4 * M,
            || lie(vec![(4 * U, reopen(huge(4 * M), libc::O_RDONLY))]),
            "not open read-write",
            true,
        ),
        (
            "write-only",
            4 * M,
            || lie(vec![(4 * U, reopen(huge(4 * M), libc::O_WRONLY))]),
            "not open read-write",
            true,
        ),
        (
            "a pipe",
            4 * M,
            || lie(vec![(4 * U, pipe_end())]),
            "regular file",
            true,
        ),
        (
            "more descriptors than records",
            4 * M,
            || Lie {
                records: vec![(4 * U, huge(4 * M))],
                extra_fds: vec![huge(M)],
                wrong_seq: false,
                node: None,
            },
            "disagree",
            false,
        ),
        (
            "answer to another request",
            4 * M,
            || Lie {
                records: vec![(4 * U, huge(4 * M))],
                extra_fds: vec![],
                wrong_seq: true,
                node: None,
            },
            "another request",
            false,
        ),
    ]
}

/// The fake daemon, one connection at a time.
struct Fake {
    /// Holds the socket; removed when the test ends, pass or fail.
    _dir: TempDir,
    path: std::path::PathBuf,
    listener: OwnedFd,
}

impl Fake {
    /// Answers the next connection's ALLOC with `lie`; `talk` runs the
    /// client (it must drop it); the ids released. Afterwards nothing of the
    /// daemon's memfds is open here.
    fn serve(&self, lie: Lie, talk: impl FnOnce(Client)) -> Vec<u64> {
        let daemon = {
            let l = self.listener.try_clone().unwrap();
            std::thread::spawn(move || serve_one(&l, lie))
        };
        talk(Client::connect(&self.path).unwrap());
        daemon.join().unwrap()
    }
}

const NO_FALLBACK: AllocOptions = AllocOptions {
    fallback: false,
    populate_threads: 1,
    node: NodeChoice::Any,
    other_nodes: false,
};

#[test]
fn a_lying_daemon_is_refused_and_leaves_nothing_mapped() {
    let dir = TempDir::new("lying-daemon");
    let fake = Fake {
        path: dir.join("s"),
        listener: listen_at(&dir.join("s")),
        _dir: dir,
    };
    let before = memfd_mappings();
    let mut refusals = Vec::new();
    for files in [false, true] {
        let api = if files { "alloc_files" } else { "alloc_with" };
        for (name, bytes, lie, want, past_exchange) in lies() {
            let lie = lie();
            let n = lie.records.len() as u64;
            let mut e = String::new();
            let released = fake.serve(lie, |client| {
                let r = if files {
                    client
                        .alloc_files(bytes, PageKind::Huge2M, NO_FALLBACK)
                        .err()
                } else {
                    client
                        .alloc_with(bytes, PageKind::Huge2M, NO_FALLBACK)
                        .err()
                };
                e = r
                    .unwrap_or_else(|| panic!("{api}, {name}: a lie was believed"))
                    .to_string();
            });
            assert!(e.contains(want), "{api}, {name}: {e}");
            let want_released: Vec<u64> = if past_exchange {
                (1..=n).collect()
            } else {
                vec![]
            };
            assert_eq!(released, want_released, "{api}, {name}: released");
            assert_eq!(
                memfd_mappings(),
                before,
                "{api}, {name}: a refused segment stayed mapped"
            );
            assert_eq!(lie_fds(), Vec::<String>::new(), "{api}, {name}: left open");
            refusals.push((name, e));
        }
    }
    // Both APIs refuse each lie in the same words.
    let (with, files) = refusals.split_at(refusals.len() / 2);
    assert_eq!(with, files);

    // The truth as files: a segment longer than the request, covering it; no
    // hugetlb pages needed, as nothing is mapped. Dropped, it is released.
    let released = fake.serve(lie(vec![(4 * U, huge(4 * M))]), |client| {
        let f = client
            .alloc_files(3 * M, PageKind::Huge2M, NO_FALLBACK)
            .unwrap();
        assert_eq!((f.len(), f.page()), (3 * M, PageKind::Huge2M));
        assert_eq!(
            f.source(),
            &Source::Service {
                segments: 1,
                segment_size: 4 * M,
                node: None,
            }
        );
        let segs = f.segments();
        assert!(segs.len() == 1 && segs[0].offset == 0 && segs[0].len == 3 * M);
        drop(segs);
        drop(f);
        drop(client);
    });
    assert_eq!(released, vec![1], "dropping SegmentFiles releases");
    assert_eq!(lie_fds(), Vec::<String>::new());

    // Passed to a child: inherited there only; released once dropped here.
    let released = fake.serve(lie(vec![(4 * U, huge(4 * M))]), |client| {
        let f = client
            .alloc_files(3 * M, PageKind::Huge2M, NO_FALLBACK)
            .unwrap();
        let fd = f.segments()[0].fd.as_raw_fd();
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", &format!("test -e /proc/$$/fd/{fd}")]);
        f.pass_to(&mut cmd).unwrap();
        assert!(cmd.status().unwrap().success(), "not inherited");
        drop(f);
        drop(client);
    });
    assert_eq!(released, vec![1], "pass_to leaves the release to the drop");
    assert_eq!(lie_fds(), Vec::<String>::new());

    // Given up for exec: close-on-exec cleared at once, and no RELEASE (the
    // connection's close at exec gives the segments back).
    let mut inherited = Vec::new();
    let released = fake.serve(lie(vec![(4 * U, huge(4 * M))]), |client| {
        let f = client
            .alloc_files(3 * M, PageKind::Huge2M, NO_FALLBACK)
            .unwrap();
        inherited = f.into_inherited().unwrap();
        drop(client);
    });
    assert_eq!(
        released,
        Vec::<u64>::new(),
        "into_inherited sends no RELEASE"
    );
    assert_eq!(inherited.len(), 1);
    assert_eq!((inherited[0].offset, inherited[0].len), (0, 3 * M));
    // SAFETY: F_GETFD only reads the flags of a descriptor `inherited` holds open.
    let flags = unsafe { libc::fcntl(inherited[0].fd.as_raw_fd(), libc::F_GETFD) };
    assert_eq!(flags, 0);
    drop(inherited);
    assert_eq!(lie_fds(), Vec::<String>::new());

    // The truth mapped: a segment longer than the request, mapped in part
    // (three free 2 MiB pages).
    match HugetlbReservation::ensure_free(M, 3) {
        Err(e) => prezero_testkit::skip(
            "hugetlb",
            format!("the honest answer mapped (no hugetlb pages: {e})"),
        ),
        Ok(_reservation) if prezero_testkit::hugetlb_unmappable(M).is_some() => {
            prezero_testkit::skip(
                "hugetlb",
                format!(
                    "the honest answer mapped ({})",
                    prezero_testkit::hugetlb_unmappable(M).unwrap_or_default()
                ),
            )
        }
        Ok(_reservation) => {
            let released = fake.serve(lie(vec![(4 * U, huge(4 * M))]), |client| {
                let mem = client
                    .alloc_with(3 * M, PageKind::Huge2M, NO_FALLBACK)
                    .unwrap();
                assert_eq!(mem.len(), 3 * M);
                assert!(prezero::is_zero(mem.as_slice()));
                let segs = mem.segments();
                assert!(segs.len() == 1 && segs[0].offset == 0 && segs[0].len == 3 * M);
                drop(segs);
                drop(mem);
                drop(client);
            });
            assert_eq!(released, vec![1]);
            assert_eq!(memfd_mappings(), before);
            assert_eq!(lie_fds(), Vec::<String>::new());
        }
    }
    node_lies(&fake, before);
}

/// An answer naming a node the request did not, none to a request that
/// did, or another than asked; and (with two nodes) one naming the node
/// asked for whose pages are on another: each refused and released, by both
/// APIs, with nothing left mapped.
fn node_lies(fake: &Fake, before: usize) {
    let on0 = AllocOptions {
        node: NodeChoice::Node(0),
        ..NO_FALLBACK
    };
    let cases = [
        (
            "a node not asked for",
            NO_FALLBACK,
            Some(0),
            "one not asked for",
        ),
        ("no node when one was asked", on0, None, "one not asked for"),
        ("another node", on0, Some(1), "not 0 as asked"),
    ];
    for files in [false, true] {
        for (name, opts, node, want) in cases {
            let mut e = String::new();
            let released = fake.serve(
                Lie {
                    node,
                    ..lie(vec![(4 * U, huge(4 * M))])
                },
                |client| {
                    e = if files {
                        client.alloc_files(3 * M, PageKind::Huge2M, opts).err()
                    } else {
                        client.alloc_with(3 * M, PageKind::Huge2M, opts).err()
                    }
                    .unwrap_or_else(|| panic!("{name}: a lie was believed"))
                    .to_string();
                },
            );
            assert!(e.contains(want), "{name}: {e}");
            assert_eq!(released, vec![1], "{name}: released");
            assert_eq!(memfd_mappings(), before, "{name}: left mapped");
            assert_eq!(lie_fds(), Vec::<String>::new(), "{name}: left open");
        }
    }
    // Pages on node 0 said to be on node 1: the kernel tells.
    let t = prezero::numa::Topology::read();
    if !t.memory_nodes().starts_with(&[0, 1]) {
        prezero_testkit::skip(
            "numa",
            "pages on one node said to be on another (needs NUMA nodes 0 and 1)",
        );
        return;
    }
    let _pages = match HugetlbReservation::ensure_free_on_nodes(M, &[(0, 2), (1, 2)]) {
        Ok(r) => r,
        Err(e) => {
            prezero_testkit::skip(
                "hugetlb",
                format!("pages on one node said to be on another ({e})"),
            );
            return;
        }
    };
    let on1 = AllocOptions {
        node: NodeChoice::Node(1),
        ..NO_FALLBACK
    };
    for files in [false, true] {
        let fd = huge(2 * M);
        populate_on(&fd, 2 * M, 0);
        let mut e = String::new();
        let released = fake.serve(
            Lie {
                node: Some(1),
                ..lie(vec![(2 * U, fd)])
            },
            |client| {
                e = if files {
                    client.alloc_files(2 * M, PageKind::Huge2M, on1).err()
                } else {
                    client.alloc_with(2 * M, PageKind::Huge2M, on1).err()
                }
                .expect("pages on node 0 passed for node 1")
                .to_string();
            },
        );
        assert!(e.contains("is not"), "{e}");
        assert_eq!(released, vec![1]);
        assert_eq!(memfd_mappings(), before);
    }
}

/// Faults every page of the hugetlb memfd `fd` in on `node`.
fn populate_on(fd: &OwnedFd, len: usize, node: u32) {
    // SAFETY: a fresh shared mapping of our own memfd, unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    prezero::numa::bind(p.cast(), len, node, true).unwrap();
    // SAFETY: our mapping of `len` bytes.
    unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, len) };
    // SAFETY: as above, unborrowed.
    unsafe { libc::munmap(p, len) };
}
