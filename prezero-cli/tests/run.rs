//! `prezero run -- PROGRAM`: LD_PRELOAD set once and first, the program's own
//! entries kept, exit status and signals passed through, the summary line.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Output};

use prezero_testkit::TempDir;

fn prezero() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_prezero"));
    // The caller's environment must not decide the outcome.
    for v in [
        "LD_PRELOAD",
        "PREZERO_PRELOADED",
        "PREZERO_PRELOAD_LIB",
        "PREZERO_STATS",
    ] {
        c.env_remove(v);
    }
    c
}

fn run(args: &[&str]) -> Output {
    prezero().arg("run").args(args).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The entries of LD_PRELOAD as the program saw it.
fn preloaded(o: &Output) -> Vec<String> {
    assert!(o.status.success(), "{}", stderr(o));
    stdout(o)
        .split([':', ' '])
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect()
}

fn is_ours(entry: &str) -> bool {
    entry
        .rsplit('/')
        .next()
        .unwrap()
        .starts_with("libprezero_preload")
}

#[test]
fn ld_preload_holds_the_library_once_and_keeps_the_programs_own() {
    let o = run(&["--", "sh", "-c", "echo $LD_PRELOAD"]);
    let e = preloaded(&o);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(is_ours(&e[0]), "{e:?}");
    assert!(std::path::Path::new(&e[0]).is_file());

    // Nested: still once.
    let o = run(&[
        "--",
        env!("CARGO_BIN_EXE_prezero"),
        "run",
        "--threshold",
        "2M",
        "--",
        "sh",
        "-c",
        "echo $LD_PRELOAD",
    ]);
    let nested = preloaded(&o);
    assert_eq!(nested, e, "a nested run added it again");

    // The program's own entries stay, after ours.
    let libm = "/lib/x86_64-linux-gnu/libm.so.6";
    let other = if std::path::Path::new(libm).exists() {
        libm
    } else {
        "libm.so.6"
    };
    let o = prezero()
        .env("LD_PRELOAD", other)
        .args(["run", "--", "sh", "-c", "echo $LD_PRELOAD"])
        .output()
        .unwrap();
    let with_other = preloaded(&o);
    assert_eq!(with_other.len(), 2, "{with_other:?}");
    assert!(is_ours(&with_other[0]));
    assert_eq!(with_other[1], other);

    // An override by a name that is not ours: nested runs find it by the marker.
    let o = prezero()
        .env("PREZERO_PRELOAD_LIB", &e[0])
        .args([
            "run",
            "--",
            env!("CARGO_BIN_EXE_prezero"),
            "run",
            "--",
            "sh",
            "-c",
            "echo $LD_PRELOAD",
        ])
        .output()
        .unwrap();
    assert_eq!(preloaded(&o), e);
}

#[test]
fn flags_set_the_libraries_environment() {
    let o = run(&[
        "--threshold",
        "4M",
        "--cap",
        "1G",
        "--prefill",
        "0",
        "--idle",
        "9",
        "--stats",
        "--thp",
        "--",
        "sh",
        "-c",
        "env | grep ^PREZERO_ | sort",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let env = stdout(&o);
    for want in [
        "PREZERO_CAP=1073741824",
        "PREZERO_IDLE_SECS=9",
        "PREZERO_PREFILL=0",
        "PREZERO_STATS=1",
        "PREZERO_THP=1",
        "PREZERO_THRESHOLD=4194304",
    ] {
        assert!(env.lines().any(|l| l == want), "{want} missing in:\n{env}");
    }
    // The prefill is the program's alone: it keeps prezero's pid across the
    // exec, and the processes it starts have others.
    let o = run(&[
        "--prefill",
        "1M",
        "--",
        "sh",
        "-c",
        "echo $$ $PREZERO_PREFILL_PID",
    ]);
    let out = stdout(&o);
    let pids: Vec<&str> = out.split_whitespace().collect();
    assert!(pids.len() == 2 && pids[0] == pids[1], "{out}");
    let o = run(&["--threshold", "4K", "--", "true"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("at least 64K"), "{}", stderr(&o));
}

#[test]
fn exit_status_and_signals_pass_through() {
    assert_eq!(run(&["--", "sh", "-c", "exit 7"]).status.code(), Some(7));
    assert_eq!(run(&["--", "true"]).status.code(), Some(0));
    // exec: the program is the process, so its death by a signal is ours.
    let o = run(&["--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(o.status.signal(), Some(libc::SIGTERM), "{:?}", o.status);
    // stdin reaches the program.
    let mut child = prezero()
        .args(["run", "--", "cat"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"through\n").unwrap();
    assert_eq!(stdout(&child.wait_with_output().unwrap()), "through");
}

#[test]
fn a_program_that_cannot_run_is_127_or_126() {
    let o = run(&["--", "/nonexistent/program"]);
    assert_eq!(o.status.code(), Some(127));
    assert!(stderr(&o).contains("cannot run /nonexistent/program"));
    let dir = tempdir("noexec");
    let file = dir.join("not-executable");
    std::fs::write(&file, "#!/bin/sh\n").unwrap();
    let o = run(&["--", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(126), "{}", stderr(&o));
}

/// A directory of the calling test's own, removed when it ends, pass or fail.
fn tempdir(what: &str) -> TempDir {
    TempDir::new(&format!("run-{what}"))
}

/// The C program `source`, built with `cc` from PATH as `name` in a
/// directory that goes when the first value is dropped; None (the test
/// skips) without a compiler.
fn c_program(name: &str, source: &str) -> Option<(TempDir, PathBuf)> {
    let dir = tempdir(name);
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let exe = dir.join(name);
    match Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
    {
        Ok(s) if s.success() => Some((dir, exe)),
        _ => None,
    }
}

/// A C program that callocs 64 MiB twice (checking it is zero).
fn calloc_twice() -> Option<(TempDir, PathBuf)> {
    c_program(
        "calloc_twice",
        r#"#include <stdio.h>
#include <stdlib.h>
int main(void) {
    for (int r = 0; r < 2; r++) {
        size_t n = 64u << 20;
        unsigned char *p = calloc(1, n);
        if (!p) return 2;
        for (size_t i = 0; i < n; i += 4096) if (p[i]) return 1;
        for (size_t i = 0; i < n; i += 4096) p[i] = 1;
        free(p);
    }
    puts("ok");
    return 0;
}
"#,
    )
}

#[test]
fn stats_print_one_summary_line() {
    let Some((_dir, exe)) = calloc_twice() else {
        prezero_testkit::skip("tool", "no C compiler (cc) to build the calloc program");
        return;
    };
    let exe = exe.to_str().unwrap();
    let o = run(&["--stats", "--", exe]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "ok");
    let err = stderr(&o);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("prezero-preload: "))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains(" 2 large blocks served"), "{}", lines[0]);
    // Without --stats: nothing.
    let o = run(&["--", exe]);
    assert!(o.status.success());
    assert!(!stderr(&o).contains("prezero-preload"), "{}", stderr(&o));
}

/// The kernel's version, from uname(2).
fn kernel_version() -> (u32, u32) {
    // SAFETY: uname fills the struct it is given.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::uname(&mut u) };
    // SAFETY: uname NUL-terminates the release.
    let release = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }.to_string_lossy();
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (next(), next())
}

/// `--lazy` runs the program, and where the lazy mode cannot run (forced
/// here with PREZERO_NO_USERFAULTFD=1; for real on a kernel before 6.8,
/// which the guest tests boot) the program says why in one line and runs.
/// `--lazy` alone starts the mode at the program's first large block, so a
/// program that takes none hears nothing of it; `--reserve` starts it at load.
/// The program is this prezero binary itself: dynamically linked, so the
/// preload loads into it wherever the tests run (the guests' shell is a
/// static busybox).
#[test]
fn lazy_runs_the_program_or_says_once_why_not() {
    let me = env!("CARGO_BIN_EXE_prezero");
    let said = |o: &Output| -> Vec<String> {
        assert!(o.status.success(), "{}", stderr(o));
        assert!(stdout(o).starts_with("prezero "), "{}", stdout(o));
        stderr(o)
            .lines()
            .filter(|l| l.starts_with("prezero: --lazy: "))
            .map(str::to_owned)
            .collect()
    };
    let o = run(&["--lazy", "--", me, "--version"]);
    assert_eq!(said(&o), Vec::<String>::new(), "no large block, no word");
    let o = run(&["--lazy", "--reserve", "64M", "--", me, "--version"]);
    let why = said(&o);
    println!("{why:?}");
    if kernel_version() < (6, 8) {
        assert_eq!(why.len(), 1, "{}", stderr(&o));
        assert!(why[0].contains("no UFFDIO_MOVE"), "{}", why[0]);
        assert!(
            why[0].ends_with("; running as prezero run does"),
            "{}",
            why[0]
        );
    } else {
        assert!(why.len() <= 1, "{}", stderr(&o));
    }
    let o = prezero()
        .env("PREZERO_NO_USERFAULTFD", "1")
        .args(["run", "--lazy", "--reserve", "64M", "--", me, "--version"])
        .output()
        .unwrap();
    assert_eq!(
        said(&o),
        ["prezero: --lazy: userfaultfd disabled (PREZERO_NO_USERFAULTFD=1); running as prezero run does"]
    );
}

/// C: `threads_now()`, the process's threads, counted without allocating (a
/// stack buffer and system calls): what the preload started before `main`.
const THREADS_NOW: &str = r#"#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static int threads_now(void) {
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0) close(fd);
    buf[n > 0 ? n : 0] = 0;
    const char *t = strstr(buf, "Threads:");
    int threads = 0;
    if (t) sscanf(t + 8, "%d", &threads);
    return threads;
}
"#;

/// The program `prezero run` executes starts the library when it is loaded:
/// its prefill and a lazy reserve asked for fill from start-up, while it computes,
/// not from its first allocation (a program that computed for 2 s before it
/// mapped anything found an empty reserve). The program counts its threads
/// before it allocates anything.
#[test]
fn the_program_starts_the_library_at_load_time() {
    let main = r#"int main(void) {
    printf("threads %d\n", threads_now());
    return 0;
}
"#;
    let Some((_dir, exe)) = c_program("threads_at_main", &[THREADS_NOW, main].concat()) else {
        prezero_testkit::skip("tool", "no C compiler (cc) to build the program");
        return;
    };
    let exe = exe.to_str().unwrap();
    let threads = |o: &Output| -> u32 {
        assert!(o.status.success(), "{}", stderr(o));
        stdout(o).strip_prefix("threads ").unwrap().parse().unwrap()
    };
    // The prefill's scrubber runs before main.
    assert!(threads(&run(&["--prefill", "4M", "--", exe])) >= 2);
    // Where the lazy mode runs with a reserve asked for, its handler and the
    // reserve's worker too; without one, the reserve is sized by demand and
    // no thread starts before the program's first large block.
    let o = run(&["--lazy", "--reserve", "64M", "--", exe]);
    if stderr(&o).contains("prezero: --lazy: ") {
        println!("the lazy mode does not run here: {}", stderr(&o).trim());
    } else {
        assert!(threads(&o) >= 3, "{}", stdout(&o));
        assert_eq!(threads(&run(&["--lazy", "--", exe])), 1);
    }
    // Without either: nothing. A process the program starts (here the
    // shell's child; `; true` keeps the shell from exec'ing it in its place)
    // gets neither the prefill nor a reserve filled ahead of its first fault.
    assert_eq!(threads(&run(&["--", exe])), 1);
    let o = run(&[
        "--lazy",
        "--reserve",
        "2M",
        "--prefill",
        "4M",
        "--",
        "sh",
        "-c",
        "\"$0\"; true",
        exe,
    ]);
    assert_eq!(threads(&o), 1, "a child of the program started threads");
}

/// A value the library would not take, inherited from the caller, is an
/// error before the program runs (the library would silently use its default).
#[test]
fn bad_inherited_values_stop_the_run() {
    for (k, v) in [
        ("PREZERO_RESERVE", "lots"),
        ("PREZERO_CAP", "1X"),
        ("PREZERO_LAZY", "yes"),
    ] {
        let o = prezero()
            .env(k, v)
            .args(["run", "--", "echo", "ran"])
            .output()
            .unwrap();
        assert!(!o.status.success(), "{k}={v}: ran anyway");
        assert!(stdout(&o).is_empty(), "{k}={v}: {}", stdout(&o));
        assert!(stderr(&o).contains(&format!("{k}={v}")), "{}", stderr(&o));
    }
    let o = run(&["--reserve", "1M", "--lazy", "--", "true"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("at least 2M"), "{}", stderr(&o));
}

/// `--lazy --history` keeps what a command took in its last run, per
/// command, in the cache directory; the next run of the same command starts
/// its reserve at load and fills that much ahead. `--lazy` alone keeps and
/// reads none; a run of other arguments is another command.
#[test]
fn the_lazy_mode_remembers_what_a_command_took() {
    let main = r#"int main(void) {
    int threads = threads_now();
    size_t len = 32u << 20;
    unsigned char *p = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 2;
    for (size_t i = 0; i < len; i += 4096) {
        if (p[i]) return 1;
        p[i] = 1;
    }
    printf("threads %d\n", threads);
    return 0;
}
"#;
    let Some((dir, exe)) = c_program("takes_32m", &[THREADS_NOW, main].concat()) else {
        prezero_testkit::skip("tool", "no C compiler (cc) to build the program");
        return;
    };
    let exe = exe.to_str().unwrap();
    let cache = dir.join("cache");
    let history = cache.join("prezero/history");
    let run_here_with = |args: &[&str], history: &str| -> (u32, Output) {
        let mut c = prezero();
        c.env("XDG_CACHE_HOME", &cache)
            .env_remove("PREZERO_HISTORY");
        if !history.is_empty() {
            c.env("PREZERO_HISTORY", history);
        }
        let o = c.arg("run").args(args).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let t = stdout(&o)
            .strip_prefix("threads ")
            .unwrap()
            .parse()
            .unwrap();
        (t, o)
    };
    let run_here = |args: &[&str]| run_here_with(args, "");
    let files = || -> Vec<(PathBuf, String)> {
        let Ok(entries) = std::fs::read_dir(&history) else {
            return Vec::new();
        };
        entries
            .map(|e| {
                let p = e.unwrap().path();
                let text = std::fs::read_to_string(&p).unwrap();
                (p, text)
            })
            .collect()
    };
    let (threads, o) = run_here(&["--lazy", "--history", "--", exe]);
    if stderr(&o).contains("prezero: --lazy: ") {
        println!("the lazy mode does not run here: {}", stderr(&o).trim());
        return;
    }
    assert_eq!(threads, 1, "a first run starts nothing at load");
    let kept = files();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let took: usize = kept[0].1.trim().parse().unwrap();
    // The blocks it took whole: most of its 16 (the first may come alone).
    assert!((24 << 20..=32 << 20).contains(&took), "{took}");
    assert!(kept[0].1.ends_with('\n'));
    let mode = std::fs::metadata(&kept[0].0).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    // The second run starts its reserve at load.
    let (threads, _) = run_here(&["--lazy", "--history", "--", exe]);
    assert!(threads >= 3, "{threads}");
    assert_eq!(files().len(), 1);
    // Without history: nothing at load, nothing kept.
    let (threads, _) = run_here(&["--lazy", "--", exe]);
    assert_eq!(threads, 1);
    // Another command (an argument more) has a history of its own.
    let (threads, _) = run_here(&["--lazy", "--history", "--", exe, "again"]);
    assert_eq!(threads, 1);
    assert_eq!(files().len(), 2);
    // A file an outer run (or the caller) named is another command's: this
    // command keeps its own.
    run_here_with(
        &["--lazy", "--history", "--", exe, "nested"],
        "/elsewhere/history/0123456789abcdef",
    );
    assert_eq!(files().len(), 3);
    // Without --history, a file an outer run named is not this command's:
    // none is read or written.
    let own = &files()[0];
    let (threads, _) = run_here_with(&["--lazy", "--", exe], own.0.to_str().unwrap());
    assert_eq!(threads, 1);
}
