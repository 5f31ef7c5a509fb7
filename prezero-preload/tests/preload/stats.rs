//! The stats line, the cap, idle memory, prefill.

use super::*;

#[test]
fn the_stats_line_parses() {
    let Some(b) = built() else { return };
    let _s = serial();
    let r = run(b, &["mix", "1", "1500", "3"], &[LOW, STATS], true);
    r.ok();
    let s = r.stats();
    assert!(s.served > 100 && s.served_gib > 0.0, "{s:?}");
    assert!(s.peak_in_use_gib >= 0.0 && s.peak_held_gib >= 0.0);
    // Quiet when the cache was never asked.
    let q = run(
        b,
        &["mix", "1", "10", "3"],
        &[
            ("PREZERO_THRESHOLD", "1T"),
            ("PRELOAD_TEST_T", "64K"),
            STATS,
        ],
        true,
    );
    q.ok();
    assert!(!q.stderr.contains("prezero-preload:"), "{}", q.stderr);
    // Garbage settings fall back to the defaults.
    let g = run(
        b,
        &["mix", "1", "300", "3"],
        &[
            ("PREZERO_THRESHOLD", "lots"),
            ("PREZERO_CAP", "-1"),
            ("PREZERO_IDLE_SECS", "x"),
            ("PREZERO_PREFILL", "1 G"),
            ("PREZERO_THP", "maybe"),
            STATS,
        ],
        true,
    );
    g.ok();
    g.stats();
    assert!(Stats::parse("prezero-preload: pid 1: 2 large blocks").is_err());
}

#[test]
fn the_cap_bounds_what_frees_keep() {
    let Some(b) = built() else { return };
    let _s = serial();
    // 40 blocks of 4 MiB in use, then all freed.
    let held = |env: &[(&str, &str)]| {
        let r = run(b, &["cap"], env, true);
        r.ok();
        (
            number_after(&r.stdout, "held after free"),
            number_after(&r.stdout, "in use"),
        )
    };
    let (capped, used) = held(&[("PREZERO_CAP", "32M"), STATS]);
    assert!(used >= 150.0, "{used}");
    assert!(capped <= 32.0 + 8.0, "PREZERO_CAP=32M kept {capped} MiB");
    let (uncapped, _) = held(&[("PREZERO_CAP", "1G")]);
    assert!(
        uncapped >= 120.0,
        "the cache keeps what it may: {uncapped} MiB"
    );
    let (zero, _) = held(&[("PREZERO_CAP", "0")]);
    assert!(zero <= 8.0, "PREZERO_CAP=0 kept {zero} MiB");
}

#[test]
fn idle_memory_goes_back_after_idle_secs() {
    let Some(b) = built() else { return };
    let _s = serial();
    let r = run(
        b,
        &["idle", "8"],
        &[("PREZERO_IDLE_SECS", "1"), STATS],
        true,
    );
    r.ok();
    assert!(
        r.stdout.contains("given back after"),
        "64 MiB freed are still held 8 s later with PREZERO_IDLE_SECS=1"
    );
    // Not before the idle second; how long after depends on when a loaded
    // machine runs the scrubber (within the program's 8 s, above).
    let secs = number_after(&r.stdout, "given back after");
    assert!(secs >= 0.9, "given back after {secs} s, idle 1 s");
    assert!(r.stats().gave_back_gib > 0.0);
}

#[test]
fn prefill_populates_in_the_background() {
    let Some(b) = built() else { return };
    let _s = serial();
    let env = [("PREZERO_PREFILL", "64M"), ("PREZERO_THP", "0"), STATS];
    let plain = run(b, &["prefill", "0"], &env, false);
    plain.ok();
    let pre = run(b, &["prefill"], &env, true);
    pre.ok();
    let faults = |r: &Run| number_after(&r.stdout, "touch:");
    assert!(faults(&plain) >= 7000.0, "32 MiB of 4 KiB pages");
    assert!(
        faults(&pre) < 1000.0,
        "a calloc of 32 MiB after a 64 MiB prefill faulted {} times",
        faults(&pre)
    );
    // The prefill is the cache's, not a request of the program's: its 64 MiB
    // are not among the bytes served.
    let served = pre.stats().served_gib;
    assert!(served < 64.0 / 1024.0, "{}", pre.stderr);
    // Another process's prefill (`prezero run` names the program it execs):
    // this one populates nothing.
    let mut other = env.to_vec();
    other.push(("PREZERO_PREFILL_PID", "1"));
    let not_mine = run(b, &["prefill", "0.5"], &other, true);
    not_mine.ok();
    assert!(faults(&not_mine) >= 7000.0, "{}", not_mine.stdout);
}

/// numpy's `del a; a = np.zeros(n)`: each calloc right after a free. Once a
/// calloc had to clear the freed block itself, the spare serves the next
/// ones zeroed and populated; with `PREZERO_SPARE=0` each one clears inline.
#[test]
fn a_spare_serves_calloc_right_after_free() {
    let Some(b) = built() else { return };
    let _s = serial();
    let rounds = 8;
    let go = |spare: &'static str| {
        let r = run(
            b,
            &["spare", &rounds.to_string()],
            &[("PREZERO_SPARE", spare), ("PREZERO_THP", "0"), STATS],
            true,
        );
        r.ok();
        (r.stats(), r.stdout)
    };
    let (on, out) = go("1");
    let (off, _) = go("0");
    let block = 32.0 / 1024.0;
    assert!(on.spare_gib >= block - 0.01, "{on:?}");
    assert!(off.spare_gib == 0.0, "{off:?}");
    // Each calloc after the first clears what the scrubber has not taken
    // yet (it may have made 8 of the 32 MiB Busy before the calloc came).
    assert!(
        off.cleared_gib >= 5.0 * block,
        "without a spare every calloc after the first clears: {off:?}"
    );
    assert!(
        on.cleared_gib <= 3.0 * block,
        "with a spare calloc cleared {} GiB itself\n{out}",
        on.cleared_gib
    );
    // A cap that cannot hold the spare beside the block freed next: none
    // (the free would give it back at once, and the next calloc clear again).
    let r = run(
        b,
        &["spare", "4"],
        &[("PREZERO_SPARE", "1"), ("PREZERO_CAP", "48M"), STATS],
        true,
    );
    r.ok();
    assert_eq!(r.stats().spare_gib, 0.0, "{}", r.stderr);
    // Four threads: spares populated while others take and free around them,
    // every calloc checked zero by the program.
    let r = run(
        b,
        &["spare", "6", "4"],
        &[("PREZERO_SPARE", "1"), ("PREZERO_CAP", "256M"), STATS],
        true,
    );
    r.ok();
    assert!(r.stats().spare_gib > 0.0, "{}", r.stderr);
}

/// The scrubber runs the prefill when it first gets a core: a block the
/// program freed before that was once taken into the prefill, populated
/// (which does not clear it) and marked zero: the next calloc got its bytes.
/// One CPU and SCHED_FIFO make the order certain (the scrubber only runs when
/// the program sleeps); without chrt the race is still tried.
#[test]
fn prefill_never_marks_freed_memory_zero() {
    let Some(b) = built() else { return };
    let _s = serial();
    let env = [("PREZERO_PREFILL", "64M"), STATS];
    let pinned = Command::new("chrt")
        .args(["-f", "10", "taskset", "-c", "0", "true"])
        .status()
        .is_ok_and(|s| s.success());
    let prefix: &[&str] = if pinned {
        &["chrt", "-f", "10", "taskset", "-c", "0"]
    } else {
        println!("note: chrt -f / taskset unavailable (not root?): the race is left to chance");
        &[]
    };
    for _ in 0..3 {
        run_with(
            b,
            prefix,
            &["prefill-dirty"],
            &env,
            true,
            Duration::from_secs(60),
        )
        .ok();
    }
}

/// Under an address-space limit the 64 GiB reservation does not fit: every
/// request goes to glibc (no smaller reservation: it would eat into the
/// program's own limit).
#[test]
fn under_an_address_space_limit_everything_goes_to_glibc() {
    let Some(b) = built() else { return };
    let _s = serial();
    if Command::new("prlimit").arg("--version").output().is_err() {
        prezero_testkit::skip("tool", "no prlimit (util-linux)");
        return;
    }
    let r = run_with(
        b,
        &["prlimit", "--as=8589934592"],
        &["mix", "2", "800", "4"],
        &[LOW, STATS],
        true,
        Duration::from_secs(120),
    );
    r.ok();
    assert!(
        !r.stderr.contains("prezero-preload:"),
        "the cache served under ulimit -v 8G:\n{}",
        r.stderr
    );
}
