//! The preload's lazy mode (`PREZERO_LAZY=1`: page faults served from a reserve
//! of zeroed pages, with userfaultfd and `UFFDIO_MOVE`) against C programs:
//! tests/c/lazy_stress.c (one mode per run: see its header),
//! tests/c/lazy_review.c (what a hostile review found, a mode each),
//! tests/c/lazy_plain.c (programs that must behave as they do plainly),
//! tests/c/preload_stress.c's modes run again under the lazy mode,
//! tests/c/uffd_probe.c (the kernel's side of it), and a JVM when there is one.
//!
//! Each program runs as `prezero run --lazy` runs it: the preload in
//! `LD_PRELOAD`, `PREZERO_LAZY=1`, and `PREZERO_PREFILL_PID` naming the
//! program's own process (a shell sets it to its pid and execs the program),
//! so its reserve fills from start-up and it says why if it cannot run. A
//! small reserve (64 MiB) makes the programs run it dry and recycle.
//!
//! Where userfaultfd is not allowed or the kernel has no `UFFDIO_MOVE`, the
//! tests of the mechanism skip (`uffd`) with the program's own reason and
//! pass; the fallback's test runs everywhere.

mod common;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use common::{can_build, finish, gcc, profile_dir, serial, shared_object, sources, Run};
use prezero_testkit::skip;

struct Built {
    so: PathBuf,
    lazy: PathBuf,
    stress: PathBuf,
    review: PathBuf,
    plain: PathBuf,
    probe: Option<PathBuf>,
}

/// Builds everything once; `None` (with the reason printed) without gcc.
fn built() -> Option<&'static Built> {
    static BUILT: OnceLock<Result<Built, String>> = OnceLock::new();
    let b = BUILT.get_or_init(|| {
        can_build()?;
        let dir = profile_dir().join("lazy-c");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let src = sources();
        let build = |name: &str, extra: &[&str]| {
            let out = dir.join(name);
            let c = src.join(format!("{name}.c"));
            let mut args = vec!["-O2", "-g", "-Wall", "-Wextra", "-pthread"];
            args.extend([c.to_str().unwrap(), "-o", out.to_str().unwrap()]);
            args.extend(extra);
            gcc(&args).map(|()| out)
        };
        Ok(Built {
            so: shared_object(),
            lazy: build("lazy_stress", &[]).expect("compile lazy_stress.c"),
            stress: build("preload_stress", &["-ldl"]).expect("compile preload_stress.c"),
            review: build("lazy_review", &[]).expect("compile lazy_review.c"),
            plain: build("lazy_plain", &[]).expect("compile lazy_plain.c"),
            // x86_64 only (streaming stores from immintrin.h).
            probe: cfg!(target_arch = "x86_64")
                .then(|| build("uffd_probe", &[]).expect("compile uffd_probe.c")),
        })
    });
    match b {
        Ok(b) => Some(b),
        Err(why) => {
            skip("tool", why);
            None
        }
    }
}

/// The lazy mode's lines in a run's output.
trait LazyLines {
    /// The lazy mode's lines (one per process that used it).
    fn lazy_lines(&self) -> Vec<&str>;
    /// The numbers of the last lazy line (the program's own: children print
    /// theirs first), by name.
    fn lazy(&self) -> Lazy;
}

impl LazyLines for Run {
    fn lazy_lines(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| l.starts_with("prezero-preload: lazy: pid "))
            .collect()
    }

    fn lazy(&self) -> Lazy {
        let lines = self.lazy_lines();
        let line = lines
            .last()
            .unwrap_or_else(|| panic!("{}: no lazy line in:\n{}", self.what, self.stderr));
        Lazy::parse(line).unwrap_or_else(|e| panic!("{}: {e}", self.what))
    }
}

/// The lazy mode's summary line.
#[derive(Debug)]
struct Lazy {
    faults: u64,
    moved: u64,
    small: u64,
    recycled: u64,
    filled: u64,
    scrubbed: u64,
    gave_back: u64,
    mappings: u64,
    /// What follows the numbers, as "; ..." notes.
    notes: String,
}

impl Lazy {
    const TEMPLATE: &'static str = "prezero-preload: lazy: pid #: # faults: # blocks moved in \
        (# of small pages, # scrubbed on demand), # blocks copied from zeroes, \
        # small pages; # moved back; reserve filled # (# with small pages), scrubbed #, gave back \
        #; # mappings registered";

    fn parse(line: &str) -> Result<Lazy, String> {
        // Notes that follow where they apply: moved huge pages arrived split
        // (before 6.14, see `the_kernel_moves_huge_pages_whole`), faults
        // handed to the kernel, reserve slots the kernel took back.
        let end = line
            .find(" mappings registered")
            .map_or(line.len(), |i| i + " mappings registered".len());
        let (line, notes) = line.split_at(end);
        if !notes.is_empty() && !notes.starts_with("; ") {
            return Err(format!("notes that do not start with '; ': {notes}"));
        }
        let mut shape = String::new();
        let mut nums = Vec::new();
        let mut digits = String::new();
        for c in line.chars().chain(std::iter::once('\n')) {
            if c.is_ascii_digit() {
                digits.push(c);
                continue;
            }
            if !digits.is_empty() {
                nums.push(digits.parse::<u64>().map_err(|e| e.to_string())?);
                digits.clear();
                shape.push('#');
            }
            if c != '\n' {
                shape.push(c);
            }
        }
        if shape != Self::TEMPLATE {
            return Err(format!(
                "the line\n  {line}\nhas the shape\n  {shape}\nnot\n  {}",
                Self::TEMPLATE
            ));
        }
        Ok(Lazy {
            faults: nums[1],
            moved: nums[2],
            small: nums[6],
            recycled: nums[7],
            filled: nums[8],
            scrubbed: nums[10],
            gave_back: nums[11],
            mappings: nums[12],
            notes: notes.to_owned(),
        })
    }

    /// The number of the note that ends with `what` ("reserve slots the
    /// kernel took back"), 0 without one.
    fn note(&self, what: &str) -> u64 {
        self.notes
            .split("; ")
            .find_map(|n| n.strip_suffix(what)?.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// `program` in a process group of its own, its output read, without the
/// preload or any PREZERO_ variable of the test's environment.
fn clean_command(program: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("PREZERO_") || k == "LD_PRELOAD" {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// Runs `exe args` as `prezero run --lazy` would (see the module docs), with
/// `env` on top of a clean environment.
fn run_as(b: &Built, exe: &str, args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Run {
    let mut cmd = clean_command("sh");
    cmd.arg("-c")
        .arg("PREZERO_PREFILL_PID=$$ exec \"$@\"")
        .arg("sh")
        .arg(exe)
        .args(args);
    cmd.env("LD_PRELOAD", &b.so)
        .env("PREZERO_LAZY", "1")
        .env("PREZERO_STATS", "1")
        .env("PREZERO_RESERVE", "64M");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let what = format!(
        "{}PREZERO_LAZY=1 {exe} {}",
        env.iter()
            .map(|(k, v)| format!("{k}={v} "))
            .collect::<String>(),
        args.join(" ")
    );
    finish(&mut cmd, what, timeout)
}

fn lazy(b: &Built, args: &[&str], env: &[(&str, &str)]) -> Run {
    run_as(
        b,
        b.lazy.to_str().unwrap(),
        args,
        env,
        Duration::from_secs(120),
    )
}

/// The built programs, if the lazy mode runs here; else `None`, with the
/// program's own reason printed as the skip.
fn available() -> Option<&'static Built> {
    static WHY: OnceLock<Option<String>> = OnceLock::new();
    let b = built()?;
    let why = WHY.get_or_init(|| {
        let r = lazy(b, &["zero", "0"], &[]);
        r.ok();
        r.stderr
            .lines()
            .find(|l| l.starts_with("prezero: --lazy: "))
            .map(str::to_owned)
    });
    match why {
        None => Some(b),
        Some(why) => {
            skip("uffd", format!("the lazy mode does not run here: {why}"));
            None
        }
    }
}

/// Builds the C programs (and the shared object) the other tests run: the
/// guest harness runs this on the host first, since the guests have no
/// compiler.
#[test]
fn the_c_test_programs_build() {
    built();
}

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

#[test]
fn mremap_moves_and_madvise_hugepage_stays_undone() {
    let Some(b) = available() else { return };
    let _s = serial();
    lazy(b, &["mremap"], &[]).ok();
    let r = lazy(b, &["hugepage"], &[]);
    r.ok();
    assert!(r.stdout.contains("nh=1 hg=0"), "{}", r.stdout);
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

/// Counts the skip a C program's mode reported on its stdout (`skipped:
/// REASON`, its protocol), if any. Its kind from the reason: the programs
/// skip for want of root (or of the memlock limit root lifts), else for
/// what the kernel does not allow.
fn child_skip(mode: &str, stdout: &str) {
    let Some(why) = stdout.lines().find_map(|l| l.strip_prefix("skipped: ")) else {
        return;
    };
    let kind = if why.contains("not root") || why.starts_with("mlock") {
        "root"
    } else {
        "kernel"
    };
    skip(kind, format!("{mode}: {why}"));
}

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

/// A memory cgroup of `bytes` made for this test (v1's memory hierarchy, or
/// v2's), to be removed after: where it was made and the file that takes a
/// process; `None` where it cannot be (not root, no memory controller).
fn memcg(bytes: usize) -> Option<(PathBuf, PathBuf)> {
    let name = format!("prezero-lazy-test-{}", std::process::id());
    for (root, limit) in [
        ("/sys/fs/cgroup/memory", "memory.limit_in_bytes"),
        ("/sys/fs/cgroup", "memory.max"),
    ] {
        let dir = PathBuf::from(root).join(&name);
        if std::fs::create_dir(&dir).is_err() {
            continue;
        }
        if std::fs::write(dir.join(limit), bytes.to_string()).is_ok() {
            let procs = dir.join("cgroup.procs");
            return Some((dir, procs));
        }
        let _ = std::fs::remove_dir(&dir);
    }
    None
}

/// Found by a hostile review: the default reserve was sized by the
/// machine's memory alone, and filled in a container of 512 MiB it got a
/// program of 200 MiB killed for memory. It is at most 10% of what the
/// cgroup has left now.
#[test]
fn the_default_reserve_fits_the_memory_cgroup() {
    let Some(b) = available() else { return };
    let _s = serial();
    let Some((dir, procs)) = memcg(512 << 20) else {
        skip("memcg", "no memory cgroup could be made here (not root?)");
        return;
    };
    let script = format!("echo $$ > {} && exec \"$0\" memcg", procs.display());
    let exe = b.review.to_str().unwrap();
    // No PREZERO_RESERVE: the default.
    let r = run_as(
        b,
        "sh",
        &["-c", &script, exe],
        &[("PREZERO_RESERVE", "")],
        Duration::from_secs(60),
    );
    let _ = std::fs::remove_dir(&dir);
    r.ok();
}

#[test]
fn the_fallback_says_why_once_and_the_program_runs() {
    let Some(b) = built() else { return };
    let _s = serial();
    let r = lazy(b, &["fork"], &[("PREZERO_NO_USERFAULTFD", "1")]);
    r.ok();
    let said: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("prezero: --lazy: "))
        .collect();
    assert_eq!(
        said,
        ["prezero: --lazy: userfaultfd disabled (PREZERO_NO_USERFAULTFD=1); running as prezero run does"],
        "{}",
        r.stderr
    );
    assert!(r.lazy_lines().is_empty(), "{}", r.stderr);
}

/// The running kernel's (major, minor).
fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (next(), next())
}

#[test]
fn the_lazy_line_parses() {
    let s = Lazy::parse(
        "prezero-preload: lazy: pid 7: 10 faults: 9 blocks moved in (2 of small pages, 1 \
         scrubbed on demand), 2 blocks copied from zeroes, 512 small pages; 4 moved back; \
         reserve filled 20 (5 with small pages), scrubbed 4, gave back 0; 1 mappings registered",
    )
    .unwrap();
    assert_eq!((s.faults, s.moved, s.small), (10, 9, 512));
    assert_eq!(
        (s.recycled, s.filled, s.scrubbed, s.gave_back, s.mappings),
        (4, 20, 4, 0, 1)
    );
    let split = Lazy::parse(
        "prezero-preload: lazy: pid 7: 1 faults: 1 blocks moved in (0 of small pages, 0 \
         scrubbed on demand), 0 blocks copied from zeroes, 0 small pages; 0 moved \
         back; reserve filled 1 (0 with small pages), scrubbed 0, gave back 0; 1 mappings \
         registered; moved huge pages arrived split: they move a page at a time",
    );
    let split = split.unwrap();
    assert_eq!(split.moved, 1);
    assert_eq!(split.note("reserve slots the kernel took back"), 0);
    let took = Lazy::parse(
        "prezero-preload: lazy: pid 7: 1 faults: 1 blocks moved in (0 of small pages, 0 \
         scrubbed on demand), 0 blocks copied from zeroes, 0 small pages; 0 moved \
         back; reserve filled 1 (0 with small pages), scrubbed 0, gave back 0; 1 mappings \
         registered; 3 faults handed to the kernel; 22 reserve slots the kernel took back",
    )
    .unwrap();
    assert_eq!(took.note("reserve slots the kernel took back"), 22);
    assert_eq!(took.note("faults handed to the kernel"), 3);
    assert!(Lazy::parse("prezero-preload: lazy: pid 7: nothing").is_err());
}

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
/// ours). Our threads take the caller's credentials before a `set*id`
/// now (and serve faults meanwhile: a thread faulting in the kernel could
/// not answer glibc's signal with the handler stopped), drop within a
/// second what that caller drops after (ours kept every capability a
/// libcap-style drop took from it), and stop around an
/// `unshare` of a user namespace. `mincore` counted the blocks
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
        if matches!(mode, "unshare-user" | "setpriv") && !lazy.stdout.starts_with("skipped") {
            // The case is real: the preload's threads ran at the call.
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
