//! The mechanism against the programs: the kernel's moves (uffd_probe.c),
//! lazy_stress.c's modes, preload_stress.c's modes again, and a JVM.

use super::*;

#[test]
fn the_kernel_moves_huge_pages_whole() {
    let Some(b) = available() else { return };
    let Some(probe) = &b.probe else {
        skip("cpu", "the probe is x86_64's");
        return;
    };
    let _s = serial();
    let out = Command::new(probe)
        .arg("32")
        .output()
        .expect("run uffd_probe");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success());
    // Before 6.14 MADV_DONTNEED keeps a block's empty page table, and a
    // huge page moved over it arrives split (the lazy mode says so).
    let splits = kernel_version() < (6, 14);
    for line in text.lines().filter(|l| l.starts_with("move")) {
        assert!(line.ends_with("ok"), "{line}");
        // A reserve of huge pages gives huge pages; one of small pages, not.
        let small = line.starts_with("move-small");
        let whole = line.contains("huge 32/32 MiB");
        // Readahead races the faulting thread: woken by the first move, it
        // may reach the next block (and give it a page table) before that
        // block's huge page moves, which then arrives split: one block a
        // fault at most.
        let raced = line.starts_with("move-ra8") && {
            let num = |after: &str, upto: char| -> usize {
                let at = line.find(after).expect("field") + after.len();
                line[at..]
                    .split(upto)
                    .next()
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap()
            };
            num("huge ", '/') + 2 * num("(", ' ') >= 32
        };
        assert!(
            if small {
                !whole
            } else {
                whole || raced || splits
            },
            "{line}"
        );
    }
    assert!(
        splits
            || text
                .lines()
                .any(|l| l.starts_with("back") && l.contains("(huge 32 MiB)"))
    );
}

#[test]
fn every_byte_a_faulting_program_sees_is_zero() {
    let Some(b) = available() else { return };
    let _s = serial();
    // A small reserve: run dry, refilled.
    let s = lazy(b, &["zero", "3"], &[]).ok().lazy();
    assert!(s.moved > 0, "{s:?}");
    assert!(s.mappings >= 10, "{s:?}");
    // Every request through the cache, and a cap that makes it give back
    // at every free: into the reserve, to be scrubbed there, where it has
    // room. Whether it has depends on how far the worker filled it meanwhile
    // (CI once found it full at every free), so only the bytes are asserted
    // here; a_give_back_under_mlockall_hands_out_no_old_bytes holds the
    // recycling itself.
    let s = lazy(
        b,
        &["zero", "2"],
        &[("PREZERO_THRESHOLD", "64K"), ("PREZERO_CAP", "0")],
    )
    .ok()
    .lazy();
    assert!(s.moved > 0, "{s:?}");
    // The largest reserve a test makes: nothing recycled need wait.
    lazy(b, &["zero", "1"], &[("PREZERO_RESERVE", "1G")]).ok();
}

#[test]
fn fork_gives_the_child_its_own_memory_and_exec_a_fresh_start() {
    let Some(b) = available() else { return };
    let _s = serial();
    let r = lazy(b, &["fork"], &[]);
    r.ok();
    // The exec'd child runs the lazy mode itself; the forked one does not
    // (its copies are not registered), so it prints no line.
    assert_eq!(r.lazy_lines().len(), 2, "{}", r.stderr);
    assert!(r.lazy().faults > 0);
}

#[test]
fn threads_faulting_one_block_at_once() {
    let Some(b) = available() else { return };
    let _s = serial();
    lazy(b, &["threads", "8"], &[]).ok();
    lazy(b, &["threads", "2"], &[("PREZERO_THRESHOLD", "64K")]).ok();
}

/// Threads that fault one mapping at once while the reserve is empty (the
/// default reserve, which fills only once the program faults) get the
/// kernel's own faults, which run on every CPU, and every byte is right:
/// the mapping is handed over, and no fault read before or during that
/// waits for ever (the kernel's wake at unregister can miss one).
#[test]
fn threads_faulting_at_once_with_the_reserve_empty() {
    let Some(b) = available() else { return };
    let _s = serial();
    for _ in 0..3 {
        let r = lazy(b, &["pretouch", "2"], &[("PREZERO_RESERVE", "")]);
        r.ok();
        let s = r.lazy();
        let handed =
            s.note("mappings handed to the kernel (threads faulting at once, the reserve empty)");
        assert!(handed >= 1, "{s:?}");
        assert!(s.faults < 8192, "the kernel served most faults: {s:?}");
    }
}

#[test]
fn read_into_untouched_memory_from_the_kernel() {
    let Some(b) = available() else { return };
    let _s = serial();
    let s = lazy(b, &["read"], &[]).ok().lazy();
    assert!(s.faults > 0, "{s:?}");
}

#[test]
fn mprotect_mlock_and_a_signal_handler_touching_memory() {
    let Some(b) = available() else { return };
    let _s = serial();
    for mode in ["mprotect", "mlock", "signals"] {
        lazy(b, &[mode], &[]).ok();
    }
}

/// A registered mapping keeps `MADV_NOHUGEPAGE` after the program asks for
/// huge pages (the handler gives them); one handed to the kernel (where
/// moved huge pages arrive split, before 6.14) gets the program's advice
/// back, as plainly.
#[test]
fn mremap_moves_and_madvise_hugepage_stays_undone() {
    let Some(b) = available() else { return };
    let _s = serial();
    lazy(b, &["mremap"], &[]).ok();
    let r = lazy(b, &["hugepage"], &[]);
    r.ok();
    let handed = r
        .lazy()
        .note("mappings that asked for huge pages handed to the kernel");
    let want = if handed > 0 { "nh=0 hg=1" } else { "nh=1 hg=0" };
    assert!(r.stdout.contains(want), "{want}: {}", r.stdout);
}

#[test]
fn a_starved_handler_only_delays_faults() {
    let Some(b) = available() else { return };
    let _s = serial();
    let s = lazy(b, &["starved"], &[]).ok().lazy();
    assert!(s.faults > 0, "{s:?}");
}

/// preload_stress.c's modes (random traffic, fork during traffic, a signal
/// storm, realloc by mremap, mremap racing mmap) under the lazy mode, at a
/// threshold that sends most of their blocks through it.
#[test]
fn the_preload_stress_modes_under_the_lazy_mode() {
    let Some(b) = available() else { return };
    let _s = serial();
    let exe = b.stress.to_str().unwrap();
    let low = ("PREZERO_THRESHOLD", "64K");
    for args in [
        &["mix", "4", "500", "11"][..],
        &["fork", "2", "20"],
        &["signals", "2", "300"],
        &["realloc"],
        &["mremap-race", "2"],
        &["early"],
    ] {
        run_as(b, exe, args, &[low], Duration::from_secs(120)).ok();
    }
    // Slow under TCG (the guests), where each first touch of a block is a
    // fault served a page.
    let r = run_as(b, exe, &["vmas", "20000"], &[low], Duration::from_secs(300));
    r.ok();
    let text = &r.stdout;
    let num = |after: &str| -> f64 {
        let at = text.find(after).expect("vmas line") + after.len();
        text[at..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (before, after) = (num("vmas:"), num("before,"));
    assert!(after - before < 600.0, "{before} mappings became {after}");
}

/// A JVM commits its heap with `mmap(MAP_FIXED)` over a `PROT_NONE`
/// reservation and pre-touches it from several threads.
#[test]
fn a_jvm_with_a_pretouched_heap() {
    let Some(b) = available() else { return };
    if Command::new("java").arg("-version").output().is_err() {
        skip("tool", "no java");
        return;
    }
    let _s = serial();
    let args = ["-Xms1g", "-Xmx1g", "-XX:+AlwaysPreTouch", "-version"];
    let r = run_as(
        b,
        "java",
        &args,
        &[("PREZERO_RESERVE", "1G")],
        Duration::from_secs(120),
    );
    r.ok();
    let s = r.lazy();
    assert!(s.mappings > 0 && s.faults > 0, "{s:?}");
}
