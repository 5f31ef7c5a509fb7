//! Every byte zero, a segment kept out of reuse while a mapping, a forked child
//! or a third process holds it, and who is served within what cap.

use super::*;

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
                Err(prezero_service::Error::Refused { errno, .. }) if errno == libc::ENOMEM => {
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
