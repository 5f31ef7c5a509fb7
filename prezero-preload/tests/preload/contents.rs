//! Contents, zeroes, alignment, guards, overlap.

use super::*;

#[test]
fn random_traffic_on_1_to_8_threads_around_the_threshold() {
    let Some(b) = built() else { return };
    let _s = serial();
    // The test program itself, against glibc alone.
    run(b, &["mix", "2", "1500", "1"], &[LOW], false).ok();
    for (threads, iters) in [("1", "6000"), ("2", "3000"), ("4", "1500"), ("8", "800")] {
        let r = run(b, &["mix", threads, iters, threads], &[LOW, STATS], true);
        r.ok();
        let s = r.stats();
        assert!(s.served > 1000, "{s:?}");
        assert_eq!(s.bad_frees, 0, "{s:?}");
        // Only the calls that went around a scrubber starved by the
        // threads (more than the cores) go to glibc.
        assert!(s.fallbacks <= s.around_scrubber, "{s:?}");
    }
    // The default threshold (1 MiB) and no huge pages.
    run(
        b,
        &["mix", "2", "600", "9"],
        &[STATS, ("PREZERO_THP", "0")],
        true,
    )
    .ok();
    // A cap so small that frees give memory back all the time, and a scrubber
    // that gives back everything idle at once.
    let r = run(
        b,
        &["mix", "4", "800", "11"],
        &[
            LOW,
            STATS,
            ("PREZERO_CAP", "4M"),
            ("PREZERO_IDLE_SECS", "0"),
        ],
        true,
    );
    r.ok();
    r.stats();
}

#[test]
fn aligned_entry_points_answer_exactly_as_glibc() {
    let Some(b) = built() else { return };
    let _s = serial();
    for env in [&[LOW][..], &[][..]] {
        let plain = run(b, &["align"], env, false);
        plain.ok();
        let pre = run(b, &["align"], env, true);
        pre.ok();
        let diff: Vec<String> = plain
            .stdout
            .lines()
            .zip(pre.stdout.lines())
            .filter(|(a, b)| a != b)
            .map(|(a, b)| format!("  glibc:   {a}\n  prezero: {b}"))
            .collect();
        assert!(
            diff.is_empty() && plain.stdout.lines().count() == pre.stdout.lines().count(),
            "aligned entry points differ from glibc:\n{}",
            diff.join("\n")
        );
        // Every successful answer was aligned.
        assert!(!pre.stdout.contains("ptr rc 0 errno 0 aligned 0"));
    }
}

#[test]
fn requests_past_the_machine_fail_as_under_glibc() {
    let Some(b) = built() else { return };
    let _s = serial();
    let plain = run(b, &["huge"], &[LOW], false);
    plain.ok();
    let pre = run(b, &["huge"], &[LOW], true);
    pre.ok();
    assert_eq!(
        plain.stdout, pre.stdout,
        "a request glibc refuses must be refused (not granted and left to the OOM killer)"
    );
}

#[test]
fn realloc_in_place_by_mremap_shrink_zero_and_across_the_threshold() {
    let Some(b) = built() else { return };
    let _s = serial();
    let plain = run(b, &["realloc"], &[LOW], false);
    plain.ok();
    for env in [&[LOW, STATS][..], &[LOW, STATS, ("PREZERO_THP", "0")][..]] {
        let pre = run(b, &["realloc"], env, true);
        pre.ok();
        assert!(pre.stdout.contains("grow at the top: in place"));
        // realloc(p, 0) and the errno of failures: glibc's.
        for key in [
            "realloc(large, 0)",
            "realloc(small, 0)",
            "realloc(large, SIZE_MAX",
            "reallocarray",
            "realloc(small, SIZE_MAX",
        ] {
            assert_eq!(
                lines_with(&plain.stdout, key),
                lines_with(&pre.stdout, key),
                "{key}"
            );
        }
        let s = pre.stats();
        assert!(
            s.remaps >= 1,
            "a grow past a live block moves by mremap: {s:?}"
        );
        assert_eq!(s.bad_frees, 0);
    }
}
