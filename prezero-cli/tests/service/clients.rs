//! Bad clients (fuzzed messages, killed mid-request), many at once, and clients
//! that outlive the daemon.

use super::*;

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
