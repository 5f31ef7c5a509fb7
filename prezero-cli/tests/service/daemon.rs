//! The daemon itself: no daemon (the client's fallback), 1 GiB pages, a second
//! daemon on the socket, a client short of descriptors, the worker's priority.

use super::*;

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
