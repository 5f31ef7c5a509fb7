//! What a hostile review found, a mode of tests/c/lazy_review.c each.

use super::*;

/// Runs lazy_review.c's `args` with `env`.
fn review(b: &Built, args: &[&str], env: &[(&str, &str)]) -> Run {
    let exe = b.review.to_str().unwrap();
    run_as(b, exe, args, env, Duration::from_secs(120))
}

/// Found by a hostile review: under `mlockall` the reserve's give-back
/// failed (EINVAL), and the slots were marked empty with the program's
/// freed bytes still in them, which a fill kept and handed out.
#[test]
fn a_give_back_under_mlockall_hands_out_no_old_bytes() {
    let Some(b) = available() else { return };
    let _s = serial();
    let env = [
        ("PREZERO_RESERVE", "256M"),
        ("PREZERO_IDLE_SECS", "1"),
        ("PREZERO_CAP", "0"),
    ];
    let r = review(b, &["lockdrop", "256"], &env);
    r.ok();
    if r.stdout.contains("skipped") {
        child_skip("lockdrop", &r.stdout);
    } else {
        let s = r.lazy();
        // Before 6.14 moved huge pages arrive split (the faulting block's
        // page table stays), and only whole ones go back to the reserve:
        // the scenario cannot arise there.
        if s.notes.contains("arrived split") {
            skip(
                "kernel",
                "the recycled part (moved huge pages arrive split here)",
            );
        } else {
            assert!(s.recycled > 0, "nothing waited in the reserve: {s:?}");
        }
        // MADV_DONTNEED_LOCKED gave the locked slots back.
        assert!(s.gave_back > 0, "{s:?}");
    }
}

/// Found by a hostile review: the pages of a mapping the program unmapped
/// moved into the reserve while a pipe (`vmsplice`) still held them, which
/// then delivered the bytes of the memory they were handed to next. The
/// program's unmaps move nothing back now.
#[test]
fn a_pipe_delivers_the_bytes_of_a_mapping_unmapped_after_vmsplice() {
    let Some(b) = available() else { return };
    let _s = serial();
    let r = review(b, &["vmsplice", "64"], &[]);
    r.ok();
    if r.stdout.contains("skipped") {
        child_skip("vmsplice", &r.stdout);
    } else {
        let s = r.lazy();
        assert!(s.moved > 0 && s.recycled == 0, "{s:?}");
    }
}

/// Found by a hostile review: `mmap(MAP_FIXED)` (EBADF, EACCES), `munmap`
/// and `madvise` (EINVAL) and `mremap` (EINVAL, EFAULT) that failed had
/// already moved the pages they were given into the reserve (the program's
/// bytes lost) and taken them out of the table (their untouched blocks
/// served a small page per fault from then on).
#[test]
fn calls_that_fail_keep_the_memory_and_its_registration() {
    let Some(b) = available() else { return };
    let _s = serial();
    let s = review(b, &["failcalls"], &[]).ok().lazy();
    // Six mappings of 16 MiB, aligned: 48 blocks, every fault a block's
    // (a page's each where the table lost them: thousands).
    assert!(s.faults < 512, "{s:?}");
}

/// Found by a hostile review: after the program closed every descriptor
/// (`close_range`) and opened a pipe at the userfaultfd's number, the
/// handler read the pipe's bytes; with /dev/null there it spun on its end.
/// The handler looks at the descriptor before each read and stops the lazy
/// mode when it is not the userfaultfd any more.
#[test]
fn a_descriptor_the_program_reuses_is_not_read() {
    let Some(b) = available() else { return };
    let _s = serial();
    review(b, &["closefds"], &[]).ok();
    review(b, &["devnull"], &[]).ok();
}

/// Found by a hostile review: two hangs on the lock (`POP`) that orders the
/// handler's look at a block against the program's mapping calls. A thread
/// whose stack is a registered mapping held it in `munmap` while the kernel
/// read the call's argument from an untouched block of that stack: a fault
/// the handler waited on the lock to answer. And the program's fork
/// handlers, run inside ours (which hold it across `fork`), mapped. The
/// handler now waits for the lock a millisecond at most, then serves the
/// page alone; the thread that holds it across `fork` has it.
#[test]
fn a_stack_in_registered_memory_and_fork_handlers_that_map_do_not_hang() {
    let Some(b) = available() else { return };
    let _s = serial();
    let exe = b.review.to_str().unwrap();
    run_as(
        b,
        exe,
        &["stack", "0", "4096"],
        &[],
        Duration::from_secs(60),
    )
    .ok();
    run_as(b, exe, &["atfork"], &[], Duration::from_secs(30)).ok();
}

/// Found by a hostile review: only a mapping's 2 MiB-aligned interior was
/// registered and advised, which split a mapping of no multiple of 2 MiB
/// (or off a boundary) in three, and `mremap` of the whole failed (EFAULT).
#[test]
fn mremap_of_a_mapping_with_edges_moves_it_whole() {
    let Some(b) = available() else { return };
    let _s = serial();
    review(b, &["mremap-edges"], &[]).ok();
}

/// The history file (`PREZERO_HISTORY`) is written only where it is one:
/// a name of 16 hex digits in a directory `history` of the caller's own
/// (no access for others), a regular file holding a figure or nothing.
/// A hostile environment naming another file, a link, or a directory
/// others can write gets nothing written.
#[test]
fn the_history_writes_only_its_own_files() {
    use std::os::unix::fs::{symlink, DirBuilderExt, PermissionsExt};
    let Some(b) = available() else { return };
    let _s = serial();
    let tmp = prezero_testkit::TempDir::new("lazy-history");
    let private = tmp.join("own/history");
    let open = tmp.join("open/history");
    for (dir, mode) in [(&private, 0o700), (&open, 0o755)] {
        std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
        std::fs::DirBuilder::new().mode(mode).create(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let precious = tmp.join("precious");
    std::fs::write(&precious, "root:x:0:0\n").unwrap();
    let not_a_figure = private.join("0123456789abcdef");
    std::fs::write(&not_a_figure, "root:x:0:0\n").unwrap();
    let link = private.join("00000000000000aa");
    symlink(&precious, &link).unwrap();
    let run_naming = |file: &std::path::Path| {
        lazy(
            b,
            &["zero", "1"],
            &[("PREZERO_HISTORY", file.to_str().unwrap())],
        )
        .ok();
    };
    // Its own file: created, private, a figure of the blocks served.
    let own = private.join("fedcba9876543210");
    run_naming(&own);
    let text = std::fs::read_to_string(&own).unwrap();
    let figure: u64 = text.strip_suffix('\n').unwrap().parse().unwrap();
    assert!(figure >= 2 << 20, "{text:?}");
    let mode = std::fs::metadata(&own).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // Anything else: untouched, or never made.
    for file in [&precious, &not_a_figure, &link] {
        run_naming(file);
    }
    run_naming(&open.join("fedcba9876543210"));
    run_naming(&tmp.join("own/fedcba9876543210"));
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "root:x:0:0\n");
    assert_eq!(
        std::fs::read_to_string(&not_a_figure).unwrap(),
        "root:x:0:0\n"
    );
    assert!(!open.join("fedcba9876543210").exists());
    assert!(!tmp.join("own/fedcba9876543210").exists());
}
