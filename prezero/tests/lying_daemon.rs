//! The client against a daemon that lies: every field of an `ALLOC` answer
//! (counts, lengths, the files themselves, the sequence number) is checked,
//! refused with an error, and nothing of it stays mapped. The client must
//! never map past its reservation or touch a file that could end early
//! (SIGBUS). One test, so no other test maps memfds meanwhile.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use prezero::service::protocol::{self, Reply, Request, SegmentRecord};
use prezero::service::{AllocOptions, Client};
use prezero::{HugetlbReservation, PageKind};

mod common;

const M: usize = 2 << 20;

/// What the fake daemon answers one `ALLOC` with.
struct Lie {
    /// Segment records and the descriptors sent with them.
    records: Vec<(u64, OwnedFd)>,
    /// Extra descriptors sent with no record.
    extra_fds: Vec<OwnedFd>,
    /// Answer under another sequence number.
    wrong_seq: bool,
}

fn memfd(hugetlb: bool, size: usize, sealed: bool) -> OwnedFd {
    let name = CString::new("prezero-lie").unwrap();
    let flags =
        libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING | if hugetlb { libc::MFD_HUGETLB } else { 0 };
    // SAFETY: a fresh memfd; the name is NUL-terminated.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: the descriptor was just created and is ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate and fcntl on our own descriptor.
    unsafe {
        assert_eq!(libc::ftruncate(fd.as_raw_fd(), size as libc::off_t), 0);
        if sealed {
            let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
            assert_eq!(libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals), 0);
        }
    }
    fd
}

fn pipe_end() -> OwnedFd {
    let mut p = [0; 2];
    // SAFETY: pipe writes two descriptors into the array.
    assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
    // SAFETY: both are ours; one is dropped at once.
    unsafe {
        drop(OwnedFd::from_raw_fd(p[1]));
        OwnedFd::from_raw_fd(p[0])
    }
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
    // SAFETY: a zeroed sockaddr_un is valid; the path fits (a short temp path).
    unsafe {
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, &s) in addr
            .sun_path
            .iter_mut()
            .zip(path.to_str().unwrap().as_bytes())
        {
            *d = s as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        assert_eq!(
            libc::bind(
                sock.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len
            ),
            0
        );
        assert_eq!(libc::listen(sock.as_raw_fd(), 8), 0);
    }
    sock
}

/// Serves one connection: answers its ALLOC with `lie`, its RELEASEs honestly.
fn serve_one(listener: &OwnedFd, lie: Lie) {
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
    loop {
        let got = match protocol::recv(conn.as_fd(), &mut buf, 0) {
            Ok(g) if g.len > 0 => g,
            _ => return,
        };
        let Ok((seq, req)) = Request::decode(&buf[..got.len]) else {
            return;
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
                };
                let all: Vec<_> = fds.iter().chain(&l.extra_fds).map(|f| f.as_fd()).collect();
                let seq = if l.wrong_seq { seq + 99 } else { seq };
                protocol::send(conn.as_fd(), &reply.encode(seq), &all).unwrap();
            }
            Request::Release { ids } => {
                let r = Reply::Released {
                    count: ids.len() as u32,
                };
                let _ = protocol::send(conn.as_fd(), &r.encode(seq), &[]);
            }
            _ => return,
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

#[test]
fn a_lying_daemon_is_refused_and_leaves_nothing_mapped() {
    let dir = std::env::temp_dir().join(format!("pz-lie-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s");
    let listener = listen_at(&path);
    let lie = |records: Vec<(u64, OwnedFd)>| Lie {
        records,
        extra_fds: vec![],
        wrong_seq: false,
    };
    let huge = |size: usize| memfd(true, size, true);
    let m = M as u64;
    let cases: Vec<(&str, usize, Lie, &str)> = vec![
        ("no segments", 4 * M, lie(vec![]), "none"),
        (
            "too many",
            M,
            lie(vec![(m, huge(M)), (m, huge(M)), (m, huge(M))]),
            "more than",
        ),
        ("too few", 4 * M, lie(vec![(m, huge(M))]), "cover"),
        (
            "ragged length",
            4 * M,
            lie(vec![(4 * m + 4096, huge(4 * M))]),
            "whole pages",
        ),
        (
            "file shorter than its record",
            4 * M,
            lie(vec![(4 * m, huge(M))]),
            "record says",
        ),
        (
            "record shorter than the request",
            4 * M,
            lie(vec![(m, huge(M)), (m, huge(M))]),
            "cover",
        ),
        (
            "not hugetlb",
            4 * M,
            lie(vec![(4 * m, memfd(false, 4 * M, true))]),
            "pages",
        ),
        (
            "not sealed",
            4 * M,
            lie(vec![(4 * m, memfd(true, 4 * M, false))]),
            "sealed",
        ),
        (
            "a pipe",
            4 * M,
            lie(vec![(4 * m, pipe_end())]),
            "regular file",
        ),
        (
            "more descriptors than records",
            4 * M,
            Lie {
                records: vec![(4 * m, huge(4 * M))],
                extra_fds: vec![huge(M)],
                wrong_seq: false,
            },
            "disagree",
        ),
        (
            "answer to another request",
            4 * M,
            Lie {
                records: vec![(4 * m, huge(4 * M))],
                extra_fds: vec![],
                wrong_seq: true,
            },
            "another request",
        ),
    ];
    let before = memfd_mappings();
    for (name, bytes, lie, want) in cases {
        let daemon = {
            let l = listener.try_clone().unwrap();
            std::thread::spawn(move || serve_one(&l, lie))
        };
        let client = Client::connect(&path).unwrap();
        let opts = AllocOptions {
            fallback: false,
            ..AllocOptions::default()
        };
        let r = client.alloc_with(bytes, PageKind::Huge2M, opts);
        let e = r
            .err()
            .unwrap_or_else(|| panic!("{name}: a lie was believed"))
            .to_string();
        assert!(e.contains(want), "{name}: {e}");
        drop(client);
        daemon.join().unwrap();
        assert_eq!(
            memfd_mappings(),
            before,
            "{name}: a refused segment stayed mapped"
        );
    }
    // The same daemon telling the truth is believed: a segment longer than
    // the request, mapped in part (three free 2 MiB pages).
    match HugetlbReservation::ensure_free(M, 3) {
        Err(e) => eprintln!("skipped: the honest answer (no hugetlb pages: {e})"),
        Ok(_reservation) if common::hugetlb_unmappable(M).is_some() => eprintln!(
            "skipped: the honest answer ({})",
            common::hugetlb_unmappable(M).unwrap_or_default()
        ),
        Ok(_reservation) => {
            let daemon = {
                let l = listener.try_clone().unwrap();
                std::thread::spawn(move || serve_one(&l, lie(vec![(4 * m, huge(4 * M))])))
            };
            let client = Client::connect(&path).unwrap();
            let opts = AllocOptions {
                fallback: false,
                ..AllocOptions::default()
            };
            let mem = client.alloc_with(3 * M, PageKind::Huge2M, opts).unwrap();
            assert_eq!(mem.len(), 3 * M);
            assert!(prezero::is_zero(mem.as_slice()));
            let segs = mem.segments();
            assert!(segs.len() == 1 && segs[0].offset == 0 && segs[0].len == 3 * M);
            drop(mem);
            drop(client);
            daemon.join().unwrap();
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
