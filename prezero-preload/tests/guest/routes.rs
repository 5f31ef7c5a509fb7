//! Who a thread of the preload's is, against the program's main thread, as
//! the program changes who it is by every route (see tests/c/guest.c): a
//! call the preload sees (the C library's, `syscall(2)`, `prctl`) is
//! followed at once, one made inline within 100 ms.

use super::*;

/// Routes through a function the preload interposes: followed at once.
const SEEN: [&str; 11] = [
    "glibc-setuid",
    "raw-setuid",
    "capset",
    "keepcaps",
    "capbset",
    "nnp",
    "seccomp",
    "seccomp-prctl",
    "seccomp-tsync",
    "landlock",
    "unshare-net",
];

/// Routes past every function (inline system calls): followed by the
/// threads' own look at the main thread.
const INLINE: [&str; 5] = [
    "asm-setuid",
    "asm-capset",
    "asm-nnp",
    "asm-seccomp",
    "asm-unshare-net",
];

/// The longest a thread of ours may be wider than the main thread after a
/// route the preload sees: none (the sampler reads every 2 ms; a few
/// samples of a thread being made are allowed, on a guest under TCG too).
const SEEN_MS: f64 = 20.0;
/// After an inline route: the 100 ms, with room for a loaded test
/// machine (the figure on a quiet one is the closing note's).
const INLINE_MS: f64 = 200.0;

/// Before: a root program that dropped its ids by a raw system call, or
/// entered a seccomp filter, a namespace or a Landlock ruleset on its only
/// thread, left the preload's threads as they were for the whole run (uid
/// 0, every capability, no filter); glibc's set*id path left every
/// capability for up to a second. Now none of ours is ever wider than the
/// main thread for longer than the bounds above, and a TSYNC filter takes
/// every thread.
#[test]
fn no_thread_of_ours_is_less_restricted_than_the_program() {
    let Some(b) = built() else { return };
    let _s = serial();
    let mut wrong = Vec::new();
    let mut table = Vec::new();
    for route in SEEN.iter().chain(&INLINE) {
        let bound = if INLINE.contains(route) {
            INLINE_MS
        } else {
            SEEN_MS
        };
        let mut plain_out = None;
        for arm in ARMS {
            let r = run(b, arm, &["route", route], &[], Duration::from_secs(60));
            if arm == Arm::Lazy && lazy_refused(&r) {
                continue;
            }
            if program_skip(route, &r) {
                break;
            }
            if r.code != Some(0) {
                wrong.push(format!(
                    "{route} {arm:?}: exit {:?}\n{}{}",
                    r.code, r.stdout, r.stderr
                ));
                continue;
            }
            let line = r
                .stderr
                .lines()
                .find(|l| l.starts_with("route "))
                .unwrap_or("");
            let worst = number_after(line, "worst ").unwrap_or(f64::MAX);
            let before = number_after(line, "ours: ").unwrap_or(0.0);
            table.push(format!("{route:16} {arm:?}: {line}"));
            match arm {
                Arm::Plain => plain_out = Some(r.stdout.clone()),
                _ if before < 1.0 => {
                    wrong.push(format!("{route} {arm:?}: no thread of ours ran: {line}"))
                }
                _ if worst > bound => {
                    wrong.push(format!("{route} {arm:?}: over {bound} ms: {line}"))
                }
                _ => {}
            }
            if plain_out.as_ref().is_some_and(|p| *p != r.stdout) {
                wrong.push(format!(
                    "{route} {arm:?}: stdout {:?} where plainly {plain_out:?}",
                    r.stdout
                ));
            }
        }
    }
    println!("routes:\n  {}", table.join("\n  "));
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
