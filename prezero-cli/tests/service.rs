//! `prezero serve` end to end: each test starts its own daemon on a temporary
//! socket, with 2 MiB hugetlb pages it reserves and gives back, and checks what
//! the issue asks: every byte zero, isolation between tenants, authorization and
//! caps, robustness against bad clients, no leak, no stall.
//!
//! Tests skip (printing why) when the hugetlb pages cannot be reserved (not
//! root, or no memory); the reservation also makes them run one at a time.

mod common;

use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use prezero::PageKind;
use prezero_service::protocol::{self, Request};
use prezero_service::{Client, Source};

#[test]
fn every_byte_is_zero_across_cycles_of_garbage() {
    let Some(d) = Daemon::start("target=96M,cap=128M,segment=16M", &[]) else {
        return;
    };
    let c = d.client();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for cycle in 0..40 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let bytes = [PAGE, 16 * MB, 24 * MB + PAGE, 64 * MB][rng as usize % 4];
        let mut m = loop {
            match from_service(&c, bytes) {
                Ok(m) => break m,
                Err(prezero::Error::Service { errno, .. }) if errno == libc::ENOMEM => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                Err(e) => panic!("cycle {cycle}: {e}"),
            }
        };
        assert_eq!(m.len(), bytes);
        assert_all_zero(&m);
        m.as_mut_slice().fill((0x5a ^ cycle as u8) | 1);
    }
    d.wait_all_ready();
    let s = d.stats();
    assert_eq!(s.verify_failures, 0);
    assert!(s.scrubbed_bytes > 0 && s.verified_bytes == s.scrubbed_bytes);
}

#[test]
fn a_mapping_kept_after_release_keeps_the_segment_out_of_reuse() {
    // Two segments: after one is released but still mapped, only one can be handed out.
    let Some(d) = Daemon::start("target=32M,cap=32M,segment=16M", &[]) else {
        return;
    };
    let c = d.client();
    let m = from_service(&c, 16 * MB).unwrap();
    let kept = KeptMapping::of(&m);
    drop(m);
    // The holder writes after releasing: none of it may reach the next tenant.
    // SAFETY: kept maps 16 MiB.
    unsafe { std::ptr::write_bytes(kept.0, 0xee, kept.1) };
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(counts(&d), (1, 0, 1), "released but mapped: quarantined");
    let other = from_service(&c, 16 * MB).unwrap();
    assert_all_zero(&other);
    let e = from_service(&c, 16 * MB)
        .err()
        .expect("the held segment is not handed out");
    assert_eq!(e.errno(), libc::ENOMEM, "{e}");
    drop(kept);
    wait_for(
        "the let-go segment to be scrubbed",
        Duration::from_secs(10),
        || counts(&d) == (1, 1, 0),
    );
    let again = from_service(&c, 16 * MB).unwrap();
    assert_all_zero(&again);
}

/// Forks a child that holds what the parent holds (descriptors, mappings) and
/// exits when `release` is closed. The child only calls read and _exit.
fn fork_holder() -> (libc::pid_t, OwnedFd) {
    let mut p = [0; 2];
    // SAFETY: pipe2 fills a local array.
    assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fork; the child runs only async-signal-safe calls, then _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: close on our own descriptor is async-signal-safe.
        unsafe { libc::close(p[1]) };
        let mut b = 0u8;
        // SAFETY: read into a local, async-signal-safe.
        unsafe { libc::read(p[0], (&mut b as *mut u8).cast(), 1) };
        // SAFETY: _exit is async-signal-safe and ends the child at once.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: the read end is ours, closed in the parent.
    unsafe { libc::close(p[0]) };
    // SAFETY: the write end is ours.
    (pid, unsafe { OwnedFd::from_raw_fd(p[1]) })
}

fn reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waitpid on our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
}

#[test]
fn a_forked_child_holding_the_segment_keeps_it_out_of_reuse() {
    let Some(d) = Daemon::start("target=32M,cap=32M,segment=16M", &[]) else {
        return;
    };
    let c = d.client();
    let m = from_service(&c, 16 * MB).unwrap();
    let (child, release) = fork_holder();
    drop(m);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(counts(&d), (1, 0, 1), "the child's fd and mapping hold it");
    let other = from_service(&c, 16 * MB).unwrap();
    assert!(from_service(&c, 16 * MB).is_err());
    drop(release);
    reap(child);
    wait_for(
        "the child's segment to come back",
        Duration::from_secs(10),
        || counts(&d) == (1, 1, 0),
    );
    drop(other);
    d.wait_all_ready();
}

/// Sends `fd` over a socketpair to a forked child that takes it out of the
/// socket only when told (`go`), then holds it until `release` closes.
fn pass_to_third_process(fd: libc::c_int) -> (libc::pid_t, OwnedFd, OwnedFd) {
    let mut sv = [0; 2];
    // SAFETY: socketpair writes two descriptors into sv, a local array of two.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            sv.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0);
    let mut go = [0; 2];
    let mut rel = [0; 2];
    // SAFETY: pipe2 fills a local array.
    assert_eq!(unsafe { libc::pipe2(go.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::pipe2(rel.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // The message is built before fork: the child must not allocate.
    let mut byte = 0u8;
    let mut iov = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    let mut control = [0u64; 8];
    // SAFETY: zeroed msghdr is valid; pointers set below point at locals that
    // outlive both uses.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.as_mut_ptr().cast();
    hdr.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: fork; the child runs only async-signal-safe calls, then _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // Close the parent's ends, or the reads below would never see EOF.
        for fd in [sv[0], go[1], rel[1]] {
            // SAFETY: close on our own descriptor is async-signal-safe.
            unsafe { libc::close(fd) };
        }
        let mut b = 0u8;
        // SAFETY: read into a local, async-signal-safe.
        unsafe { libc::read(go[0], (&mut b as *mut u8).cast(), 1) };
        // SAFETY: recvmsg into the local header and buffers built before fork.
        unsafe { libc::recvmsg(sv[1], &mut hdr, 0) };
        // Now only the received descriptor holds the segment in this process.
        // SAFETY: close on our own descriptor.
        unsafe { libc::close(sv[1]) };
        // SAFETY: read into a local.
        unsafe { libc::read(rel[0], (&mut b as *mut u8).cast(), 1) };
        // SAFETY: _exit is async-signal-safe and ends the child at once.
        unsafe { libc::_exit(0) };
    }
    // The parent closes the child's ends and sends `fd` with SCM_RIGHTS.
    for end in [sv[1], go[0], rel[0]] {
        // SAFETY: our own descriptor, used no more.
        unsafe { libc::close(end) };
    }
    // SAFETY: our end of the socket pair, owned from here.
    let sock = unsafe { OwnedFd::from_raw_fd(sv[0]) };
    // SAFETY: the caller's descriptor, open for the call.
    let fdb = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    protocol::send(sock.as_fd(), &[1], &[fdb]).unwrap();
    drop(sock);
    // SAFETY: our end of the go pipe.
    let go = unsafe { OwnedFd::from_raw_fd(go[1]) };
    // SAFETY: our end of the release pipe.
    let rel = unsafe { OwnedFd::from_raw_fd(rel[1]) };
    (pid, go, rel)
}

#[test]
fn a_segment_sent_to_a_third_process_stays_out_of_reuse_in_flight_and_after() {
    let Some(d) = Daemon::start("target=32M,cap=32M,segment=16M", &[]) else {
        return;
    };
    let c = d.client();
    let m = from_service(&c, 16 * MB).unwrap();
    let (child, go, release) = pass_to_third_process(m.segments()[0].fd.as_raw_fd());
    drop(m);
    // In flight: no process has it in a descriptor table or a mapping.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(counts(&d), (1, 0, 1), "a descriptor in flight holds it");
    drop(go);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(counts(&d), (1, 0, 1), "the third process holds it");
    drop(release);
    reap(child);
    d.wait_all_ready();
    let a = from_service(&c, 16 * MB).unwrap();
    let b = from_service(&c, 16 * MB).unwrap();
    assert_all_zero(&a);
    assert_all_zero(&b);
}

#[test]
fn a_uid_not_allowed_is_refused() {
    let Some(d) = Daemon::start("target=32M,cap=32M,segment=16M", &[]) else {
        return;
    };
    if !can_switch_uid() {
        return;
    }
    let (ok, out) = client_as_nobody(&d, &["alloc", "2M", "--no-fallback"]);
    assert!(!ok, "{out}");
    // The socket's ACL names no other uid: the kernel refuses at connect(2).
    assert!(
        out.contains("Permission denied") && out.contains("may not use this service"),
        "{out}"
    );
    // With fallback, the refused client still gets zeroed memory, locally, and says why.
    let (ok, out) = client_as_nobody(&d, &["alloc", "2M"]);
    assert!(
        ok && out.contains("from local") && out.contains("may not use"),
        "{out}"
    );
    assert_eq!(counts(&d), (2, 0, 0));
}

#[test]
fn an_allowed_uid_is_served_within_its_cap() {
    let Some(d) = Daemon::start(
        "target=64M,cap=64M,segment=16M",
        &["--allow-uid", "65534", "--uid-cap", "32M"],
    ) else {
        return;
    };
    if !can_switch_uid() {
        return;
    }
    let (ok, out) = client_as_nobody(&d, &["alloc", "32M", "--no-fallback"]);
    assert!(ok && out.contains("from service"), "{out}");
    let (ok, out) = client_as_nobody(&d, &["alloc", "48M", "--no-fallback"]);
    assert!(!ok && out.contains("cap"), "{out}");
}

#[test]
fn quarantined_memory_counts_against_the_uid_cap() {
    let Some(d) = Daemon::start("target=64M,cap=64M,segment=16M", &["--uid-cap", "32M"]) else {
        return;
    };
    let c = d.client();
    let a = from_service(&c, 16 * MB).unwrap();
    let _b = from_service(&c, 16 * MB).unwrap();
    let e = from_service(&c, 16 * MB).err().expect("over the cap");
    assert_eq!(e.errno(), libc::EDQUOT, "{e}");
    let kept = KeptMapping::of(&a);
    drop(a);
    std::thread::sleep(Duration::from_millis(200));
    let e = from_service(&c, 16 * MB)
        .err()
        .expect("quarantine still counts");
    assert_eq!(e.errno(), libc::EDQUOT, "{e}");
    drop(kept);
    wait_for("the cap to free up", Duration::from_secs(10), || {
        from_service(&c, 16 * MB).is_ok()
    });
}

#[test]
fn fuzzed_messages_get_errors_or_a_disconnect_and_the_daemon_keeps_serving() {
    let Some(d) = Daemon::start("target=32M,cap=64M,segment=16M", &[]) else {
        return;
    };
    let devnull = std::fs::File::open("/dev/null").unwrap();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let valid = [
        Request::Alloc {
            bytes: 16 * MB as u64,
            page_size: PAGE as u64,
            flags: 0,
            node: 0,
        }
        .encode(1),
        Request::Release { ids: vec![1, 2] }.encode(2),
        Request::Stats.encode(3),
    ];
    let mut raw = Raw::connect(&d.socket);
    let mut disconnects = 0;
    for i in 0..600 {
        let r = next();
        let msg: Vec<u8> = match i % 8 {
            // Random bytes of random length, up to past the maximum.
            0 => (0..(r % 5000) as usize).map(|_| next() as u8).collect(),
            // A valid message cut short.
            1 => {
                let v = &valid[r as usize % 3];
                v[..(r >> 8) as usize % v.len()].to_vec()
            }
            // A valid message with one byte flipped.
            2 => {
                let mut v = valid[r as usize % 3].clone();
                let k = (r >> 8) as usize % v.len();
                v[k] ^= 1 << ((r >> 20) % 8);
                v
            }
            // Absurd requests: huge, zero, odd page sizes, unknown flags.
            3 => Request::Alloc {
                bytes: [u64::MAX, 0, 1 << 62, 3][r as usize % 4],
                page_size: [PAGE as u64, 4096, 0, u64::MAX, 3][(r >> 8) as usize % 5],
                flags: [0, 1, u32::MAX][(r >> 16) as usize % 3],
                node: 0,
            }
            .encode(4),
            // Release of ids never handed out (or another connection's).
            4 => Request::Release {
                ids: (0..(r % 40)).map(|_| next() % 8).collect(),
            }
            .encode(5),
            // The maximum number of ids, and one more than fits.
            5 => {
                let mut v = Request::Release {
                    ids: vec![7; protocol::MAX_RELEASE_IDS],
                }
                .encode(6);
                if r % 2 == 0 {
                    v.extend_from_slice(&[0; 8]);
                }
                v
            }
            // A valid request that carries descriptors it should not.
            6 => {
                let fds: Vec<_> = (0..1 + r as usize % 3).map(|_| devnull.as_fd()).collect();
                if !raw.send(&valid[2], &fds) {
                    disconnects += 1;
                    raw = Raw::connect(&d.socket);
                }
                continue;
            }
            // Valid allocations, never released: they go back when we disconnect.
            _ => valid[0].clone(),
        };
        if !raw.send(&msg, &[]) || !raw.drain(Duration::from_millis(2)) {
            disconnects += 1;
            raw = Raw::connect(&d.socket);
        }
    }
    drop(raw);
    assert!(disconnects > 0, "malformed messages disconnect");
    let s = d.stats();
    assert!(s.protocol_errors > 0 && s.refusals > 0);
    d.wait_all_ready();
    let c = d.client();
    assert_all_zero(&from_service(&c, 32 * MB).unwrap());
}

#[test]
fn a_client_killed_mid_request_or_while_holding_leaks_nothing() {
    let Some(d) = Daemon::start("target=64M,cap=64M,segment=16M", &[]) else {
        return;
    };
    // Asks, then dies without reading the answer (its descriptors are in flight).
    let raw = Raw::connect(&d.socket);
    let req = Request::Alloc {
        bytes: 32 * MB as u64,
        page_size: PAGE as u64,
        flags: 0,
        node: 0,
    };
    assert!(raw.send(&req.encode(1), &[]));
    std::thread::sleep(Duration::from_millis(50));
    drop(raw);
    d.wait_all_ready();
    // A holding client process, SIGKILLed.
    let mut holder = Command::new(bin())
        .args([
            "client",
            "alloc",
            "32M",
            "--hold",
            "--no-fallback",
            "--socket",
        ])
        .arg(&d.socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("from service"), "{line}");
    assert_eq!(counts(&d).1, 2);
    holder.kill().unwrap();
    holder.wait().unwrap();
    d.wait_all_ready();
}

#[test]
fn sixteen_concurrent_clients_churn_without_leak_or_stall() {
    let Some(mut d) = Daemon::start("target=192M,cap=384M,segment=16M", &[]) else {
        return;
    };
    let t = Instant::now();
    let mut clients: Vec<Child> = (0..16)
        .map(|i| {
            Command::new(bin())
                .args([
                    "client",
                    "churn",
                    "--seconds",
                    "3",
                    "--max",
                    "48M",
                    "--seed",
                ])
                .arg((i + 1).to_string())
                .arg("--socket")
                .arg(&d.socket)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // Kill two mid-run, the others finish.
    std::thread::sleep(Duration::from_millis(1500));
    for c in &mut clients[..2] {
        c.kill().unwrap();
    }
    let mut served = 0;
    for (i, c) in clients.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        if i >= 2 {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "client {i}: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            served += text
                .split_whitespace()
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap();
        }
    }
    assert!(t.elapsed() < Duration::from_secs(60), "a client stalled");
    assert!(served > 0);
    d.wait_all_ready();
    assert_eq!(d.stats().verify_failures, 0);
    assert!(d.stop().success());
    pages_come_back(PageKind::Huge2M, d.free_before);
}

#[test]
fn after_shutdown_clients_keep_valid_memory() {
    let Some(mut d) = Daemon::start("target=32M,cap=32M,segment=16M", &[]) else {
        return;
    };
    let c = d.client();
    let mut m = from_service(&c, 32 * MB).unwrap();
    assert_all_zero(&m);
    m.as_mut_slice().fill(0x3c);
    assert!(d.stop().success(), "{}", d.log());
    assert!(
        d.log().contains("2 segments still with clients"),
        "{}",
        d.log()
    );
    assert!(m.as_slice().iter().all(|&b| b == 0x3c));
    m.as_mut_slice().fill(0xc3);
    assert!(m.as_slice().iter().all(|&b| b == 0xc3));
    drop(m);
    // The pages went back when the last holder let go.
    pages_come_back(PageKind::Huge2M, d.free_before);
}

#[test]
fn without_a_service_the_client_falls_back_and_says_why() {
    let c = Client::connect("/nonexistent/prezero.sock").unwrap();
    assert!(!c.is_connected());
    let e = c
        .alloc_with(PAGE, PageKind::Huge2M, NO_FALLBACK)
        .err()
        .expect("no fallback asked");
    assert_eq!(e.errno(), libc::ENOTCONN);
    // Local fallback: hugetlb if free, else THP; zero either way.
    let m = c.alloc(4 * MB, PageKind::Huge2M).unwrap();
    assert!(matches!(m.source(), Source::Local { reason } if reason.contains("cannot connect")));
    assert!(prezero::is_zero(m.as_slice()));
    assert!(
        Client::connect("x".repeat(200)).is_err(),
        "too long for a socket path"
    );
    assert!(c.alloc(0, PageKind::Huge2M).is_err());
    // More than the machine has: an error, not the OOM killer.
    assert!(c.alloc(1 << 50, PageKind::Huge2M).is_err());
    assert!(c.alloc(PAGE, PageKind::Base).is_err());
}

#[test]
fn a_1gb_pool_hands_out_zeroed_1gb_pages_and_scrubs_them() {
    let Some(mut d) = Daemon::start_on(PageKind::Huge1G, "target=1024M,cap=1024M", &[]) else {
        return;
    };
    let c = d.client();
    let mut m = c
        .alloc_with(1 << 30, PageKind::Huge1G, NO_FALLBACK)
        .unwrap();
    assert_all_zero(&m);
    assert_eq!(m.as_ptr() as usize % (1 << 30), 0, "1 GiB aligned");
    m.as_mut_slice().fill(0x77);
    drop(m);
    d.wait_all_ready();
    let m = c
        .alloc_with(1 << 30, PageKind::Huge1G, NO_FALLBACK)
        .unwrap();
    assert_all_zero(&m);
    assert!(
        c.alloc_with(2 << 20, PageKind::Huge2M, NO_FALLBACK)
            .is_err(),
        "no 2MB pool on this daemon"
    );
    drop(m);
    assert!(d.stop().success());
    pages_come_back(PageKind::Huge1G, d.free_before);
}

#[test]
fn a_second_daemon_on_a_live_socket_is_refused_and_a_stale_socket_is_replaced() {
    let Some(d) = Daemon::start("target=16M,cap=16M,segment=16M", &[]) else {
        return;
    };
    let out = Command::new(bin())
        .args([
            "serve",
            "--pool",
            "2MB:target=16M,cap=16M,segment=16M",
            "--socket",
        ])
        .arg(&d.socket)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("served by a running daemon"));
    assert_eq!(counts(&d), (1, 0, 0), "the first daemon is untouched");
    // A socket file nobody listens on (a daemon that was killed) is replaced.
    let stale = d.dir.join("stale.sock");
    std::os::unix::net::UnixListener::bind(&stale).unwrap();
    let mut second = Command::new(bin())
        .args([
            "serve",
            "--pool",
            "2MB:target=2M,cap=2M,segment=2M",
            "--socket",
        ])
        .arg(&stale)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(
        "the second daemon on the stale socket",
        Duration::from_secs(30),
        || Client::connect(&stale).unwrap().is_connected(),
    );
    // SAFETY: kill on our own child's pid.
    unsafe { libc::kill(second.id() as i32, libc::SIGTERM) };
    assert!(second.wait().unwrap().success());
}

#[test]
fn a_client_short_of_descriptors_gets_a_clear_error_and_the_daemon_takes_all_back() {
    let Some(d) = Daemon::start("target=128M,cap=128M,segment=2M", &[]) else {
        return;
    };
    // 64 segments, 16 descriptors allowed: the reply cannot be received whole.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 16 && exec {} client alloc 128M --no-fallback --socket {}",
            bin(),
            d.socket.display()
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("RLIMIT_NOFILE"),
        "{err}"
    );
    d.wait_all_ready();
}

/// The scheduling policy of the daemon's worker thread ("prezero-serve-scrub",
/// cut to 15 characters in `comm`).
fn worker_policy(d: &Daemon) -> libc::c_int {
    let tasks = std::fs::read_dir(format!("/proc/{}/task", d.pid())).unwrap();
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == "prezero-serve-s" {
            let tid: libc::pid_t = t.file_name().to_str().unwrap().parse().unwrap();
            // SAFETY: sched_getscheduler only reads another thread's policy.
            let p = unsafe { libc::sched_getscheduler(tid) };
            return p & !libc::SCHED_RESET_ON_FORK;
        }
    }
    panic!("the daemon has no worker thread");
}

#[test]
fn the_worker_leaves_idle_priority_while_clients_are_refused_and_goes_back_after() {
    let Some(d) = Daemon::start("target=32M,cap=32M,segment=16M", &[]) else {
        return;
    };
    wait_for("the worker at SCHED_IDLE", Duration::from_secs(5), || {
        worker_policy(&d) == libc::SCHED_IDLE
    });
    let c = d.client();
    let all = from_service(&c, 32 * MB).unwrap();
    let e = from_service(&c, 16 * MB).err().expect("nothing is ready");
    assert_eq!(e.errno(), libc::ENOMEM, "{e}");
    assert_eq!(
        worker_policy(&d),
        libc::SCHED_OTHER,
        "a refusal lifts the worker to normal priority"
    );
    drop(all);
    d.wait_all_ready();
    wait_for(
        "the worker back at SCHED_IDLE once the target is met",
        Duration::from_secs(10),
        || worker_policy(&d) == libc::SCHED_IDLE,
    );
}

#[test]
fn pools_by_shape_give_exact_fits_first_then_the_fewest_segments_under_concurrency() {
    // One pool of 16 MiB segments (a "VM" of 16 MiB gets one file) and one of 4 MiB.
    let pools = [
        "target=32M,cap=32M,segment=16M",
        "target=16M,cap=16M,segment=4M",
    ];
    let Some(d) = Daemon::start_pools(PageKind::Huge2M, &pools, &[]) else {
        return;
    };
    d.wait_all_ready();
    let c = d.client();
    // With everything ready: exact fits, then the fewest segments.
    for (bytes, want) in [
        (16 * MB, (1, 16 * MB)),
        (4 * MB, (1, 4 * MB)),
        (3 * MB, (1, 4 * MB)),
        (8 * MB, (1, 16 * MB)),
        (32 * MB, (2, 16 * MB)),
    ] {
        let m = from_service(&c, bytes).unwrap();
        let Source::Service {
            segments,
            segment_size,
            ..
        } = *m.source()
        else {
            panic!("{bytes}: not from the service");
        };
        assert_eq!((segments, segment_size), want, "a request of {bytes}");
        assert_all_zero(&m);
        drop(m);
        d.wait_all_ready();
    }
    // Four tenants' threads at once, each size served whole from one pool or refused.
    std::thread::scope(|s| {
        for t in 0..4usize {
            let d = &d;
            s.spawn(move || {
                let c = d.client();
                for i in 0..60 {
                    let bytes = [4 * MB, 16 * MB, 8 * MB, 2 * MB][(t + i) % 4];
                    match from_service(&c, bytes) {
                        Ok(mut m) => {
                            let Source::Service {
                                segments,
                                segment_size,
                                ..
                            } = *m.source()
                            else {
                                panic!("not from the service");
                            };
                            assert!(segment_size == 4 * MB || segment_size == 16 * MB);
                            assert!(segments * segment_size >= bytes);
                            assert!(segments == 1 || segment_size == 4 * MB, "{segments}");
                            assert_all_zero(&m);
                            m.as_mut_slice().fill(0xc3);
                        }
                        Err(prezero::Error::Service { errno, .. }) if errno == libc::ENOMEM => {
                            std::thread::sleep(Duration::from_millis(1))
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });
    d.wait_all_ready();
    let s = d.stats();
    assert_eq!(s.pools.len(), 2, "STATS shows every pool");
    assert!(s.pools.iter().all(|p| p.handouts > 0), "{:?}", s.pools);
    assert_eq!(s.verify_failures, 0);
    let (ok, text) = client_stats(&d, &[]);
    assert!(ok, "{text}");
    assert!(text.contains("16M") && text.contains("4M"), "{text}");
}

fn client_stats(d: &Daemon, extra: &[&str]) -> (bool, String) {
    let out = Command::new(bin())
        .args(["client", "stats", "--socket", d.socket.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Samples of a Prometheus text exposition, `name{labels}` to value, after
/// checking every sample belongs to a family with a HELP and a TYPE line.
fn parse_exposition(text: &str) -> (std::collections::BTreeMap<String, f64>, Vec<String>) {
    let mut samples = std::collections::BTreeMap::new();
    let mut counters = Vec::new();
    let (mut helped, mut typed) = (Vec::new(), Vec::new());
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.push(rest.split(' ').next().unwrap().to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut w = rest.split(' ');
            let (name, kind) = (w.next().unwrap().to_owned(), w.next().unwrap());
            if kind == "counter" || kind == "histogram" {
                counters.push(name.clone());
            }
            typed.push(name);
        } else {
            let (key, value) = line.rsplit_once(' ').expect("name value");
            let name = key.split('{').next().unwrap();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|f| typed.iter().any(|t| t == f))
                .unwrap_or(name);
            assert!(typed.iter().any(|t| t == family), "{name}: no TYPE");
            assert!(helped.iter().any(|t| t == family), "{name}: no HELP");
            samples.insert(key.to_owned(), value.parse::<f64>().expect("a number"));
        }
    }
    (samples, counters)
}

#[test]
fn the_metrics_file_parses_and_its_counters_only_grow() {
    // A directory only root may write: the daemon refuses one others could.
    let dir = std::env::temp_dir().join(format!("prezero-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _gone = RemoveOnDrop(dir.clone());
    let file = dir.join("prezero.prom");
    let Some(d) = Daemon::start(
        "target=32M,cap=32M,segment=16M",
        &[
            "--metrics-interval",
            "0.05",
            "--metrics-textfile",
            file.to_str().unwrap(),
        ],
    ) else {
        return;
    };
    let read = || {
        wait_for("the metrics file", Duration::from_secs(5), || {
            std::fs::read_to_string(&file).is_ok_and(|t| !t.is_empty())
        });
        std::fs::read_to_string(&file).unwrap()
    };
    let c = d.client();
    let mut last = parse_exposition(&read()).0;
    for round in 0..3 {
        let m = from_service(&c, 16 * MB).unwrap();
        drop(m);
        // Refused twice: more than the cap, and a page size not served.
        assert!(from_service(&c, 64 * MB).is_err());
        let raw = Raw::connect(&d.socket);
        let ask = Request::Alloc {
            bytes: 1,
            page_size: 4096,
            flags: 0,
            node: 0,
        };
        assert!(raw.send(&ask.encode(1), &[]));
        raw.drain(Duration::from_millis(200));
        d.wait_all_ready();
        std::thread::sleep(Duration::from_millis(150));
        let text = read();
        let (now, counters) = parse_exposition(&text);
        for (key, &v) in &now {
            let name = key.split('{').next().unwrap();
            let is_counter = counters.iter().any(|c| name.starts_with(c.as_str()));
            if let (true, Some(&before)) = (is_counter, last.get(key)) {
                assert!(
                    v >= before,
                    "round {round}: {key} went from {before} to {v}"
                );
            }
        }
        let get = |k: &str| *now.get(k).unwrap_or_else(|| panic!("no {k} in\n{text}"));
        // One node here: the daemon's pool is on node 0, and says so.
        let pool = "page=\"2MiB\",segment=\"16MiB\",node=\"0\"";
        assert!(get(&format!("prezero_handouts_total{{{pool}}}")) >= (round + 1) as f64);
        assert!(get("prezero_refusals_total{reason=\"pool_cap\"}") >= (round + 1) as f64);
        assert!(get("prezero_refusals_total{reason=\"bad_request\"}") >= (round + 1) as f64);
        assert_eq!(
            get("prezero_handout_latency_seconds_count"),
            get(&format!("prezero_handouts_total{{{pool}}}"))
        );
        assert_eq!(
            get(&format!("prezero_pool_bytes{{{pool},state=\"ready\"}}")),
            (32 * MB) as f64
        );
        assert!(
            get("prezero_cleaned_bytes_total{how=\"in_place\"}") >= ((round + 1) * 16 * MB) as f64
        );
        last = now;
    }
    // What `client stats --prometheus` prints is the same format.
    let (ok, text) = client_stats(&d, &["--prometheus"]);
    assert!(ok, "{text}");
    parse_exposition(&text);
    // promtool, where Debian's prometheus package put it, has the last word on the format.
    match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => prezero_testkit::skip(
            "tool",
            format!("promtool check metrics ({e}; apt-get install prometheus)"),
        ),
    }
}

struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_metrics_file_in_the_place_of_the_socket_or_in_a_shared_directory_is_refused() {
    let dir = std::env::temp_dir().join(format!("prezero-metrics-bad-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("shared")).unwrap();
    let _gone = RemoveOnDrop(dir.clone());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.join("shared"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let sock = dir.join("s.sock");
    let s = sock.to_str().unwrap();
    for (metrics, why) in [
        (s.to_owned(), "socket or the ledger"),
        (format!("{s}.ledger"), "socket or the ledger"),
        (format!("{s}.ledger.tmp"), "socket or the ledger"),
        (
            dir.join("shared/m.prom").to_str().unwrap().to_owned(),
            "writable by every user",
        ),
    ] {
        let out = Command::new(bin())
            .args([
                "serve",
                "--socket",
                s,
                "--pool",
                "2MB:target=2M,cap=2M,segment=2M",
            ])
            .args(["--metrics-textfile", &metrics])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(why),
            "{metrics}: {err}"
        );
    }
    for interval in ["0", "1e19", "nan"] {
        let out = Command::new(bin())
            .args(["serve", "--socket", s, "--metrics-interval", interval])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("interval"),
            "{interval}: {err}"
        );
    }
}
