//! What a hostile review of the preload's threads found (tests/c/
//! guest_review.c): each ran plainly and failed under the preload or its
//! lazy mode; now each ends as plainly.

use super::*;

/// The review's cases: the mode, its arguments, and the environment of
/// the preload's arms (`PREZERO_IDLE_SECS=0`: threads end as soon as they
/// may, to reach the races of their ends often).
const CASES: [(&str, &[&str]); 10] = [
    ("setid-storm", &["3"]),
    ("lifetimes", &["70"]),
    ("strict", &["prctl"]),
    ("strict", &["syscall"]),
    ("strict", &["filter"]),
    ("sandbox", &[]),
    ("tsync-other", &[]),
    ("raw-clone", &[]),
    ("chroot", &[]),
    ("suspend-race", &["5"]),
];

/// Before (each, under the preload or its lazy mode, as the review ran it):
/// six threads calling `seteuid` while others allocate and fork aborted
/// ("failed to execute setxid") or hung in 3 of 20 runs; after 64 lives of
/// the preload's threads, none of them joined, a `setresuid` aborted; seccomp
/// strict mode or an allow-list filter killed the program (our calls after
/// it); a TSYNC filter failed on a thread of ours; a raw `clone` through
/// `syscall(2)` crashed its child; after a `chroot` without `/proc`, 512 MiB
/// freed stayed resident for good; a mapping made as the lazy mode's
/// handler ended hung at its first touch. Now every case ends as plainly,
/// and the chroot's memory goes back.
#[test]
fn what_the_review_found_ends_as_plainly() {
    let Some(b) = built() else { return };
    let _s = serial();
    let jail = prezero_testkit::TempDir::new("guest-jail");
    let mut wrong = Vec::new();
    for (mode, args) in CASES {
        let jail_arg = [jail.path().to_str().unwrap()];
        let args: &[&str] = if mode == "chroot" { &jail_arg } else { args };
        let mut argv = vec![mode];
        argv.extend(args);
        let mut plain = None;
        for arm in ARMS {
            let env = [("PREZERO_IDLE_SECS", "0")];
            let r = run_review(b, arm, &argv, &env);
            if arm == Arm::Lazy && lazy_refused(&r) {
                continue;
            }
            if program_skip(mode, &r) {
                break;
            }
            let out = plain.get_or_insert_with(|| r.stdout.clone());
            if r.code != Some(0) || *out != r.stdout {
                wrong.push(format!(
                    "{mode} {arm:?}: exit {:?} signal {:?}\n{}{}",
                    r.code, r.signal, r.stdout, r.stderr
                ));
            }
            if mode == "chroot" {
                let kib = number_after(&r.stderr, "chroot: ").unwrap_or(f64::MAX);
                if kib > 64.0 * 1024.0 {
                    wrong.push(format!(
                        "chroot {arm:?}: {kib} KiB resident after the frees"
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
