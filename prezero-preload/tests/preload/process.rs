//! Fork, signals, dlopen, foreign pointers.

use super::*;

#[test]
fn fork_with_and_without_exec_during_traffic() {
    let Some(b) = built() else { return };
    let _s = serial();
    run(b, &["fork", "3", "10"], &[LOW], true).ok();
    run(b, &["fork", "2", "6"], &[("PREZERO_PREFILL", "32M")], true).ok();
    // The child of a process whose scrubber is busy: a small idle time keeps
    // it giving memory back while the children are made.
    run(
        b,
        &["fork", "3", "6"],
        &[LOW, ("PREZERO_IDLE_SECS", "0"), ("PREZERO_CAP", "8M")],
        true,
    )
    .ok();
}

#[test]
fn a_timer_signal_storm_during_allocation() {
    let Some(b) = built() else { return };
    let _s = serial();
    run(b, &["signals", "4", "1500"], &[LOW], true).ok();
}

#[test]
fn dlopen_and_dlclose_of_libraries_that_allocate() {
    let Some(b) = built() else { return };
    let _s = serial();
    let lib = b.dl.to_str().unwrap();
    run(b, &["dlopen", lib, "12"], &[LOW, STATS], true).ok();
    // The process's first large free is in the destructor, inside dlclose:
    // the scrubber thread starts there.
    run(
        b,
        &["dlopen", lib, "1", "8388608"],
        &[("PRELOAD_DL_FINI_ONLY", "1")],
        true,
    )
    .ok();
    run(b, &["dlopen", lib, "3"], &[LOW], false).ok();
}

#[test]
fn frees_inside_the_range_that_are_not_blocks_are_ignored() {
    let Some(b) = built() else { return };
    let _s = serial();
    let r = run(b, &["badfree"], &[LOW, STATS], true);
    r.ok();
    assert_eq!(
        r.stats().bad_frees,
        4,
        "three inner pointers and a double free"
    );
    assert!(r.stdout.contains("usable inside a block: 0"));
    // glibc aborts on the same program (the first inner free).
    let plain = run(b, &["badfree"], &[LOW], false);
    assert!(plain.code != Some(0), "glibc took an inner pointer?");
}

#[test]
fn free_of_mmap_memory_ends_as_it_does_under_glibc() {
    let Some(b) = built() else { return };
    let _s = serial();
    let plain = run(b, &["mmapfree"], &[], false);
    let pre = run(b, &["mmapfree"], &[], true);
    assert_eq!(
        (plain.code, plain.signal),
        (pre.code, pre.signal),
        "glibc: {}\nprezero: {}",
        plain.stderr,
        pre.stderr
    );
    assert!(plain.signal.is_some(), "glibc let it live?");
}

#[test]
fn blocks_from_constructors_and_from_glibc_directly() {
    let Some(b) = built() else { return };
    let _s = serial();
    run(b, &["early"], &[LOW], false).ok();
    run(b, &["early"], &[LOW], true).ok();
    run(b, &["early"], &[], true).ok();
}

/// `free` keeps errno, as POSIX promises: the preload's reads of the
/// memory cgroup's files inside it (a hierarchy this host does not mount
/// answers ENOENT) must not leak their errno into the program's. Under the
/// lazy mode too, whose reserve reads the program's resident memory.
#[test]
fn free_keeps_errno() {
    let Some(b) = built() else { return };
    let _s = serial();
    run(b, &["errno"], &[LOW], false).ok();
    run(b, &["errno"], &[LOW], true).ok();
    run(b, &["errno"], &[LOW, ("PREZERO_LAZY", "1")], true).ok();
}
