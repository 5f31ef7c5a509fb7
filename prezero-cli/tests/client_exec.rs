//! `prezero client exec` end to end: a program (a shell, then a real QEMU)
//! runs on memfds taken from a daemon of the test's own; the segment stays
//! out of reuse while the program holds it and comes back once it exits.
//! The local fallback, `--no-fallback`, the placeholder errors without one,
//! segments no placeholder names, and sizes that do not fit.
//!
//! Tests that need the daemon skip (printing why) when hugetlb pages cannot be
//! reserved; the QEMU test also when qemu-system-x86_64 is not installed.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use prezero::{HugetlbReservation, PageKind};
use prezero_testkit::TempDir;

/// `prezero client exec --socket SOCKET ARGS...`.
fn exec_cmd(socket: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(bin());
    c.args(["client", "exec", "--socket"])
        .arg(socket)
        .args(args)
        .stdin(Stdio::null());
    c
}

fn run(socket: &Path, args: &[&str]) -> (Output, String) {
    let out = exec_cmd(socket, args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, err)
}

/// (ready, leased, quarantined + scrubbing) over every pool, as
/// `prezero client stats --json` shows them.
fn stats_cli(socket: &Path) -> (u64, u64, u64) {
    let out = Command::new(bin())
        .args(["client", "stats", "--json", "--socket"])
        .arg(socket)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sum = |k: &str| {
        v["pools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[k].as_u64().unwrap())
            .sum::<u64>()
    };
    (
        sum("ready"),
        sum("leased"),
        sum("quarantined") + sum("scrubbing"),
    )
}

/// A socket path where no daemon listens.
fn nowhere() -> PathBuf {
    PathBuf::from("/nonexistent-prezero-dir/s.sock")
}

/// A directory of the calling test's own, removed when it ends, pass or fail.
fn scratch(name: &str) -> TempDir {
    TempDir::new(&format!("exec-test-{name}"))
}

/// Kills (SIGKILL) and reaps the child if the test ends before it does.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn wait_exit(c: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            return s;
        }
        assert!(t.elapsed() < limit, "the program did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_program_runs_on_zeroed_service_memory_held_until_it_exits() {
    let Some(d) = Daemon::start("target=32M,cap=32M,segment=32M", &[]) else {
        return;
    };
    d.wait_all_ready();
    let dir = scratch("held");
    // The program checks its file (a 32 MiB hugetlbfs file, all zero), says
    // so, and holds it until told to go.
    let script = format!(
        "test \"$(stat -L -c %s.%o {{path}})\" = 33554432.2097152 && cmp -n {{size}} {{path}} /dev/zero \
         && touch {dir}/ok && while [ ! -e {dir}/go ]; do sleep 0.02; done",
        dir = dir.display()
    );
    let child = exec_cmd(
        &d.socket,
        &["--size", "32M", "--no-fallback", "--", "sh", "-c", &script],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut child = Reaped(child);
    let t = Instant::now();
    while !dir.join("ok").exists() {
        if let Some(s) = child.0.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("the program failed ({s}): {err}");
        }
        assert!(t.elapsed() < Duration::from_secs(20), "the program hung");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The exec closed the client's socket: the daemon quarantines the segment,
    // and the program's descriptor keeps it there, lease check after lease check.
    wait_for(
        "the segment quarantined while the program holds it",
        Duration::from_secs(5),
        || stats_cli(&d.socket) == (0, 0, 1),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        stats_cli(&d.socket),
        (0, 0, 1),
        "still held, still quarantined"
    );
    std::fs::write(dir.join("go"), "").unwrap();
    let status = wait_exit(&mut child.0, Duration::from_secs(10));
    let mut err = String::new();
    std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{status}: {err}");
    assert!(
        err.contains("32M on 2MB pages from prezero serve at")
            && err.contains("1 segment of 32M (fd "),
        "{err}"
    );
    wait_for(
        "the segment back and ready after the program exited",
        Duration::from_secs(10),
        || stats_cli(&d.socket) == (1, 0, 0),
    );
}

#[test]
fn several_segments_are_named_by_index_and_the_single_form_says_how_to_fix_it() {
    let Some(d) = Daemon::start("target=48M,cap=48M,segment=16M", &[]) else {
        return;
    };
    d.wait_all_ready();
    // 40 MiB: three segments, the last 8 MiB of its 16 used.
    let (out, err) = run(
        &d.socket,
        &[
            "--size",
            "40M",
            "--no-fallback",
            "--quiet",
            "--",
            "sh",
            "-c",
            "for i in {path0}:{size0} {path1}:{size1} {path2}:{size2}; do \
             cmp -n ${{i#*:}} ${{i%:*}} /dev/zero || exit 1; done; echo {size0} {size2} {fd1}",
        ],
    );
    assert!(out.status.success(), "{err}");
    assert!(err.is_empty(), "--quiet: {err}");
    let said = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = said.split_whitespace().collect();
    assert_eq!(words[..2], ["16777216", "8388608"], "{said}");
    assert!(words[2].parse::<u32>().is_ok(), "{said}");
    d.wait_all_ready();

    // Placeholders that do not fit the segments: an error naming the fix,
    // nothing run, and the segments released.
    let dir = scratch("multi");
    let ran = dir.join("ran");
    let refused = |placeholders: &[&str], want: &[&str]| {
        let touch = format!("touch {}", ran.display());
        let mut args = vec!["--size", "40M", "--no-fallback", "--", "sh", "-c", &touch];
        args.extend(placeholders);
        let (out, err) = run(&d.socket, &args);
        assert_eq!(out.status.code(), Some(1), "{placeholders:?}: {err}");
        for w in want {
            assert!(err.contains(w), "{placeholders:?}: {err}");
        }
        assert!(!ran.exists(), "{placeholders:?}: the program ran");
        d.wait_all_ready();
    };
    // One file wanted, three given.
    refused(
        &["mem-path={path}"],
        &[
            "{path} names one file, but the memory is 3 segments",
            "({path0} .. {path2})",
            "--pool 2MB:segment=40M",
        ],
    );
    refused(
        &["{fd3}"],
        &["{fd3}: the memory is 3 segments, {fd0} .. {fd2}"],
    );
    // Segments no placeholder names would be held unused for the program's life.
    refused(
        &["{path0}", "{size0}"],
        &[
            "the memory is 3 segments and no placeholder names segments 1, 2",
            "({path1}, {path2}, or the {fd} and {size} forms)",
        ],
    );
}

#[test]
fn placeholder_errors_come_before_any_memory_is_taken() {
    let dir = scratch("syntax");
    let ran = dir.join("ran");
    let touch = format!("touch {}", ran.display());
    for (arg, want) in [
        ("{nope}", "unknown placeholder {nope}"),
        ("size={size", "is never closed"),
        ("a}", "closes no placeholder"),
    ] {
        // No daemon and no fallback: an error about the argument, not the socket.
        let (out, err) = run(
            &nowhere(),
            &[
                "--size",
                "2M",
                "--no-fallback",
                "--",
                "sh",
                "-c",
                &touch,
                arg,
            ],
        );
        assert_eq!(out.status.code(), Some(1), "{arg}: {err}");
        assert!(
            err.contains(want) && err.contains(&format!("argument '{arg}'")),
            "{arg}: {err}"
        );
        assert!(!err.contains("connect"), "{arg}: {err}");
    }
    assert!(!ran.exists(), "the program must not run");
}

#[test]
fn a_size_that_does_not_fit_in_whole_pages_is_an_error_not_a_panic() {
    for page in ["2MB", "1GB"] {
        let (out, err) = run(
            &nowhere(),
            &[
                "--size",
                "18446744073709551615",
                "--page",
                page,
                "--",
                "true",
            ],
        );
        assert_eq!(out.status.code(), Some(1), "{page}: {err}");
        assert!(
            err.contains(&format!(
                "18446744073709551615 bytes rounded up to whole {page} pages is more than the \
                 address space"
            )),
            "{page}: {err}"
        );
    }
}

#[test]
fn naming_no_file_is_a_warning_unless_quiet() {
    let (out, err) = run(&nowhere(), &["--size", "4K", "--", "true"]);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "prezero: warning: no placeholder names the memory: the program inherits it (fd "
        ),
        "{err}"
    );
    let (out, err) = run(&nowhere(), &["--size", "4K", "--quiet", "--", "true"]);
    assert!(out.status.success(), "{err}");
    assert!(err.is_empty(), "--quiet: {err}");
}

#[test]
fn without_a_daemon_no_fallback_fails_clearly() {
    let (out, err) = run(&nowhere(), &["--size", "2M", "--no-fallback", "--", "true"]);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("2M of memory: ")
            && err.contains("cannot connect to /nonexistent-prezero-dir/s.sock"),
        "{err}"
    );
}

#[test]
fn without_a_daemon_a_local_memfd_serves() {
    // A plain memfd when the hugetlb pool is short: ask for more 2 MiB pages
    // than are free (where that is a small request).
    // No daemon test may grow the pool meanwhile (their reservations take the
    // same lock).
    let lock = HugetlbReservation::ensure_free(PAGE, 0);
    let free = free_pages_of(PageKind::Huge2M);
    if lock.is_ok() && free <= 30 {
        let mb = 2 * (free + 2);
        let (out, err) = run(
            &nowhere(),
            &[
                "--size",
                &format!("{mb}M"),
                "--",
                "sh",
                "-c",
                "cmp -n {size} {path} /dev/zero && echo {size}",
            ],
        );
        assert!(out.status.success(), "{err}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            (mb << 20).to_string()
        );
        assert!(
            err.contains("warning: ")
                && err.contains("from a plain local memfd, not hugetlb")
                && err.contains("cannot connect")
                && err.contains("used a plain memfd"),
            "{err}"
        );
    } else {
        prezero_testkit::skip(
            "state",
            format!("the plain-memfd fallback ({free} 2 MiB pages free)"),
        );
    }
    drop(lock);
    // A plain memfd is whole base pages, not whole hugetlb pages: 1 byte on
    // 1 GiB pages, none free, is one 4 KiB page.
    let free = free_pages_of(PageKind::Huge1G);
    if free == 0 {
        let (out, err) = run(
            &nowhere(),
            &[
                "--size",
                "1",
                "--page",
                "1GB",
                "--",
                "sh",
                "-c",
                "stat -L -c %s {path} && echo {size}",
            ],
        );
        assert!(out.status.success(), "{err}");
        let base = PageKind::Base.page_size().to_string();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .collect::<Vec<_>>(),
            [&base, &base],
            "{err}"
        );
        assert!(
            err.contains("from a plain local memfd, not hugetlb"),
            "{err}"
        );
    } else {
        prezero_testkit::skip(
            "state",
            format!("the plain memfd in base pages ({free} 1 GiB pages free)"),
        );
    }
    // A hugetlb memfd when the pool has the pages.
    let _pages = match HugetlbReservation::ensure_free(PAGE, 8) {
        Ok(r) => r,
        Err(e) => {
            prezero_testkit::skip(
                "hugetlb",
                format!("the hugetlb local fallback: cannot reserve 2 MiB pages: {e}"),
            );
            return;
        }
    };
    let (out, err) = run(
        &nowhere(),
        &[
            "--size",
            "16M",
            "--",
            "sh",
            "-c",
            "stat -L -c %s.%o {path} && cmp -n {size} {path} /dev/zero",
        ],
    );
    assert!(out.status.success(), "{err}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "16777216.2097152"
    );
    assert!(
        err.contains("16M on 2MB pages from a local memfd") && err.contains("cannot connect"),
        "{err}"
    );
}

#[test]
fn a_program_that_cannot_run_exits_127_like_a_shell() {
    let (out, err) = run(
        &nowhere(),
        &[
            "--size",
            "2M",
            "--quiet",
            "--",
            "/nonexistent/program",
            "{path}",
        ],
    );
    assert_eq!(out.status.code(), Some(127), "{err}");
    assert!(err.contains("cannot run /nonexistent/program"), "{err}");
    let (out, err) = run(&nowhere(), &["--size", "2M", "--quiet", "--", "/dev/null"]);
    assert_eq!(out.status.code(), Some(126), "{err}");
}

/// The first `name` on PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

/// A QMP connection: one command, its answer (events skipped). A failed
/// exchange shows QEMU's stderr (`log`), which says why it went away.
struct Qmp(BufReader<UnixStream>, PathBuf, u32);

impl Qmp {
    fn connect(path: &Path, qemu: &mut Child, log: &Path) -> Qmp {
        let t = Instant::now();
        let s = loop {
            if let Ok(s) = UnixStream::connect(path) {
                break s;
            }
            if let Some(status) = qemu.try_wait().unwrap() {
                panic!("QEMU exited ({status}): {}", read_log(log));
            }
            assert!(t.elapsed() < Duration::from_secs(60), "no QMP socket");
            std::thread::sleep(Duration::from_millis(10));
        };
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut q = Qmp(BufReader::new(s), log.to_owned(), qemu.id());
        let mut greeting = String::new();
        q.0.read_line(&mut greeting).unwrap();
        assert!(greeting.contains("QMP"), "{greeting}: {}", read_log(log));
        q.cmd(serde_json::json!({"execute": "qmp_capabilities"}));
        q
    }

    fn cmd(&mut self, c: serde_json::Value) -> serde_json::Value {
        let gone = |e: &dyn std::fmt::Display| -> ! {
            // Time for QEMU to finish writing why it left.
            std::thread::sleep(Duration::from_millis(500));
            panic!(
                "QMP {c}: {e}; QEMU: {}; its stderr: {}",
                exit_of(self.2),
                read_log(&self.1)
            )
        };
        // One write: QEMU parses a command as soon as its JSON closes, so a
        // newline written after a `quit` met a closed monitor (EPIPE).
        if let Err(e) = self.0.get_mut().write_all(format!("{c}\n").as_bytes()) {
            gone(&e);
        }
        loop {
            let mut line = String::new();
            match self.0.read_line(&mut line) {
                Ok(0) => gone(&"QEMU closed the monitor"),
                Err(e) => gone(&e),
                Ok(_) => {}
            }
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if let Some(r) = v.get("return") {
                return r.clone();
            }
            assert!(v.get("error").is_none(), "{c}: {v}");
        }
    }

    fn hmp(&mut self, line: &str) -> String {
        let r = self.cmd(serde_json::json!({"execute": "human-monitor-command",
                                             "arguments": {"command-line": line}}));
        r.as_str().unwrap().to_owned()
    }
}

/// How child `pid` ended, left to be reaped, or that it runs.
fn exit_of(pid: u32) -> String {
    // SAFETY: siginfo_t is plain data; waitid writes it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: a child of this process; WNOWAIT leaves it to be reaped.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid,
            &mut info,
            libc::WEXITED | libc::WNOWAIT | libc::WNOHANG,
        )
    };
    // SAFETY: filled in by waitid for an exited child (pid 0 otherwise).
    let who = unsafe { info.si_pid() };
    // SAFETY: as for si_pid.
    let code = unsafe { info.si_status() };
    match (r, who) {
        (0, 0) => "still running".into(),
        (0, _) => format!("exited, si_code {} status {code}", info.si_code),
        _ => format!("waitid: {}", std::io::Error::last_os_error()),
    }
}

fn read_log(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_else(|e| format!("({}: {e})", log.display()))
}

/// The descriptors of process `pid` that are prezero memfds.
fn memfds_of(pid: u32) -> Vec<PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_link(e.path())
                .is_ok_and(|l| l.to_string_lossy().starts_with("/memfd:prezero-"))
        })
        .map(|e| e.path())
        .collect()
}

/// KernelPageSize (kB) of `pid`'s mappings of a prezero memfd of `kb` kB.
fn memfd_mapping_page_kb(pid: u32, kb: usize) -> Vec<usize> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut out = Vec::new();
    let mut ours = false;
    let mut size_ok = false;
    for line in smaps.lines() {
        let mut w = line.split_whitespace();
        let first = w.next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            ours = line.contains("/memfd:prezero-");
            size_ok = false;
        } else if ours && first == "Size:" {
            size_ok = w.next() == Some(&kb.to_string());
        } else if ours && size_ok && first == "KernelPageSize:" {
            out.push(w.next().unwrap().parse().unwrap());
        }
    }
    out
}

#[test]
fn qemu_boots_on_service_memory_that_is_hugetlb_zero_and_quarantined_while_it_runs() {
    let Some(qemu) = on_path("qemu-system-x86_64") else {
        prezero_testkit::skip(
            "tool",
            "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)",
        );
        return;
    };
    let Some(d) = Daemon::start("target=64M,cap=64M,segment=64M", &[]) else {
        return;
    };
    d.wait_all_ready();
    let dir = scratch("qemu");
    let qmp = dir.join("qmp.sock");
    let qemu_log = dir.join("qemu.err");
    let child = exec_cmd(
        &d.socket,
        &[
            "--size",
            "64M",
            "--no-fallback",
            "--",
            qemu.to_str().unwrap(),
            // KVM where it can be opened, else TCG: the guest never runs (-S).
            "-accel",
            "kvm",
            "-accel",
            "tcg",
            "-machine",
            "q35,memory-backend=m",
            "-m",
            "64M",
            "-object",
            "memory-backend-file,id=m,size={size},mem-path={path},share=on,prealloc=on",
            "-S",
            "-nodefaults",
            "-display",
            "none",
            "-qmp",
            &format!("unix:{},server=on,wait=off", qmp.display()),
        ],
    )
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&qemu_log).unwrap())
    .spawn()
    .unwrap();
    // `client exec` became QEMU: the same pid.
    let mut qemu_proc = Reaped(child);
    let pid = qemu_proc.0.id();
    let mut q = Qmp::connect(&qmp, &mut qemu_proc.0, &qemu_log);
    assert_eq!(
        q.cmd(serde_json::json!({"execute": "query-status"}))["status"],
        "prelaunch"
    );

    // Guest RAM through QEMU's eyes. At reset QEMU writes nothing into guest
    // RAM, but on q35 (and pc) the PAM registers route 0xc0000-0xfffff to
    // ROMs laid over it (`info mtree -f`: pc.rom at 0xc0000-0xdffff, the
    // last 128 KiB of pc.bios at 0xe0000-0xfffff), so a read of guest
    // physical memory there shows SeaBIOS, not RAM. Those 256 KiB are read
    // from the backing file below instead.
    let mtree = q.hmp("info mtree -f");
    assert!(
        mtree.contains("00000000000e0000-00000000000fffff (prio 0, rom): pc.bios"),
        "{mtree}"
    );
    let (lo, hi) = (dir.join("lo.bin"), dir.join("hi.bin"));
    q.hmp(&format!("pmemsave 0 0xc0000 \"{}\"", lo.display()));
    q.hmp(&format!(
        "pmemsave 0x100000 {:#x} \"{}\"",
        (64 << 20) - 0x100000,
        hi.display()
    ));
    let (lo, hi) = (std::fs::read(&lo).unwrap(), std::fs::read(&hi).unwrap());
    assert_eq!(lo.len() + hi.len(), (64 << 20) - 0x40000);
    assert_eq!(prezero::first_nonzero(&lo), None, "guest RAM below 0xc0000");
    assert_eq!(prezero::first_nonzero(&hi), None, "guest RAM above 1 MiB");
    // The whole backing file (the guest RAM under the ROMs too), read through
    // QEMU's descriptors: the inherited one and QEMU's own open of {path}.
    let fds = memfds_of(pid);
    assert_eq!(fds.len(), 2, "{fds:?}");
    let file = std::fs::read(&fds[0]).unwrap();
    assert_eq!(file.len(), 64 << 20);
    assert_eq!(prezero::first_nonzero(&file), None, "the backing file");
    drop(file);
    // Mapped with 2 MiB pages.
    assert_eq!(memfd_mapping_page_kb(pid, 64 << 10), vec![2048]);
    // Held by QEMU, so quarantined, not ready, lease check after lease check.
    wait_for(
        "the segment quarantined while QEMU holds it",
        Duration::from_secs(5),
        || stats_cli(&d.socket) == (0, 0, 1),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(stats_cli(&d.socket), (0, 0, 1));

    // QEMU may close the monitor before it answers: its exit status is the
    // answer.
    q.0.get_mut()
        .write_all(b"{\"execute\": \"quit\"}\n")
        .unwrap();
    let status = wait_exit(&mut qemu_proc.0, Duration::from_secs(30));
    let err = read_log(&qemu_log);
    assert!(status.success(), "{status}: {err}");
    assert!(err.contains("64M on 2MB pages from prezero serve"), "{err}");
    wait_for(
        "the segment back and ready after QEMU exited",
        Duration::from_secs(10),
        || stats_cli(&d.socket) == (1, 0, 0),
    );
}
