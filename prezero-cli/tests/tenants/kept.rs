//! References to a segment a tenant keeps past its release: a path or an
//! `O_PATH` descriptor, an io_uring fixed buffer, a vmspliced pipe.

use std::time::Duration;

use super::*;

#[test]
fn a_tenant_opens_its_segment_by_path_and_a_kept_o_path_reopens_nothing_after() {
    let Some(d) = daemon_for_tenants("target=16M,cap=16M,segment=16M", &[]) else {
        return;
    };
    let (mut a, got_a) = holding_a_segment(&d, TENANT_A, 171);
    // A VMM's mem-path=/proc/self/fd/N: the tenant's uid may open its lease.
    let opened = a.ask("open-by-path");
    assert_eq!(opened.errno(), 0, "{opened}");
    a.ask("keep-opath");
    assert_eq!(a.ask("reopen-opath").errno(), 0, "while leased, its own");
    a.ask("release");
    wait_for("the segment to be ready", Duration::from_secs(10), || {
        counts(&d) == (1, 0, 0)
    });
    let again = a.ask("reopen-opath");
    assert_eq!(
        again.errno(),
        libc::EACCES,
        "released: the inode is the daemon's: {again}"
    );
    // Tenant B gets the segment (fresh pages); A's descriptor still opens nothing.
    let _b = takes_over(&d, &got_a);
    let again = a.ask("reopen-opath");
    assert_eq!(again.errno(), libc::EACCES, "B's lease is B's: {again}");
}

#[test]
fn an_io_uring_fixed_buffer_kept_after_release_never_reaches_the_next_tenant() {
    let Some(d) = daemon_for_tenants(ONE_SEGMENT, &[]) else {
        return;
    };
    let (mut a, got_a) = holding_a_segment(&d, TENANT_A, 17);
    // The tenant pins the segment's first page in the kernel, with no file.
    let reg = a.ask("uring-register 2M");
    if reg.has("skip") {
        prezero_testkit::skip(
            "kernel",
            format!(
                "io_uring is not available here (io_uring_setup: errno {})",
                reg.num("skip")
            ),
        );
        return;
    }
    assert_eq!(
        reg.errno(),
        0,
        "IORING_REGISTER_BUFFERS of the segment: {reg}"
    );
    a.ask("release");

    let mut b = takes_over(&d, &got_a);

    // A reads its fixed buffer out (WRITE_FIXED to a file), writes into it
    // (READ_FIXED from a file of 0xaa), and reads it out again.
    let seen = a.ask("uring-out 187");
    assert_eq!(seen.num("bytes"), (2 * MB) as i64, "{seen}");
    assert_eq!(
        seen.num("same"),
        0,
        "A read B's bytes through its fixed buffer: {seen}"
    );
    let wrote = a.ask("uring-in 170");
    assert_eq!(wrote.num("bytes"), (2 * MB) as i64, "{wrote}");
    let mine = b.ask("check 187");
    assert_eq!(
        mine.num("first"),
        -1,
        "A's write through its fixed buffer reached B's memory: {mine}"
    );
    let seen = a.ask("uring-out 187");
    assert_eq!(
        seen.num("same"),
        0,
        "A read B's bytes through its fixed buffer: {seen}"
    );
    assert_eq!(
        (seen.num("first"), seen.num("uniform")),
        (170, 1),
        "A's write landed in the page A kept: {seen}"
    );

    b.ask("release");
    d.assert_serves();
    let c = d.client();
    assert_all_zero(&from_service_within(&c, 16 * MB, Duration::from_secs(10)));
    b.exit();
    a.exit();
    d.assert_serves();
}

#[test]
fn with_reuse_fresh_a_tenants_own_io_uring_pin_never_reaches_its_next_hand_out() {
    let Some(d) = daemon_for_tenants(ONE_SEGMENT, &["--reuse", "fresh"]) else {
        return;
    };
    let (mut a, first) = holding_a_segment(&d, TENANT_A, 17);
    let reg = a.ask("uring-register 2M");
    if reg.has("skip") {
        prezero_testkit::skip(
            "kernel",
            format!(
                "io_uring is not available here (io_uring_setup: errno {})",
                reg.num("skip")
            ),
        );
        return;
    }
    assert_eq!(reg.errno(), 0, "IORING_REGISTER_BUFFERS: {reg}");
    a.ask("release");
    // The same uid asks again: the same segment, with fresh pages.
    let again = a.ask("alloc 16M");
    assert_eq!(again.num("ino"), first.num("ino"), "{again}");
    assert_eq!(again.num("nonzero"), -1, "{again}");
    let wrote = a.ask("uring-in 170");
    assert_eq!(wrote.num("bytes"), (2 * MB) as i64, "{wrote}");
    let mine = a.ask("check 0");
    assert_eq!(
        mine.num("first"),
        -1,
        "the write through the pin kept from the last hand-out reached this one: {mine}"
    );
    a.ask("release");
    a.exit();
    d.assert_serves();
}

#[test]
fn a_vmspliced_pipe_kept_after_release_never_shows_the_next_tenants_bytes() {
    let Some(d) = daemon_for_tenants(ONE_SEGMENT, &[]) else {
        return;
    };
    let (mut a, got_a) = holding_a_segment(&d, TENANT_A, 17);
    // The pipe holds references to the segment's pages, with no file.
    let spliced = a.ask("vmsplice 1M");
    assert_eq!(spliced.num("bytes"), MB as i64, "{spliced}");
    a.ask("release");

    let mut b = takes_over(&d, &got_a);

    let seen = a.ask("pipe-read 187");
    assert_eq!(seen.num("bytes"), MB as i64, "{seen}");
    assert_eq!(
        seen.num("same"),
        0,
        "A read B's bytes out of its pipe: {seen}"
    );
    let mine = b.ask("check 187");
    assert_eq!(mine.num("first"), -1, "{mine}");

    b.exit();
    a.exit();
    d.assert_serves();
    let c = d.client();
    assert_all_zero(&from_service_within(&c, 16 * MB, Duration::from_secs(10)));
}
