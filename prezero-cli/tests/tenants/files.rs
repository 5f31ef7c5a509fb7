//! A tenant changing its segment's file: truncating, growing, punching holes.

use std::time::{Duration, Instant};

use super::*;

#[test]
fn truncating_a_segment_fails_and_the_next_hand_out_is_zero() {
    let Some(d) = daemon_for_tenants(ONE_SEGMENT, &[]) else {
        return;
    };
    let (mut a, got_a) = holding_a_segment(&d, TENANT_A, 90);
    // Truncated under the daemon, the segment would SIGBUS its scrubber.
    let r = a.ask("ftruncate 0");
    assert_eq!(r.errno(), libc::EPERM, "ftruncate(fd, 0): {r}");
    let r = a.ask("ftruncate 32M");
    assert_eq!(r.errno(), libc::EPERM, "ftruncate(fd, 32M): {r}");
    // A seal of the tenant's (F_SEAL_WRITE, F_SEAL_FUTURE_WRITE) would stop the refresh.
    let r = a.ask("add-seals");
    assert_eq!(r.errno(), libc::EPERM, "F_ADD_SEALS: {r}");
    let st = a.ask("stat");
    assert_eq!(st.num("size"), (16 * MB) as i64, "{st}");
    a.ask("release");
    d.assert_serves();

    let mut b = Tenant::spawn(TENANT_B, &[], &d.socket);
    let got_b = b.ask("alloc 16M");
    assert_eq!(got_b.errno(), 0, "{got_b}");
    assert_eq!(got_b.num("ino"), got_a.num("ino"), "{got_b}");
    assert_eq!(got_b.num("size"), (16 * MB) as i64, "{got_b}");
    assert_eq!(
        got_b.num("nonzero"),
        -1,
        "the next hand-out is zero: {got_b}"
    );
    b.exit();
    a.exit();
    d.assert_serves();
}

#[test]
fn growing_a_segment_fails_and_the_next_tenant_gets_exactly_the_segment_size() {
    let Some(d) = daemon_for_tenants(ONE_SEGMENT, &[]) else {
        return;
    };
    let (mut a, got_a) = holding_a_segment(&d, TENANT_A, 60);
    // Grown, the segment would hold pages the daemon neither clears nor counts.
    let r = a.ask("ftruncate 18M");
    assert_eq!(r.errno(), libc::EPERM, "ftruncate to a larger size: {r}");
    for (what, cmd) in [
        ("fallocate past the end", "fallocate 0 16M 2M"),
        ("fallocate across the end", "fallocate 0 14M 4M"),
        ("fallocate KEEP_SIZE past the end", "fallocate 1 16M 2M"),
    ] {
        let r = a.ask(cmd);
        assert_eq!(r.errno(), libc::EPERM, "{what}: {r}");
    }
    let st = a.ask("stat");
    assert_eq!(st.num("size"), (16 * MB) as i64, "{st}");
    a.ask("release");
    d.assert_serves();

    let mut b = Tenant::spawn(TENANT_B, &[], &d.socket);
    let got_b = b.ask("alloc 16M");
    assert_eq!(got_b.errno(), 0, "{got_b}");
    assert_eq!(got_b.num("ino"), got_a.num("ino"), "{got_b}");
    assert_eq!(
        got_b.num("size"),
        (16 * MB) as i64,
        "fstat of B's segment: {got_b}"
    );
    assert_eq!(got_b.num("nonzero"), -1, "{got_b}");
    b.exit();
    a.exit();
    d.assert_serves();
}

#[test]
fn a_hole_punched_under_a_hugetlb_shortage_costs_a_segment_not_the_daemon() {
    let Some(d) = daemon_for_tenants(ONE_SEGMENT, &[]) else {
        return;
    };
    let c = d.client();
    let (mut a, _) = holding_a_segment(&d, TENANT_A, 119);
    // Two pages out of the segment, then every free page of the machine into A's hands.
    let r = a.ask("fallocate 3 0 4M");
    assert_eq!(
        r.errno(),
        0,
        "a tenant may punch holes in its own segment: {r}"
    );
    let hog = a.ask("hog");
    assert!(hog.num("pages") >= 2, "{hog}");
    assert_eq!(hog.num("unreserved_after"), 0, "{hog}");
    a.ask("release");

    wait_for_log(&d, "no fresh pages", Duration::from_secs(10));
    d.assert_serves();
    // Nothing is handed out while no fresh pages can be had.
    let e = from_service(&c, 16 * MB)
        .err()
        .expect("no memory is ready during the shortage");
    assert_eq!(e.errno(), libc::ENOMEM, "{e}");
    let mut b = Tenant::spawn(TENANT_B, &[], &d.socket);
    let r = b.ask("alloc-once 16M");
    assert_eq!(r.errno(), libc::ENOMEM, "{r}");

    // A lets go: the pool grows back on its own (it retries every 5 s),
    // watched through the ledger so that no request wakes the daemon.
    a.ask("unhog");
    let t = Instant::now();
    while ledger_segments(&d) != 1 {
        assert!(
            t.elapsed() < Duration::from_secs(12),
            "the pool did not grow back within 12 s of the pages coming free \
             ({} unreserved free 2 MiB pages now):\n{}",
            unreserved_pages(),
            d.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_all_zero(&from_service_within(&c, 16 * MB, Duration::from_secs(10)));
    b.exit();
    a.exit();
    d.assert_serves();
}
