//! Sanitizers and valgrind, and the symbols the library exports.

use super::*;

/// AddressSanitizer replaces malloc itself, so the preload under ASan would
/// test nothing of ours (and ASan refuses to run unless it is first in the
/// library list): the ASan build checks the test program (its canaries stay
/// inside the usable size, its patterns inside the blocks) against ASan's
/// allocator, without the preload. UndefinedBehaviorSanitizer leaves the
/// allocator alone: that build runs under the preload.
#[test]
fn sanitizer_builds_of_the_test_program() {
    let Some(b) = built() else { return };
    let _s = serial();
    let asan = b.dir.join("preload_stress-asan");
    let ubsan = b.dir.join("preload_stress-ubsan");
    let common = ["-O1", "-g", "-pthread", "-fno-omit-frame-pointer"];
    let mut args: Vec<&str> = common.to_vec();
    args.extend(["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]);
    let run_as = |exe: &Path, args: &[&str], env: &[(&str, &str)], preload: bool| {
        let b2 = Built {
            so: b.so.clone(),
            stress: exe.to_path_buf(),
            dl: b.dl.clone(),
            dir: b.dir.clone(),
        };
        run(&b2, args, env, preload)
    };
    match build_stress(&asan, &args) {
        Err(e) => prezero_testkit::skip("tool", format!("the ASan build of preload_stress.c: {e}")),
        Ok(()) => {
            // Not the modes early (its __libc_malloc blocks are not ASan's
            // to free), huge and align (about glibc's answers, not the
            // program; ASan's own allocator trips a CHECK on
            // posix_memalign(2^63, 0)) and fork (gcc 12's ASan deadlocks in
            // a child forked while other threads allocate: its allocator's
            // size-class lock is held across fork).
            let env = [
                LOW,
                ("ASAN_OPTIONS", "detect_leaks=0:allocator_may_return_null=1"),
            ];
            for mode in [
                &["mix", "4", "800", "1"][..],
                &["realloc"],
                &["signals", "2", "500"],
            ] {
                run_as(&asan, mode, &env, false).ok();
            }
        }
    }
    let mut args: Vec<&str> = common.to_vec();
    args.extend(["-fsanitize=undefined", "-fno-sanitize-recover=all"]);
    match build_stress(&ubsan, &args) {
        Err(e) => {
            prezero_testkit::skip("tool", format!("the UBSan build of preload_stress.c: {e}"))
        }
        Ok(()) => {
            for mode in [&["mix", "4", "800", "1"][..], &["realloc"], &["early"]] {
                run_as(&ubsan, mode, &[LOW], true).ok();
            }
        }
    }
}

/// Valgrind's memcheck under the preload. Memcheck replaces malloc in libc
/// and in the objects `somalloc` names, whose default `NONE` matches every
/// object without a DT_SONAME, ours included: `--soname-synonyms=somalloc=`
/// a name nothing has keeps its hands off ours. So the program calls our
/// malloc, ours calls "glibc's" through dlsym(RTLD_NEXT), which is
/// memcheck's: small blocks are checked by memcheck, large ones come from our
/// range (an anonymous mapping to memcheck: defined, unchecked) and the stats
/// line shows the cache served them. Valgrind cannot place a 64 GiB
/// reservation; the preload then reserves less.
#[test]
fn valgrind_memcheck_under_the_preload() {
    let Some(b) = built() else { return };
    let _s = serial();
    if Command::new("valgrind").arg("--version").output().is_err() {
        prezero_testkit::skip("tool", "valgrind is not installed (.ci/run installs it)");
        return;
    }
    let vg = [
        "valgrind",
        "--error-exitcode=9",
        "--soname-synonyms=somalloc=no-such-object",
        "--leak-check=no",
        "--track-origins=no",
        "-q",
    ];
    let vg_env = ("PRELOAD_TEST_VALGRIND", "1");
    for (mode, env) in [
        (&["mix", "2", "300", "5"][..], &[LOW, STATS][..]),
        (&["realloc"], &[LOW, STATS, vg_env]),
        (&["early"], &[LOW, STATS]),
    ] {
        let r = run_with(b, &vg, mode, env, true, Duration::from_secs(300));
        r.ok();
        let s = r.stats();
        assert!(
            s.served > 0,
            "the cache served nothing under valgrind: {s:?}"
        );
        assert!(!r.stderr.contains("=="), "memcheck reported:\n{}", r.stderr);
    }
}

/// A library preloaded into every program exports the allocator's entry
/// points, the mapping calls the lazy mode takes, the descriptor calls that
/// would close its descriptors, the locking calls, the calls that change
/// who the program is, which its threads follow (`set*id`, `setgroups`,
/// `initgroups`, `unshare`, `setns`, `prctl`, and `syscall` for any of
/// these made through it), and nothing else: not
/// prezero's `pz_*` C API, which rustc's version script would export from a
/// dependency built with it.
#[test]
fn exports_only_the_allocator() {
    let Some(b) = built() else { return };
    let out = match Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&b.so)
        .output()
    {
        Ok(o) if o.status.success() => o,
        _ => {
            prezero_testkit::skip("tool", "no nm to list the exports");
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut functions: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" T "))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    functions.sort_unstable();
    assert_eq!(
        functions,
        [
            "aligned_alloc",
            "calloc",
            "close",
            "close_range",
            "closefrom",
            "dup2",
            "dup3",
            "free",
            "initgroups",
            "madvise",
            "malloc",
            "malloc_usable_size",
            "memalign",
            "mlock",
            "mlock2",
            "mlockall",
            "mmap",
            "mmap64",
            "mremap",
            "munlockall",
            "munmap",
            "posix_memalign",
            "prctl",
            "pvalloc",
            "realloc",
            "reallocarray",
            "setegid",
            "seteuid",
            "setgid",
            "setgroups",
            "setns",
            "setregid",
            "setresgid",
            "setresuid",
            "setreuid",
            "setuid",
            "syscall",
            "unshare",
            "valloc",
        ]
    );
}

/// The allocator's entry points, which the library defines (interposes) and
/// so must never import: a call to one from inside the library reaches its
/// own, and the next allocator only through `dlsym(RTLD_NEXT)` (`next.rs`).
const MALLOC_FAMILY: [&str; 11] = [
    "malloc",
    "calloc",
    "realloc",
    "free",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "valloc",
    "pvalloc",
    "reallocarray",
    "malloc_usable_size",
];

/// glibc's own allocator under other names: a call to one would pass by the
/// next allocator (jemalloc preloaded after us, say), and by our own.
const GLIBC_ALLOCATOR: [&str; 7] = [
    "__libc_malloc",
    "__libc_calloc",
    "__libc_realloc",
    "__libc_free",
    "__libc_memalign",
    "__libc_valloc",
    "__libc_pvalloc",
];

/// C library calls that allocate with `malloc` by design (what they return
/// is the caller's to `free`, or a heap object such as a `FILE`): inside
/// `malloc` they would call `malloc`. None is imported today; `realpath`,
/// `getcwd` and `opendir`, which may allocate too, are, from std and the
/// library's start-up reads, off the allocation paths, and not listed.
const ALLOCATING_CALLS: [&str; 24] = [
    "strdup",
    "strndup",
    "wcsdup",
    "asprintf",
    "vasprintf",
    "getline",
    "getdelim",
    "open_memstream",
    "fopen",
    "fopen64",
    "fdopen",
    "freopen",
    "popen",
    "scandir",
    "scandir64",
    "glob",
    "glob64",
    "backtrace_symbols",
    "getpwnam",
    "getpwuid",
    "getgrnam",
    "getgrgid",
    "setenv",
    "putenv",
];

/// The no-malloc contract (`lib.rs`), where the dynamic symbol table can
/// show it: the malloc family is defined here and never imported, glibc's
/// allocator is not called by its own names, and no C library call that
/// allocates by design is imported. (A call to `malloc` from inside the
/// library binds to its own definition, so no table can show that one:
/// the contract's other half is the code's.)
#[test]
fn imports_no_allocator() {
    let so = shared_object();
    let nm = |only: &str| {
        let out = Command::new("nm").args(["-D", only]).arg(&so).output();
        let out = out.ok().filter(|o| o.status.success())?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        // "<address> T name" or "U name@GLIBC_2.2.5": the last word, less
        // its version.
        let names = text
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .map(|n| n.split('@').next().unwrap_or(n).to_string())
            .collect::<Vec<_>>();
        Some(names)
    };
    let (Some(imported), Some(defined)) = (nm("--undefined-only"), nm("--defined-only")) else {
        prezero_testkit::skip("tool", "no nm to read the dynamic symbol table");
        return;
    };
    for f in MALLOC_FAMILY {
        assert!(
            defined.iter().any(|d| d == f),
            "{} does not define {f}: the program's calls of it pass the preload by",
            so.display()
        );
    }
    let forbidden: Vec<&String> = imported
        .iter()
        .filter(|i| {
            MALLOC_FAMILY.contains(&i.as_str())
                || GLIBC_ALLOCATOR.contains(&i.as_str())
                || ALLOCATING_CALLS.contains(&i.as_str())
        })
        .collect();
    assert!(
        forbidden.is_empty(),
        "{} imports {forbidden:?}, which allocate through malloc (the no-malloc contract, lib.rs)",
        so.display()
    );
}
