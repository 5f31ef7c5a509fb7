//! When the preload's threads exist, and that they never hold up an exit.

use super::*;

/// Before: a forked child that callocs, frees and `_exit`s while other
/// processes keep every CPU busy was reaped after up to 10 s under `prezero
/// run` (0.2 s plainly): its scrubber, at `SCHED_IDLE`, had not been given
/// a CPU to end on. Now no thread of ours is at `SCHED_IDLE`, and the worst
/// fork-to-reaped time of 20 such children stays near plain's. The bound
/// here is loose (the figure depends on the machine's load: `prezero bench
/// run --only exit` measures it against plain + 20 ms).
#[test]
fn an_exit_waits_for_no_thread_of_ours() {
    let Some(b) = built() else { return };
    let _s = serial();
    let mut worst = Vec::new();
    for arm in ARMS {
        let r = run(b, arm, &["exit", "20", "6"], &[], Duration::from_secs(300));
        if arm == Arm::Lazy && lazy_refused(&r) {
            continue;
        }
        r.ok();
        let line = r
            .stderr
            .lines()
            .find(|l| l.starts_with("exit: "))
            .unwrap_or("");
        let w = number_after(line, "reaped worst ").expect("the exit line");
        println!("{arm:?}: {line}");
        worst.push((arm, w));
    }
    let plain = worst[0].1;
    for &(arm, w) in &worst[1..] {
        assert!(
            w <= 2.0 * plain + 500.0,
            "{arm:?}: a child reaped after {w} ms at worst, plainly {plain} ms"
        );
    }
}

/// A program that never takes a large block has no thread of ours; one that
/// took one and went idle (its cache and reserve given back after
/// `PREZERO_IDLE_SECS`, 1 here) has none two or three seconds later; none
/// is at `SCHED_IDLE`.
#[test]
fn threads_exist_only_while_needed() {
    let Some(b) = built() else { return };
    let _s = serial();
    for arm in ARMS {
        let env = [("PREZERO_IDLE_SECS", "1")];
        let r = run(b, arm, &["threads"], &env, Duration::from_secs(60));
        if arm == Arm::Lazy && lazy_refused(&r) {
            continue;
        }
        r.ok();
        assert_eq!(
            r.stdout.trim(),
            "threads: 0 after small blocks; none left when idle",
            "{arm:?}: {}",
            r.stderr
        );
        let line = r
            .stderr
            .lines()
            .find(|l| l.starts_with("threads: "))
            .unwrap_or("");
        let gone = number_after(line, "none left ").expect("the threads line");
        if arm != Arm::Plain {
            assert!(
                number_after(line, "small blocks, ").unwrap_or(0.0) >= 1.0,
                "{line}"
            );
            // The idle time, then the watcher's two looks a second apart.
            assert!(gone <= 4500.0, "{arm:?}: {line}");
        }
    }
}
