//! A tenant flooding the daemon: connections past its limit, a full listen
//! backlog, hundreds of threads and thousands of descriptors.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use prezero::PageKind;
use prezero_service::{Client, Source};

use super::*;

#[test]
fn a_uid_flooding_connections_is_held_to_its_limit_and_others_are_still_served() {
    let Some(d) = daemon_for_tenants(
        "target=32M,cap=32M,segment=16M",
        &["--max-conns-per-uid", "16"],
    ) else {
        return;
    };
    let c = d.client();
    let mut a = Tenant::spawn(TENANT_A, &[], &d.socket);
    let t = Instant::now();
    let r = a.ask("conns 200");
    assert_eq!(r.num("opened"), 200, "{r}");
    let st = a.ask("conn-status 16");
    assert_eq!(
        (st.num("idle"), st.num("eagain"), st.num("other")),
        (16, 184, 0),
        "16 kept, the rest refused with EAGAIN: {st}"
    );
    assert_eq!(c.stats().unwrap().clients, 17, "A's 16 and this client");
    wait_for_log(
        &d,
        &format!("uid {TENANT_A}: uid {TENANT_A} has 16 connections open"),
        Duration::from_secs(5),
    );
    let logged = |d: &Daemon| {
        d.log()
            .lines()
            .filter(|l| l.contains("refused pid") && l.contains(&format!(" uid {TENANT_A}:")))
            .count()
    };
    let burst = t.elapsed().as_secs() as usize;
    assert!(
        logged(&d) <= burst + 1,
        "refusals are logged at most once a second per uid:\n{}",
        d.log()
    );
    // More than a second later, the next refusal is logged with the count of the others.
    std::thread::sleep(Duration::from_millis(1100));
    let r = a.ask("conns 5");
    assert_eq!(r.num("opened"), 5, "{r}");
    let st = a.ask("conn-status 16");
    assert_eq!((st.num("idle"), st.num("eagain")), (16, 189), "{st}");
    wait_for_log(
        &d,
        "more refusals of this uid not logged",
        Duration::from_secs(5),
    );

    // The other tenant connects and is served meanwhile.
    let mut b = Tenant::spawn(TENANT_B, &[], &d.socket);
    let got_b = b.ask("alloc 16M");
    assert_eq!(got_b.errno(), 0, "{got_b}");
    assert_eq!(got_b.num("nonzero"), -1, "{got_b}");
    d.assert_serves();

    // A is served again once it lets its connections go.
    a.ask("close-conns");
    let t = Instant::now();
    loop {
        a.ask("connect");
        let r = a.ask("alloc-once 16M");
        if r.errno() == 0 {
            assert_eq!(r.num("nonzero"), -1, "{r}");
            break;
        }
        assert!(
            r.errno() == libc::EAGAIN && t.elapsed() < Duration::from_secs(5),
            "A after closing its connections: {r}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    b.exit();
    a.exit();
    d.assert_serves();
}

#[test]
fn a_full_listen_backlog_makes_clients_fall_back_and_a_second_daemon_exit() {
    let Some(d) = daemon_for_tenants(ONE_SEGMENT, &[]) else {
        return;
    };
    // A uid in no allow list cannot even connect: the socket file refuses it.
    let mut outsider = Tenant::spawn(OUTSIDER, &[], &d.socket);
    let r = outsider.ask("connect-raw");
    assert_eq!(
        r.errno(),
        libc::EACCES,
        "connect(2) of a uid not allowed: {r}"
    );
    outsider.exit();

    let mut ledger = d.socket.clone().into_os_string();
    ledger.push(".ledger");
    let ledger_before = std::fs::read(&ledger).unwrap();
    let mut a = Tenant::spawn(TENANT_A, &[], &d.socket);
    signal(&d, libc::SIGSTOP);
    let filled = a.ask("fill-backlog");
    assert_eq!(filled.errno(), libc::EAGAIN, "{filled}");
    let somaxconn: i64 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        filled.num("n") >= somaxconn.min(4096),
        "the daemon listens with a backlog of SOMAXCONN: {filled}"
    );

    // A client gives up on connecting within a bounded time and falls back.
    let t = Instant::now();
    let c = Client::connect(&d.socket).unwrap();
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "Client::connect took {took:?}"
    );
    assert!(!c.is_connected());
    let m = c.alloc(PAGE, PageKind::Huge2M).unwrap();
    match m.source() {
        Source::Local { reason } => assert!(reason.contains("backlog"), "{reason}"),
        s => panic!("{s:?}"),
    }
    assert!(prezero::is_zero(m.as_slice()));
    drop(m);

    // A second daemon on the live socket exits with an error, touching nothing.
    let t = Instant::now();
    let mut second = Command::new(bin())
        .args([
            "serve",
            "--pool",
            "2MB:target=2M,cap=2M,segment=2M",
            "--socket",
        ])
        .arg(&d.socket)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(s) = second.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(10) {
            let _ = second.kill();
            let _ = second.wait();
            panic!("a second daemon on a socket with a full backlog still runs after 10 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    second
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success(), "{err}");
    assert!(err.contains("served by a running daemon"), "{err}");
    assert!(d.socket.exists(), "the second daemon removed the socket");
    assert_eq!(
        std::fs::read(&ledger).unwrap(),
        ledger_before,
        "the second daemon changed the ledger"
    );

    signal(&d, libc::SIGCONT);
    wait_for("the daemon to serve again", Duration::from_secs(10), || {
        let c = Client::connect(&d.socket).unwrap();
        c.is_connected() && c.stats().is_ok()
    });
    d.assert_serves();
    let c = d.client();
    assert_all_zero(&from_service_within(&c, 16 * MB, Duration::from_secs(10)));
    // A's flood past its per-uid limit was refused, and said so.
    wait_for_log(
        &d,
        &format!("uid {TENANT_A} has 64 connections open"),
        Duration::from_secs(5),
    );
    a.exit();
    d.assert_serves();
}

#[test]
fn hand_outs_stay_fast_while_another_uid_runs_500_threads_with_10000_descriptors() {
    let Some(d) = daemon_for_tenants("target=32M,cap=32M,segment=16M", &[]) else {
        return;
    };
    let mut heavy = Tenant::spawn(OUTSIDER, &[], &d.socket);
    let h = heavy.ask("heavy 500 10000");
    assert_eq!((h.num("threads"), h.num("fds")), (500, 10000), "{h}");
    let status = std::fs::read_to_string(format!("/proc/{}/status", heavy.pid())).unwrap();
    let threads: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(threads > 500, "{status}");
    let fds = std::fs::read_dir(format!("/proc/{}/fd", heavy.pid()))
        .unwrap()
        .count();
    assert!(fds > 10000, "{fds} descriptors");

    let mut a = Tenant::spawn(TENANT_A, &[], &d.socket);
    let t = Instant::now();
    let r = a.ask_within("cycles 200 16M", Duration::from_secs(25));
    let took = t.elapsed();
    assert_eq!(r.errno(), 0, "{r}");
    assert_eq!(r.num("nonzero"), 0, "hand-outs with a non-zero byte: {r}");
    assert!(
        took < Duration::from_secs(10),
        "200 alloc/release cycles took {took:?}: {r}"
    );
    a.exit();
    heavy.exit();
    d.assert_serves();
}
