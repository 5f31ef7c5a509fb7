//! Ordinary programs (tests/c/lazy_plain.c) end as they do plainly, and what
//! the preload holds the kernel may take back.

use super::*;

/// Ordinary things programs do (tests/c/lazy_plain.c) end as they do
/// plainly: same exit, same output. Before, under the lazy mode: a seccomp
/// filter that refuses ioctl hung the program (its faults unanswered), one
/// that kills on userfaultfd(2) killed it at start, a fork prepare handler
/// waiting on a thread that maps deadlocked, closing every descriptor while
/// a child held copies hung it, under RLIMIT_DATA its mmap failed (the
/// reserve counted as data), a guard page's marker was filled over (written
/// without a fault), and a locked mapping grown in place took 8.7 s against
/// 46 ms (its growth served a page per fault behind the lock mremap held):
/// now no fault of it reaches the handler; a mapping placed right after a
/// registered one did not merge with it, so one mremap of both was EFAULT;
/// PR_SET_THP_DISABLE was ignored (18 of 40 MiB in huge pages, none
/// plainly); MADV_COLLAPSE of registered memory was EINVAL. Where the lazy
/// mode steps aside it says why on stderr. With the preload's threads
/// running, under either mode, `unshare(CLONE_NEWUSER)` was EINVAL and a
/// setpriv-style drop aborted (glibc's setresgid failed on a thread of
/// ours). Our threads hold no capability now, and stop around a `set*id`
/// and an `unshare` of a user namespace, starting again after it (the
/// handler hands what it serves to the kernel first: a thread faulting in
/// the kernel could not answer glibc's signal with the handler gone);
/// tests/guest/ checks every route. `mincore` counted the blocks
/// readahead had moved in ahead of the program's writes (3072 pages
/// resident after 2048 written): there is no readahead now.
/// The same under the preload without the lazy mode (`prezero run`).
#[test]
fn ordinary_programs_behave_as_they_do_plainly() {
    let Some(b) = available() else { return };
    let _s = serial();
    let exe = b.plain.to_str().unwrap();
    let timeout = Duration::from_secs(60);
    let modes: [(&str, &[(&str, &str)]); 16] = [
        ("unshare-user", &[]),
        ("setpriv", &[]),
        ("initgroups", &[]),
        ("cap-drop", &[]),
        ("setid-fault", &[]),
        ("mincore", &[]),
        ("seccomp-ioctl", &[]),
        ("seccomp-kill", &[]),
        ("fork-worker", &[]),
        ("closefds-child", &[]),
        // The default reserve (up to 1 GiB), as prezero run --lazy has it.
        ("rlimit-data", &[("PREZERO_RESERVE", "")]),
        ("mlock-mremap", &[]),
        ("guard", &[]),
        ("merged-mremap", &[]),
        ("thp-disable", &[]),
        ("collapse", &[]),
    ];
    let mut differ = Vec::new();
    for (mode, env) in modes {
        let mut cmd = clean_command(exe);
        cmd.arg(mode);
        let plain = finish(&mut cmd, format!("{exe} {mode}"), timeout);
        let lazy = run_as(b, exe, &[mode], env, timeout);
        let cache = run_as(b, exe, &[mode], &[("PREZERO_LAZY", "0")], timeout);
        if plain.code != cache.code || plain.stdout != cache.stdout {
            differ.push(format!(
                "{mode}: plainly exit {:?}, stdout\n{}\nunder the preload exit {:?}, stdout\n{}",
                plain.code, plain.stdout, cache.code, cache.stdout
            ));
        }
        println!(
            "{mode}: plain {:?} {:?}, lazy {:?} {:?} {:?}",
            plain.code,
            plain.stdout.trim(),
            lazy.code,
            lazy.stdout.trim(),
            lazy.stderr
                .lines()
                .filter(|l| l.starts_with("prezero: --lazy"))
                .collect::<Vec<_>>()
        );
        child_skip(mode, &lazy.stdout);
        if mode == "unshare-user" && !lazy.stdout.starts_with("skipped") {
            // The case is real: the preload's threads ran at the call. (Not
            // so at setpriv's last call: its first set*id stopped them, and
            // nothing started them again; tests/guest/'s routes hold the
            // case with them running.)
            let threads = |r: &Run| {
                r.stderr
                    .lines()
                    .find_map(|l| l.split("Threads:").nth(1)?.trim().parse::<u32>().ok())
            };
            assert!(threads(&lazy) > Some(1), "{mode}: {}", lazy.stderr);
            assert!(threads(&cache) > Some(1), "{mode}: {}", cache.stderr);
        }
        if mode == "mlock-mremap" && !lazy.stdout.starts_with("skipped") {
            let s = lazy.lazy();
            assert_eq!(s.faults, 0, "the locked mapping's faults: {s:?}");
        }
        if plain.code != lazy.code || plain.stdout != lazy.stdout {
            differ.push(format!(
                "{mode}: plainly exit {:?}, stdout\n{}\nunder the lazy mode exit {:?} signal \
                 {:?}, stdout\n{}\nstderr\n{}",
                plain.code, plain.stdout, lazy.code, lazy.signal, lazy.stdout, lazy.stderr
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n\n"));
}

/// What the preload holds for later is memory the kernel can take back:
/// scrubbed blocks of the cache and the lazy reserve's slots are marked free
/// (LazyFree), and after every private writable mapping is paged out (as a
/// machine short of memory does to clean pages) new blocks and mappings
/// read zero, with and without the lazy mode; under it, the handler finds
/// the slots the kernel took and takes small pages instead.
#[test]
fn the_kernel_takes_back_what_the_preload_holds() {
    let Some(b) = available() else { return };
    let _s = serial();
    lazy(
        b,
        &["reclaim"],
        &[("PREZERO_LAZY", "0"), ("PREZERO_RESERVE", "128M")],
    )
    .ok();
    let s = lazy(b, &["reclaim"], &[("PREZERO_RESERVE", "128M")])
        .ok()
        .lazy();
    let took = s.note("reserve slots the kernel took back");
    assert!(took > 0, "{s:?}");
}
