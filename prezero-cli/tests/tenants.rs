//! Hostile tenants against `prezero serve`. Each test attacks a daemon of its
//! own the way a tenant with a shell would, from processes of test uids that
//! need no passwd entry, and checks that the daemon lives on (its process runs
//! and a fresh client is served), that nobody gets a non-zero byte or another
//! tenant's bytes, and that the caps hold.
//!
//! A tenant is this test binary executed again under a test uid, running the
//! ignored test `tenant_role`: it reads one command a line on stdin and answers
//! each with one line (`ok key=value ...`) on stdout, so the test decides the
//! order of every step between tenants.
//!
//! Tests skip (printing why) when not root, when the hugetlb pages cannot be
//! reserved, or (the io_uring attack) when the kernel has io_uring disabled.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use prezero::PageKind;
use prezero_service::{Client, Source};

const TENANT_A: u32 = 64201;
const TENANT_B: u32 = 64202;
/// In no allow list.
const OUTSIDER: u32 = 64203;
/// Allowed only through a supplementary group.
const GROUP_MEMBER: u32 = 64204;
const ALLOWED_GID: u32 = 64250;
/// One segment in the pool: whoever asks after a release gets the same one.
const ONE_SEGMENT: &str = "target=16M,cap=16M,segment=16M";

const ROLE_ENV: &str = "PREZERO_TENANT_ROLE";
const SOCKET_ENV: &str = "PREZERO_TENANT_SOCKET";
/// Starts every answer line of a tenant (libtest writes its own lines too).
const MARK: &str = "@@ ";

// ---------------------------------------------------------------------------
// The test's side: tenant processes and their answers.

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    prezero_testkit::skip("root", "running tenants under other uids needs root");
    false
}

/// A daemon with a 2 MiB pool, started only if tenants can be run.
fn daemon(pool: &str, extra: &[&str]) -> Option<Daemon> {
    if !is_root() {
        return None;
    }
    Daemon::start(pool, extra)
}

/// A daemon both tenants may use.
fn daemon_for_tenants(pool: &str, extra: &[&str]) -> Option<Daemon> {
    let (a, b) = (TENANT_A.to_string(), TENANT_B.to_string());
    let mut args = vec!["--allow-uid", &a, "--allow-uid", &b];
    args.extend(extra);
    daemon(pool, &args)
}

/// One tenant process (see the module comment). Killed on drop.
struct Tenant {
    uid: u32,
    child: Child,
    stdin: ChildStdin,
    answers: Receiver<String>,
    /// Everything it wrote, for failure messages.
    output: Arc<Mutex<String>>,
}

/// One answer: `ok key=value ... [why=free text]`.
struct Answer {
    text: String,
    fields: HashMap<String, String>,
}

impl Answer {
    fn parse(text: String) -> Answer {
        // Free text, if any, comes last.
        let (pairs, why) = match text.find("why=") {
            Some(at) => (&text[..at], Some(&text[at + 4..])),
            None => (text.as_str(), None),
        };
        let mut fields: HashMap<String, String> = pairs
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        if let Some(why) = why {
            fields.insert("why".into(), why.to_owned());
        }
        Answer { text, fields }
    }

    fn has(&self, key: &str) -> bool {
        self.fields.contains_key(key)
    }

    fn num(&self, key: &str) -> i64 {
        self.fields
            .get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no number '{key}' in the answer '{}'", self.text))
    }

    fn errno(&self) -> i32 {
        self.num("errno") as i32
    }
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Collects lines of a tenant's stdout or stderr; answers go to `answers`.
fn collect(
    from: impl Read + Send + 'static,
    answers: Option<Sender<String>>,
    output: Arc<Mutex<String>>,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            if let (Some(tx), Some(at)) = (&answers, line.find(MARK)) {
                let _ = tx.send(line[at + MARK.len()..].to_owned());
            }
            let mut o = output.lock().unwrap_or_else(|e| e.into_inner());
            o.push_str(&line);
            o.push('\n');
        }
    });
}

/// The limit `res` with its soft value raised toward `want`, up to the hard one.
fn soft_limit(res: libc::__rlimit_resource_t, want: libc::rlim_t) -> libc::rlimit {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a local.
    assert_eq!(unsafe { libc::getrlimit(res, &mut r) }, 0);
    r.rlim_cur = r.rlim_cur.max(want.min(r.rlim_max));
    r
}

impl Tenant {
    /// This test binary again, as `uid` with primary group `uid` and
    /// supplementary `groups`, serving commands for the daemon at `socket`.
    fn spawn(uid: u32, groups: &[u32], socket: &Path) -> Tenant {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = Command::new(&exe);
        cmd.args([
            "--ignored",
            "--exact",
            "tenant_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE_ENV, "tenant")
        .env(SOCKET_ENV, socket)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        // Everything the child needs is made before the fork: it must not allocate.
        let groups: Vec<libc::gid_t> = groups.to_vec();
        let gid = uid as libc::gid_t;
        // Room for the floods (descriptors) and the io_uring fixed buffer
        // (pinned pages count against RLIMIT_MEMLOCK), as far as the hard
        // limits go: raising those needs CAP_SYS_RESOURCE, which root may lack.
        let nofile = soft_limit(libc::RLIMIT_NOFILE, 16384);
        let memlock = soft_limit(libc::RLIMIT_MEMLOCK, 64 << 20);
        // SAFETY: the closure runs in the forked child before exec and makes only
        // system calls on data made before the fork: no allocation, no lock. The
        // credentials are set with raw system calls, which change the calling
        // thread's only (the child has no other), in the order that keeps the
        // permission to make the next: groups, gid, then uid. (std's `uid()`
        // would run before this and drop root first.)
        unsafe {
            cmd.pre_exec(move || {
                let fail = || Err(std::io::Error::last_os_error());
                if libc::setrlimit(libc::RLIMIT_NOFILE, &nofile) != 0
                    || libc::setrlimit(libc::RLIMIT_MEMLOCK, &memlock) != 0
                {
                    return fail();
                }
                if libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) != 0
                    || libc::syscall(libc::SYS_setgid, gid) != 0
                    || libc::syscall(libc::SYS_setuid, uid) != 0
                {
                    return fail();
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {} as uid {uid}: {e}", exe.display()));
        let output = Arc::new(Mutex::new(String::new()));
        let (tx, answers) = std::sync::mpsc::channel();
        collect(child.stdout.take().unwrap(), Some(tx), output.clone());
        collect(child.stderr.take().unwrap(), None, output.clone());
        let stdin = child.stdin.take().unwrap();
        let mut t = Tenant {
            uid,
            child,
            stdin,
            answers,
            output,
        };
        t.answer("start", Duration::from_secs(20));
        t
    }

    fn output(&self) -> String {
        self.output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits up to `limit` for the next answer; a failed command is a panic.
    fn answer(&mut self, what: &str, limit: Duration) -> Answer {
        match self.answers.recv_timeout(limit) {
            Ok(line) => {
                if let Some(e) = line.strip_prefix("err ") {
                    panic!(
                        "tenant uid {}: '{what}' failed: {e}\n{}",
                        self.uid,
                        self.output()
                    );
                }
                Answer::parse(line.strip_prefix("ok").unwrap_or(&line).trim().to_owned())
            }
            Err(_) => panic!(
                "tenant uid {} gave no answer to '{what}' within {limit:?} (or exited):\n{}",
                self.uid,
                self.output()
            ),
        }
    }

    /// Sends one command and waits (20 s at most) for its answer.
    fn ask(&mut self, cmd: &str) -> Answer {
        self.ask_within(cmd, Duration::from_secs(20))
    }

    fn ask_within(&mut self, cmd: &str, limit: Duration) -> Answer {
        if let Err(e) = writeln!(self.stdin, "{cmd}").and_then(|()| self.stdin.flush()) {
            panic!("tenant uid {} is gone ({e}):\n{}", self.uid, self.output());
        }
        let a = self.answer(cmd, limit);
        if std::env::var_os("PREZERO_TENANT_TRACE").is_some() {
            eprintln!("tenant uid {}: {cmd} -> {a}", self.uid);
        }
        a
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lets the tenant end on its own (dropping what it holds), and reaps it.
    fn exit(mut self) {
        self.ask("exit");
        let t = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "tenant uid {} did not exit:\n{}",
                self.uid,
                self.output()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Tenant {
    fn drop(&mut self) {
        // Our own child, by its handle.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for_log(d: &Daemon, needle: &str, limit: Duration) {
    let t = Instant::now();
    while !d.log().contains(needle) {
        assert!(
            t.elapsed() < limit,
            "the daemon did not log '{needle}' within {limit:?}:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Segments the daemon's ledger lists (read from the file: asks the daemon nothing).
fn ledger_segments(d: &Daemon) -> usize {
    let mut p = d.socket.clone().into_os_string();
    p.push(".ledger");
    std::fs::read_to_string(PathBuf::from(p)).map_or(0, |t| t.lines().skip(1).count())
}

/// Free 2 MiB pages no mapping has reserved.
fn unreserved_pages() -> usize {
    let read = |name: &str| -> usize {
        std::fs::read_to_string(format!("/sys/kernel/mm/hugepages/hugepages-2048kB/{name}"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    };
    read("free_hugepages").saturating_sub(read("resv_hugepages"))
}

fn signal(d: &Daemon, sig: libc::c_int) {
    // SAFETY: kill on our own child's pid.
    assert_eq!(unsafe { libc::kill(d.pid(), sig) }, 0);
}

/// A tenant of `uid` holding a segment of 16 MiB, zero when handed out and
/// then filled with `fill`; and the answer to its request.
fn holding_a_segment(d: &Daemon, uid: u32, fill: u8) -> (Tenant, Answer) {
    let mut t = Tenant::spawn(uid, &[], &d.socket);
    let got = t.ask("alloc 16M");
    assert_eq!(got.num("nonzero"), -1, "{got}");
    t.ask(&format!("fill {fill}"));
    (t, got)
}

/// Tenant B, handed the segment A had (`got_a`): zero, then filled with 187.
fn takes_over(d: &Daemon, got_a: &Answer) -> Tenant {
    let mut b = Tenant::spawn(TENANT_B, &[], &d.socket);
    let got_b = b.ask("alloc 16M");
    assert_eq!(got_b.errno(), 0, "{got_b}");
    assert_eq!(
        got_b.num("ino"),
        got_a.num("ino"),
        "one segment in the pool: B has A's former segment"
    );
    assert_eq!(got_b.num("nonzero"), -1, "B's memory is zero: {got_b}");
    b.ask("fill 187");
    b
}

// ---------------------------------------------------------------------------
// The attacks.

#[test]
fn a_tenant_opens_its_segment_by_path_and_a_kept_o_path_reopens_nothing_after() {
    let Some(d) = daemon_for_tenants("target=16M,cap=16M,segment=16M", &[]) else {
        return;
    };
    let (mut a, got_a) = holding_a_segment(&d, TENANT_A, 171);
    // A VMM's mem-path=/proc/self/fd/N: the tenant's uid may open its lease.
    let opened = a.ask("open-by-path");
    assert_eq!(opened.errno(), 0, "{opened}");
    a.ask("keep-opath");
    assert_eq!(a.ask("reopen-opath").errno(), 0, "while leased, its own");
    a.ask("release");
    wait_for("the segment to be ready", Duration::from_secs(10), || {
        counts(&d) == (1, 0, 0)
    });
    let again = a.ask("reopen-opath");
    assert_eq!(
        again.errno(),
        libc::EACCES,
        "released: the inode is the daemon's: {again}"
    );
    // Tenant B gets the segment (fresh pages); A's descriptor still opens nothing.
    let _b = takes_over(&d, &got_a);
    let again = a.ask("reopen-opath");
    assert_eq!(again.errno(), libc::EACCES, "B's lease is B's: {again}");
}

#[test]
fn an_io_uring_fixed_buffer_kept_after_release_never_reaches_the_next_tenant() {
    let Some(d) = daemon_for_tenants(ONE_SEGMENT, &[]) else {
        return;
    };
    let (mut a, got_a) = holding_a_segment(&d, TENANT_A, 17);
    // The tenant pins the segment's first page in the kernel, with no file.
    let reg = a.ask("uring-register 2M");
    if reg.has("skip") {
        prezero_testkit::skip(
            "kernel",
            format!(
                "io_uring is not available here (io_uring_setup: errno {})",
                reg.num("skip")
            ),
        );
        return;
    }
    assert_eq!(
        reg.errno(),
        0,
        "IORING_REGISTER_BUFFERS of the segment: {reg}"
    );
    a.ask("release");

    let mut b = takes_over(&d, &got_a);

    // A reads its fixed buffer out (WRITE_FIXED to a file), writes into it
    // (READ_FIXED from a file of 0xaa), and reads it out again.
    let seen = a.ask("uring-out 187");
    assert_eq!(seen.num("bytes"), (2 * MB) as i64, "{seen}");
    assert_eq!(
        seen.num("same"),
        0,
        "A read B's bytes through its fixed buffer: {seen}"
    );
    let wrote = a.ask("uring-in 170");
    assert_eq!(wrote.num("bytes"), (2 * MB) as i64, "{wrote}");
    let mine = b.ask("check 187");
    assert_eq!(
        mine.num("first"),
        -1,
        "A's write through its fixed buffer reached B's memory: {mine}"
    );
    let seen = a.ask("uring-out 187");
    assert_eq!(
        seen.num("same"),
        0,
        "A read B's bytes through its fixed buffer: {seen}"
    );
    assert_eq!(
        (seen.num("first"), seen.num("uniform")),
        (170, 1),
        "A's write landed in the page A kept: {seen}"
    );

    b.ask("release");
    d.assert_serves();
    let c = d.client();
    assert_all_zero(&from_service_within(&c, 16 * MB, Duration::from_secs(10)));
    b.exit();
    a.exit();
    d.assert_serves();
}

#[test]
fn with_reuse_fresh_a_tenants_own_io_uring_pin_never_reaches_its_next_hand_out() {
    let Some(d) = daemon_for_tenants(ONE_SEGMENT, &["--reuse", "fresh"]) else {
        return;
    };
    let (mut a, first) = holding_a_segment(&d, TENANT_A, 17);
    let reg = a.ask("uring-register 2M");
    if reg.has("skip") {
        prezero_testkit::skip(
            "kernel",
            format!(
                "io_uring is not available here (io_uring_setup: errno {})",
                reg.num("skip")
            ),
        );
        return;
    }
    assert_eq!(reg.errno(), 0, "IORING_REGISTER_BUFFERS: {reg}");
    a.ask("release");
    // The same uid asks again: the same segment, with fresh pages.
    let again = a.ask("alloc 16M");
    assert_eq!(again.num("ino"), first.num("ino"), "{again}");
    assert_eq!(again.num("nonzero"), -1, "{again}");
    let wrote = a.ask("uring-in 170");
    assert_eq!(wrote.num("bytes"), (2 * MB) as i64, "{wrote}");
    let mine = a.ask("check 0");
    assert_eq!(
        mine.num("first"),
        -1,
        "the write through the pin kept from the last hand-out reached this one: {mine}"
    );
    a.ask("release");
    a.exit();
    d.assert_serves();
}

#[test]
fn a_pool_full_of_one_uids_scrubbed_segments_still_serves_another_uid_fresh_ones() {
    // Two segments, both released by A (scrubbed in place, for A only): B's
    // request makes them fresh for B, and B's bytes are zero.
    let Some(d) = daemon_for_tenants("target=32M,cap=32M,segment=16M", &[]) else {
        return;
    };
    let mut a = Tenant::spawn(TENANT_A, &[], &d.socket);
    for _ in 0..2 {
        assert_eq!(a.ask("alloc 16M").num("nonzero"), -1);
        a.ask("fill 17");
    }
    a.ask("release");
    a.ask("release");
    a.exit();
    let mut b = Tenant::spawn(TENANT_B, &[], &d.socket);
    let got = b.ask("alloc 32M");
    assert_eq!(got.errno(), 0, "{got}");
    assert_eq!(got.num("nonzero"), -1, "{got}");
    b.ask("release");
    b.exit();
    d.assert_serves();
}

#[test]
fn a_users_processes_in_a_user_namespace_it_made_share_its_cap() {
    // A user with subordinate uids could run a process as each of them and
    // get a cap per uid; the daemon charges the namespace's owner instead.
    const SUBUID: u32 = 64210;
    let sub = SUBUID.to_string();
    let Some(d) = daemon_for_tenants(
        "target=32M,cap=32M,segment=16M",
        &["--allow-uid", &sub, "--uid-cap", "16M"],
    ) else {
        return;
    };
    let (mut a, _) = holding_a_segment(&d, TENANT_A, 1);
    // A process of A's in a user namespace A made, which root maps as
    // newuidmap does for a rootless container (0: A itself, 1: SUBUID from
    // /etc/subuid); it waits on a FIFO for the map, then becomes uid 1 there:
    // SUBUID to everyone outside.
    let go = d.dir.join("go");
    let c = std::ffi::CString::new(go.to_str().unwrap()).unwrap();
    // SAFETY: c is NUL-terminated.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    // SAFETY: chmod of the FIFO just made (mkfifo's mode is cut by the umask).
    unsafe { libc::chmod(c.as_ptr(), 0o666) };
    let a_id = TENANT_A.to_string();
    let script = format!(
        "read x < {}; exec setpriv --reuid 1 --regid 1 --keep-groups {} client alloc 16M \
         --no-fallback --socket {}",
        go.display(),
        bin(),
        d.socket.display()
    );
    let child = Command::new("setpriv")
        .args(["--reuid", &a_id, "--regid", &a_id, "--clear-groups"])
        .args(["unshare", "--user", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(child) = child else {
        prezero_testkit::skip("tool", "setpriv and unshare (util-linux) are not installed");
        return;
    };
    let pid = child.id();
    let mine = std::fs::read_link("/proc/self/ns/user").unwrap();
    wait_for(
        "the child in its own user namespace",
        Duration::from_secs(5),
        || {
            std::fs::read_link(format!("/proc/{pid}/ns/user")).is_ok_and(|n| n != mine)
                || std::fs::metadata(format!("/proc/{pid}")).is_err()
        },
    );
    let map = format!("0 {TENANT_A} 1\n1 {SUBUID} 1\n");
    let mapped = std::fs::write(format!("/proc/{pid}/setgroups"), "deny")
        .and_then(|()| std::fs::write(format!("/proc/{pid}/uid_map"), &map))
        .and_then(|()| std::fs::write(format!("/proc/{pid}/gid_map"), &map));
    std::fs::write(&go, "go\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if let Err(e) = mapped {
        prezero_testkit::skip(
            "kernel",
            format!("user namespaces cannot be made or mapped here ({e}; {text})"),
        );
        return;
    }
    assert!(!out.status.success(), "served past A's cap: {text}");
    assert!(
        text.contains(&format!("uid {TENANT_A} holds")) && text.contains("cap"),
        "charged to A, the namespace's owner: {text}"
    );
    a.ask("release");
    a.exit();
    d.assert_serves();
}

#[test]
fn a_vmspliced_pipe_kept_after_release_never_shows_the_next_tenants_bytes() {
    let Some(d) = daemon_for_tenants(ONE_SEGMENT, &[]) else {
        return;
    };
    let (mut a, got_a) = holding_a_segment(&d, TENANT_A, 17);
    // The pipe holds references to the segment's pages, with no file.
    let spliced = a.ask("vmsplice 1M");
    assert_eq!(spliced.num("bytes"), MB as i64, "{spliced}");
    a.ask("release");

    let mut b = takes_over(&d, &got_a);

    let seen = a.ask("pipe-read 187");
    assert_eq!(seen.num("bytes"), MB as i64, "{seen}");
    assert_eq!(
        seen.num("same"),
        0,
        "A read B's bytes out of its pipe: {seen}"
    );
    let mine = b.ask("check 187");
    assert_eq!(mine.num("first"), -1, "{mine}");

    b.exit();
    a.exit();
    d.assert_serves();
    let c = d.client();
    assert_all_zero(&from_service_within(&c, 16 * MB, Duration::from_secs(10)));
}

#[test]
fn truncating_a_segment_fails_and_the_next_hand_out_is_zero() {
    let Some(d) = daemon_for_tenants(ONE_SEGMENT, &[]) else {
        return;
    };
    let (mut a, got_a) = holding_a_segment(&d, TENANT_A, 90);
    // Truncated under the daemon, the segment would SIGBUS its scrubber.
    let r = a.ask("ftruncate 0");
    assert_eq!(r.errno(), libc::EPERM, "ftruncate(fd, 0): {r}");
    let r = a.ask("ftruncate 32M");
    assert_eq!(r.errno(), libc::EPERM, "ftruncate(fd, 32M): {r}");
    // A seal of the tenant's (F_SEAL_WRITE, F_SEAL_FUTURE_WRITE) would stop the refresh.
    let r = a.ask("add-seals");
    assert_eq!(r.errno(), libc::EPERM, "F_ADD_SEALS: {r}");
    let st = a.ask("stat");
    assert_eq!(st.num("size"), (16 * MB) as i64, "{st}");
    a.ask("release");
    d.assert_serves();

    let mut b = Tenant::spawn(TENANT_B, &[], &d.socket);
    let got_b = b.ask("alloc 16M");
    assert_eq!(got_b.errno(), 0, "{got_b}");
    assert_eq!(got_b.num("ino"), got_a.num("ino"), "{got_b}");
    assert_eq!(got_b.num("size"), (16 * MB) as i64, "{got_b}");
    assert_eq!(
        got_b.num("nonzero"),
        -1,
        "the next hand-out is zero: {got_b}"
    );
    b.exit();
    a.exit();
    d.assert_serves();
}

#[test]
fn growing_a_segment_fails_and_the_next_tenant_gets_exactly_the_segment_size() {
    let Some(d) = daemon_for_tenants(ONE_SEGMENT, &[]) else {
        return;
    };
    let (mut a, got_a) = holding_a_segment(&d, TENANT_A, 60);
    // Grown, the segment would hold pages the daemon neither clears nor counts.
    let r = a.ask("ftruncate 18M");
    assert_eq!(r.errno(), libc::EPERM, "ftruncate to a larger size: {r}");
    for (what, cmd) in [
        ("fallocate past the end", "fallocate 0 16M 2M"),
        ("fallocate across the end", "fallocate 0 14M 4M"),
        ("fallocate KEEP_SIZE past the end", "fallocate 1 16M 2M"),
    ] {
        let r = a.ask(cmd);
        assert_eq!(r.errno(), libc::EPERM, "{what}: {r}");
    }
    let st = a.ask("stat");
    assert_eq!(st.num("size"), (16 * MB) as i64, "{st}");
    a.ask("release");
    d.assert_serves();

    let mut b = Tenant::spawn(TENANT_B, &[], &d.socket);
    let got_b = b.ask("alloc 16M");
    assert_eq!(got_b.errno(), 0, "{got_b}");
    assert_eq!(got_b.num("ino"), got_a.num("ino"), "{got_b}");
    assert_eq!(
        got_b.num("size"),
        (16 * MB) as i64,
        "fstat of B's segment: {got_b}"
    );
    assert_eq!(got_b.num("nonzero"), -1, "{got_b}");
    b.exit();
    a.exit();
    d.assert_serves();
}

#[test]
fn a_hole_punched_under_a_hugetlb_shortage_costs_a_segment_not_the_daemon() {
    let Some(d) = daemon_for_tenants(ONE_SEGMENT, &[]) else {
        return;
    };
    let c = d.client();
    let (mut a, _) = holding_a_segment(&d, TENANT_A, 119);
    // Two pages out of the segment, then every free page of the machine into A's hands.
    let r = a.ask("fallocate 3 0 4M");
    assert_eq!(
        r.errno(),
        0,
        "a tenant may punch holes in its own segment: {r}"
    );
    let hog = a.ask("hog");
    assert!(hog.num("pages") >= 2, "{hog}");
    assert_eq!(hog.num("unreserved_after"), 0, "{hog}");
    a.ask("release");

    wait_for_log(&d, "no fresh pages", Duration::from_secs(10));
    d.assert_serves();
    // Nothing is handed out while no fresh pages can be had.
    let e = from_service(&c, 16 * MB)
        .err()
        .expect("no memory is ready during the shortage");
    assert_eq!(e.errno(), libc::ENOMEM, "{e}");
    let mut b = Tenant::spawn(TENANT_B, &[], &d.socket);
    let r = b.ask("alloc-once 16M");
    assert_eq!(r.errno(), libc::ENOMEM, "{r}");

    // A lets go: the pool grows back on its own (it retries every 5 s),
    // watched through the ledger so that no request wakes the daemon.
    a.ask("unhog");
    let t = Instant::now();
    while ledger_segments(&d) != 1 {
        assert!(
            t.elapsed() < Duration::from_secs(12),
            "the pool did not grow back within 12 s of the pages coming free \
             ({} unreserved free 2 MiB pages now):\n{}",
            unreserved_pages(),
            d.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_all_zero(&from_service_within(&c, 16 * MB, Duration::from_secs(10)));
    b.exit();
    a.exit();
    d.assert_serves();
}

#[test]
fn a_uid_flooding_connections_is_held_to_its_limit_and_others_are_still_served() {
    let Some(d) = daemon_for_tenants(
        "target=32M,cap=32M,segment=16M",
        &["--max-conns-per-uid", "16"],
    ) else {
        return;
    };
    let c = d.client();
    let mut a = Tenant::spawn(TENANT_A, &[], &d.socket);
    let t = Instant::now();
    let r = a.ask("conns 200");
    assert_eq!(r.num("opened"), 200, "{r}");
    let st = a.ask("conn-status 16");
    assert_eq!(
        (st.num("idle"), st.num("eagain"), st.num("other")),
        (16, 184, 0),
        "16 kept, the rest refused with EAGAIN: {st}"
    );
    assert_eq!(c.stats().unwrap().clients, 17, "A's 16 and this client");
    wait_for_log(
        &d,
        &format!("uid {TENANT_A}: uid {TENANT_A} has 16 connections open"),
        Duration::from_secs(5),
    );
    let logged = |d: &Daemon| {
        d.log()
            .lines()
            .filter(|l| l.contains("refused pid") && l.contains(&format!(" uid {TENANT_A}:")))
            .count()
    };
    let burst = t.elapsed().as_secs() as usize;
    assert!(
        logged(&d) <= burst + 1,
        "refusals are logged at most once a second per uid:\n{}",
        d.log()
    );
    // More than a second later, the next refusal is logged with the count of the others.
    std::thread::sleep(Duration::from_millis(1100));
    let r = a.ask("conns 5");
    assert_eq!(r.num("opened"), 5, "{r}");
    let st = a.ask("conn-status 16");
    assert_eq!((st.num("idle"), st.num("eagain")), (16, 189), "{st}");
    wait_for_log(
        &d,
        "more refusals of this uid not logged",
        Duration::from_secs(5),
    );

    // The other tenant connects and is served meanwhile.
    let mut b = Tenant::spawn(TENANT_B, &[], &d.socket);
    let got_b = b.ask("alloc 16M");
    assert_eq!(got_b.errno(), 0, "{got_b}");
    assert_eq!(got_b.num("nonzero"), -1, "{got_b}");
    d.assert_serves();

    // A is served again once it lets its connections go.
    a.ask("close-conns");
    let t = Instant::now();
    loop {
        a.ask("connect");
        let r = a.ask("alloc-once 16M");
        if r.errno() == 0 {
            assert_eq!(r.num("nonzero"), -1, "{r}");
            break;
        }
        assert!(
            r.errno() == libc::EAGAIN && t.elapsed() < Duration::from_secs(5),
            "A after closing its connections: {r}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    b.exit();
    a.exit();
    d.assert_serves();
}

#[test]
fn a_full_listen_backlog_makes_clients_fall_back_and_a_second_daemon_exit() {
    let Some(d) = daemon_for_tenants(ONE_SEGMENT, &[]) else {
        return;
    };
    // A uid in no allow list cannot even connect: the socket file refuses it.
    let mut outsider = Tenant::spawn(OUTSIDER, &[], &d.socket);
    let r = outsider.ask("connect-raw");
    assert_eq!(
        r.errno(),
        libc::EACCES,
        "connect(2) of a uid not allowed: {r}"
    );
    outsider.exit();

    let mut ledger = d.socket.clone().into_os_string();
    ledger.push(".ledger");
    let ledger_before = std::fs::read(&ledger).unwrap();
    let mut a = Tenant::spawn(TENANT_A, &[], &d.socket);
    signal(&d, libc::SIGSTOP);
    let filled = a.ask("fill-backlog");
    assert_eq!(filled.errno(), libc::EAGAIN, "{filled}");
    let somaxconn: i64 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        filled.num("n") >= somaxconn.min(4096),
        "the daemon listens with a backlog of SOMAXCONN: {filled}"
    );

    // A client gives up on connecting within a bounded time and falls back.
    let t = Instant::now();
    let c = Client::connect(&d.socket).unwrap();
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "Client::connect took {took:?}"
    );
    assert!(!c.is_connected());
    let m = c.alloc(PAGE, PageKind::Huge2M).unwrap();
    match m.source() {
        Source::Local { reason } => assert!(reason.contains("backlog"), "{reason}"),
        s => panic!("{s:?}"),
    }
    assert!(prezero::is_zero(m.as_slice()));
    drop(m);

    // A second daemon on the live socket exits with an error, touching nothing.
    let t = Instant::now();
    let mut second = Command::new(bin())
        .args([
            "serve",
            "--pool",
            "2MB:target=2M,cap=2M,segment=2M",
            "--socket",
        ])
        .arg(&d.socket)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(s) = second.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(10) {
            let _ = second.kill();
            let _ = second.wait();
            panic!("a second daemon on a socket with a full backlog still runs after 10 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    second
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success(), "{err}");
    assert!(err.contains("served by a running daemon"), "{err}");
    assert!(d.socket.exists(), "the second daemon removed the socket");
    assert_eq!(
        std::fs::read(&ledger).unwrap(),
        ledger_before,
        "the second daemon changed the ledger"
    );

    signal(&d, libc::SIGCONT);
    wait_for("the daemon to serve again", Duration::from_secs(10), || {
        let c = Client::connect(&d.socket).unwrap();
        c.is_connected() && c.stats().is_ok()
    });
    d.assert_serves();
    let c = d.client();
    assert_all_zero(&from_service_within(&c, 16 * MB, Duration::from_secs(10)));
    // A's flood past its per-uid limit was refused, and said so.
    wait_for_log(
        &d,
        &format!("uid {TENANT_A} has 64 connections open"),
        Duration::from_secs(5),
    );
    a.exit();
    d.assert_serves();
}

#[test]
fn hand_outs_stay_fast_while_another_uid_runs_500_threads_with_10000_descriptors() {
    let Some(d) = daemon_for_tenants("target=32M,cap=32M,segment=16M", &[]) else {
        return;
    };
    let mut heavy = Tenant::spawn(OUTSIDER, &[], &d.socket);
    let h = heavy.ask("heavy 500 10000");
    assert_eq!((h.num("threads"), h.num("fds")), (500, 10000), "{h}");
    let status = std::fs::read_to_string(format!("/proc/{}/status", heavy.pid())).unwrap();
    let threads: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(threads > 500, "{status}");
    let fds = std::fs::read_dir(format!("/proc/{}/fd", heavy.pid()))
        .unwrap()
        .count();
    assert!(fds > 10000, "{fds} descriptors");

    let mut a = Tenant::spawn(TENANT_A, &[], &d.socket);
    let t = Instant::now();
    let r = a.ask_within("cycles 200 16M", Duration::from_secs(25));
    let took = t.elapsed();
    assert_eq!(r.errno(), 0, "{r}");
    assert_eq!(r.num("nonzero"), 0, "hand-outs with a non-zero byte: {r}");
    assert!(
        took < Duration::from_secs(10),
        "200 alloc/release cycles took {took:?}: {r}"
    );
    a.exit();
    heavy.exit();
    d.assert_serves();
}

#[test]
fn a_uid_in_300_groups_one_of_them_allowed_is_served() {
    let Some(d) = daemon(ONE_SEGMENT, &["--allow-gid", &ALLOWED_GID.to_string()]) else {
        return;
    };
    // The allowed group last, well past the first 256.
    let mut groups: Vec<u32> = (70000..70299).collect();
    groups.push(ALLOWED_GID);
    let mut member = Tenant::spawn(GROUP_MEMBER, &groups, &d.socket);
    let got = member.ask("alloc 16M");
    assert_eq!(got.errno(), 0, "{got}\n{}", d.log());
    assert_eq!(got.num("nonzero"), -1, "{got}");
    member.exit();
    // The same uid without that group is not let in.
    let others: Vec<u32> = (70000..70300).collect();
    let mut stranger = Tenant::spawn(GROUP_MEMBER, &others, &d.socket);
    let r = stranger.ask("connect-raw");
    assert_eq!(r.errno(), libc::EACCES, "{r}");
    stranger.exit();
    d.assert_serves();
}

#[test]
fn the_uid_cap_survives_a_kill_9_and_restart_while_a_tenant_still_holds() {
    let Some(mut d) = daemon_for_tenants("target=64M,cap=64M,segment=16M", &["--uid-cap", "32M"])
    else {
        return;
    };
    let mut a = Tenant::spawn(TENANT_A, &[], &d.socket);
    let held = a.ask("alloc 32M");
    assert_eq!(held.errno(), 0, "{held}");
    let r = a.ask("alloc-once 16M");
    assert_eq!(
        r.errno(),
        libc::EDQUOT,
        "the cap holds before the restart: {r}"
    );

    d.kill9();
    d.restart();
    assert!(
        d.log().contains(&format!(
            "still held by uid {TENANT_A}: taken over in quarantine and charged to that uid"
        )),
        "{}",
        d.log()
    );
    // Still holding, on a new connection: the held memory still counts.
    a.ask("connect");
    let r = a.ask("alloc-once 16M");
    assert_eq!(
        r.errno(),
        libc::EDQUOT,
        "the cap survives the restart: {r}\n{}",
        d.log()
    );
    a.exit();

    // The holder is gone: its charge goes with it.
    let mut again = Tenant::spawn(TENANT_A, &[], &d.socket);
    let t = Instant::now();
    loop {
        let r = again.ask("alloc-once 32M");
        if r.errno() == 0 {
            assert_eq!(r.num("nonzero"), -1, "{r}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the charge of the exited holder did not go away: {r}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    again.exit();
    d.assert_serves();
}

// ---------------------------------------------------------------------------
// The tenants' side.

#[test]
#[ignore = "the tenants' side, run by the other tests under test uids"]
fn tenant_role() {
    let Some(role) = std::env::var_os(ROLE_ENV) else {
        return;
    };
    assert_eq!(role, "tenant");
    let socket = PathBuf::from(std::env::var_os(SOCKET_ENV).expect("socket path"));
    role::serve(socket);
}

mod role {
    //! Runs commands from stdin, one a line, each answered on stdout with
    //! `@@ ok key=value ...` or `@@ err why`.

    use std::io::{BufRead, Write};
    use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    use io_uring::{opcode, types, IoUring};
    use prezero::PageKind;
    use prezero_service::protocol::{self, Reply};
    use prezero_service::{Client, ServiceMemory, Source};

    use super::MARK;
    use crate::common::{seqpacket_connect, MB, NO_FALLBACK, PAGE};

    type Result<T> = std::result::Result<T, String>;

    /// How long an `alloc` waits for a segment to be ready.
    const READY_WITHIN: Duration = Duration::from_secs(10);

    fn say(s: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{MARK}{s}");
        let _ = out.flush();
    }

    pub fn serve(socket: PathBuf) {
        let mut t = State {
            socket,
            client: None,
            mem: Vec::new(),
            ring: None,
            pipe: None,
            hog: Vec::new(),
            conns: Vec::new(),
            heavy: Vec::new(),
            opath: None,
        };
        say("ok ready");
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.first() == Some(&"exit") {
                say("ok");
                break;
            }
            match t.run(&words) {
                Ok(a) => say(&format!("ok {a}")),
                Err(e) => say(&format!("err {e}")),
            }
        }
        t.unhog();
    }

    struct Ring {
        ring: IoUring,
        /// Where the registered buffer was mapped (it need not be any more).
        addr: *mut u8,
        len: usize,
    }

    struct State {
        socket: PathBuf,
        client: Option<Client>,
        /// Held allocations, the last one first in line for every command.
        mem: Vec<ServiceMemory>,
        ring: Option<Ring>,
        /// (read end, write end)
        pipe: Option<(OwnedFd, OwnedFd)>,
        /// Anonymous hugetlb mappings: (address, bytes).
        hog: Vec<(usize, usize)>,
        /// Connections, and what the daemon said on each (an errno; CLOSED).
        conns: Vec<(OwnedFd, Option<i32>)>,
        heavy: Vec<std::fs::File>,
        /// An `O_PATH` descriptor of a segment, kept past its release.
        opath: Option<OwnedFd>,
    }

    /// The daemon closed the connection without a message.
    const CLOSED: i32 = -1;

    fn size(s: &str) -> Result<usize> {
        let (num, unit) = match s.as_bytes().last() {
            Some(b'K') => (&s[..s.len() - 1], 1 << 10),
            Some(b'M') => (&s[..s.len() - 1], MB),
            Some(b'G') => (&s[..s.len() - 1], 1 << 30),
            _ => (s, 1),
        };
        num.parse::<usize>()
            .map(|n| n * unit)
            .map_err(|e| format!("size '{s}': {e}"))
    }

    fn arg<'a>(words: &[&'a str], i: usize) -> Result<&'a str> {
        words
            .get(i)
            .copied()
            .ok_or_else(|| format!("'{}' needs argument {i}", words.join(" ")))
    }

    fn last_errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    /// 0 if the call returned 0, else its errno.
    fn errno_of(r: libc::c_int) -> i32 {
        if r == 0 {
            0
        } else {
            last_errno()
        }
    }

    fn fstat(fd: libc::c_int) -> Result<libc::stat> {
        // SAFETY: an all-zero stat is valid; fstat writes into the local.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat into a local buffer.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(format!("fstat: {}", std::io::Error::last_os_error()));
        }
        Ok(st)
    }

    /// Bytes, how many equal `pat`, the first, and whether all are the first.
    fn summary(buf: &[u8], pat: u8) -> String {
        let same = buf.iter().filter(|&&b| b == pat).count();
        let first = buf.first().map_or(-1, |&b| i64::from(b));
        let uniform = u8::from(buf.iter().all(|b| Some(b) == buf.first()));
        format!(
            "bytes={} same={same} first={first} uniform={uniform}",
            buf.len()
        )
    }

    fn memfd() -> Result<OwnedFd> {
        // SAFETY: a NUL-terminated name and valid flags.
        let fd = unsafe { libc::memfd_create(c"tenant-io".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn read_sys(name: &str) -> Result<usize> {
        let p = format!("/sys/kernel/mm/hugepages/hugepages-2048kB/{name}");
        std::fs::read_to_string(&p)
            .map_err(|e| format!("{p}: {e}"))?
            .trim()
            .parse()
            .map_err(|e| format!("{p}: {e}"))
    }

    /// Free 2 MiB pages no mapping has reserved.
    fn unreserved() -> Result<usize> {
        Ok(read_sys("free_hugepages")?.saturating_sub(read_sys("resv_hugepages")?))
    }

    impl State {
        fn client(&mut self) -> &Client {
            let socket = &self.socket;
            self.client
                .get_or_insert_with(|| Client::connect(socket).expect("the socket path fits"))
        }

        fn mem(&mut self) -> Result<&mut ServiceMemory> {
            self.mem
                .last_mut()
                .ok_or_else(|| "no memory held".to_owned())
        }

        /// The memfd of the last allocation's first segment.
        fn fd(&mut self) -> Result<libc::c_int> {
            let m = self.mem()?;
            Ok(m.segments()[0].fd.as_raw_fd())
        }

        fn run(&mut self, w: &[&str]) -> Result<String> {
            match w.first().copied().unwrap_or("") {
                "connect" => {
                    let c = Client::connect(&self.socket).map_err(|e| e.to_string())?;
                    let out = format!(
                        "connected={} errno={}",
                        u8::from(c.is_connected()),
                        c.connect_errno().unwrap_or(0)
                    );
                    self.client = Some(c);
                    Ok(out)
                }
                "alloc" => self.alloc(size(arg(w, 1)?)?, true),
                "alloc-once" => self.alloc(size(arg(w, 1)?)?, false),
                "release" => {
                    // Unmaps, closes the descriptors and releases.
                    self.mem.pop().ok_or("no memory held")?;
                    Ok(String::new())
                }
                "fill" => {
                    let b: u8 = arg(w, 1)?.parse().map_err(|e| format!("{e}"))?;
                    self.mem()?.as_mut_slice().fill(b);
                    Ok(String::new())
                }
                "check" => {
                    let b: u8 = arg(w, 1)?.parse().map_err(|e| format!("{e}"))?;
                    let m = self.mem()?;
                    let first = m.as_slice().iter().position(|&x| x != b);
                    Ok(format!("first={}", first.map_or(-1, |o| o as i64)))
                }
                "stat" => Ok(format!("size={}", fstat(self.fd()?)?.st_size)),
                "open-by-path" => {
                    // What a VMM given `mem-path=/proc/self/fd/N` does.
                    let path = format!("/proc/self/fd/{}\0", self.fd()?);
                    // SAFETY: a NUL-terminated path; the descriptor is closed at once.
                    let fd =
                        unsafe { libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) };
                    if fd >= 0 {
                        // SAFETY: our own fresh descriptor.
                        unsafe { libc::close(fd) };
                    }
                    Ok(format!("errno={}", errno_of(fd.min(0))))
                }
                "keep-opath" => {
                    let path = format!("/proc/self/fd/{}\0", self.fd()?);
                    // SAFETY: a NUL-terminated path.
                    let fd =
                        unsafe { libc::open(path.as_ptr().cast(), libc::O_PATH | libc::O_CLOEXEC) };
                    if fd < 0 {
                        return Err(format!("O_PATH open: errno {}", errno_of(fd)));
                    }
                    // SAFETY: our own fresh descriptor.
                    self.opath = Some(unsafe { OwnedFd::from_raw_fd(fd) });
                    Ok(String::new())
                }
                "reopen-opath" => {
                    let kept = self.opath.as_ref().ok_or("no O_PATH descriptor kept")?;
                    let path = format!("/proc/self/fd/{}\0", kept.as_raw_fd());
                    // SAFETY: a NUL-terminated path; the descriptor is closed at once.
                    let fd =
                        unsafe { libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) };
                    if fd >= 0 {
                        // SAFETY: our own fresh descriptor.
                        unsafe { libc::close(fd) };
                    }
                    Ok(format!("errno={}", errno_of(fd.min(0))))
                }
                "ftruncate" => {
                    let len = size(arg(w, 1)?)?;
                    let fd = self.fd()?;
                    // SAFETY: ftruncate on a descriptor we hold; our mapping
                    // stays as long as the file, which the seal keeps.
                    let r = unsafe { libc::ftruncate(fd, len as libc::off_t) };
                    Ok(format!("errno={}", errno_of(r)))
                }
                "fallocate" => {
                    let mode: libc::c_int = arg(w, 1)?.parse().map_err(|e| format!("{e}"))?;
                    let (off, len) = (size(arg(w, 2)?)?, size(arg(w, 3)?)?);
                    let fd = self.fd()?;
                    // SAFETY: fallocate on a descriptor we hold. A punched range
                    // of our mapping is not touched again by this process.
                    let r = unsafe {
                        libc::fallocate(fd, mode, off as libc::off_t, len as libc::off_t)
                    };
                    Ok(format!("errno={}", errno_of(r)))
                }
                "add-seals" => {
                    let fd = self.fd()?;
                    // SAFETY: fcntl on a descriptor we hold.
                    let r = unsafe {
                        libc::fcntl(
                            fd,
                            libc::F_ADD_SEALS,
                            libc::F_SEAL_WRITE | libc::F_SEAL_FUTURE_WRITE,
                        )
                    };
                    Ok(format!("errno={}", errno_of(r)))
                }
                "uring-register" => self.uring_register(size(arg(w, 1)?)?),
                "uring-out" => self.uring_out(arg(w, 1)?.parse().map_err(|e| format!("{e}"))?),
                "uring-in" => self.uring_in(arg(w, 1)?.parse().map_err(|e| format!("{e}"))?),
                "vmsplice" => self.vmsplice(size(arg(w, 1)?)?),
                "pipe-read" => self.pipe_read(arg(w, 1)?.parse().map_err(|e| format!("{e}"))?),
                "hog" => self.hog(),
                "unhog" => {
                    self.unhog();
                    Ok(String::new())
                }
                "conns" => self.conns(arg(w, 1)?.parse().map_err(|e| format!("{e}"))?),
                "conn-status" => self.conn_status(arg(w, 1)?.parse().map_err(|e| format!("{e}"))?),
                "close-conns" => {
                    self.conns.clear();
                    Ok(String::new())
                }
                "fill-backlog" => self.fill_backlog(),
                "connect-raw" => Ok(format!(
                    "errno={}",
                    seqpacket_connect(&self.socket, 0)
                        .err()
                        .map_or(0, |e| e.raw_os_error().unwrap_or(-1))
                )),
                "heavy" => self.heavy(
                    arg(w, 1)?.parse().map_err(|e| format!("{e}"))?,
                    arg(w, 2)?.parse().map_err(|e| format!("{e}"))?,
                ),
                "cycles" => self.cycles(
                    arg(w, 1)?.parse().map_err(|e| format!("{e}"))?,
                    size(arg(w, 2)?)?,
                ),
                other => Err(format!("unknown command '{other}'")),
            }
        }

        /// Memory from the service (no fallback), retried while nothing is
        /// ready if `retry`: its inode, file size, length and first non-zero byte.
        fn alloc(&mut self, bytes: usize, retry: bool) -> Result<String> {
            let t = Instant::now();
            let m = loop {
                match self
                    .client()
                    .alloc_with(bytes, PageKind::Huge2M, NO_FALLBACK)
                {
                    Ok(m) => break m,
                    Err(e) if retry && e.errno() == libc::ENOMEM && t.elapsed() < READY_WITHIN => {
                        std::thread::sleep(Duration::from_millis(2))
                    }
                    Err(e) => return Ok(format!("errno={} why={e}", e.errno())),
                }
            };
            if !matches!(m.source(), Source::Service { .. }) {
                return Err(format!("not from the service: {:?}", m.source()));
            }
            let st = fstat(m.segments()[0].fd.as_raw_fd())?;
            let nonzero = prezero::first_nonzero(m.as_slice()).map_or(-1, |o| o as i64);
            let out = format!(
                "errno=0 ino={} size={} len={} nonzero={nonzero}",
                st.st_ino,
                st.st_size,
                m.len()
            );
            self.mem.push(m);
            Ok(out)
        }

        /// Registers the first `len` bytes of the held memory as io_uring
        /// fixed buffer 0; `skip=ERRNO` if this kernel offers no io_uring.
        fn uring_register(&mut self, len: usize) -> Result<String> {
            let m = self.mem()?;
            let addr = m.as_ptr();
            if len > m.len() {
                return Err("longer than the memory".into());
            }
            let ring = match IoUring::new(4) {
                Ok(r) => r,
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
                    return Ok(format!("skip={}", e.raw_os_error().unwrap_or(0)))
                }
                Err(e) => return Err(format!("io_uring_setup: {e}")),
            };
            let iov = libc::iovec {
                iov_base: addr.cast(),
                iov_len: len,
            };
            // SAFETY: the buffer is our live mapping now. The kernel pins its
            // pages; after this process unmaps it (the attack), fixed-buffer I/O
            // reaches only those pinned pages, never whatever this process maps
            // at that address later, so no Rust object is written behind its back.
            let r = unsafe { ring.submitter().register_buffers(&[iov]) };
            let errno = r.err().map_or(0, |e| e.raw_os_error().unwrap_or(-1));
            if errno == 0 {
                self.ring = Some(Ring { ring, addr, len });
            }
            Ok(format!("errno={errno}"))
        }

        /// One fixed-buffer operation on `fd`, waited for: its result.
        fn uring_op(&mut self, write: bool, fd: libc::c_int) -> Result<i32> {
            let r = self.ring.as_mut().ok_or("no io_uring registered")?;
            let e = if write {
                opcode::WriteFixed::new(types::Fd(fd), r.addr.cast_const(), r.len as u32, 0)
                    .offset(0)
                    .build()
            } else {
                opcode::ReadFixed::new(types::Fd(fd), r.addr, r.len as u32, 0)
                    .offset(0)
                    .build()
            };
            // SAFETY: the entry names fixed buffer 0 (pinned pages the ring
            // owns, see `uring_register`) and `fd`, which outlives the wait below.
            unsafe { r.ring.submission().push(&e) }.map_err(|_| "submission queue full")?;
            r.ring
                .submit_and_wait(1)
                .map_err(|e| format!("io_uring_enter: {e}"))?;
            let cqe = r.ring.completion().next().ok_or("no completion")?;
            Ok(cqe.result())
        }

        /// WRITE_FIXED of the whole fixed buffer to a file, read back: what
        /// the buffer holds now.
        fn uring_out(&mut self, pat: u8) -> Result<String> {
            let out = memfd()?;
            let n = self.uring_op(true, out.as_raw_fd())?;
            if n < 0 {
                return Err(format!("WRITE_FIXED: errno {}", -n));
            }
            let mut buf = vec![0u8; n as usize];
            // SAFETY: pread into a buffer of its length.
            let got =
                unsafe { libc::pread(out.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if got != n as isize {
                return Err(format!("pread: {got}"));
            }
            Ok(summary(&buf, pat))
        }

        /// READ_FIXED from a file of `b` bytes into the whole fixed buffer.
        fn uring_in(&mut self, b: u8) -> Result<String> {
            let len = self.ring.as_ref().ok_or("no io_uring registered")?.len;
            let src = memfd()?;
            let data = vec![b; len];
            // SAFETY: pwrite from a buffer of its length.
            let put = unsafe { libc::pwrite(src.as_raw_fd(), data.as_ptr().cast(), len, 0) };
            if put != len as isize {
                return Err(format!("pwrite: {put}"));
            }
            let n = self.uring_op(false, src.as_raw_fd())?;
            if n < 0 {
                return Err(format!("READ_FIXED: errno {}", -n));
            }
            Ok(format!("bytes={n}"))
        }

        /// vmsplice(2)s the first `len` bytes of the held memory into a pipe.
        fn vmsplice(&mut self, len: usize) -> Result<String> {
            let addr = self.mem()?.as_ptr();
            let mut p = [0; 2];
            // SAFETY: pipe2 fills a local array.
            if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
                return Err(format!("pipe2: {}", std::io::Error::last_os_error()));
            }
            // SAFETY: both ends are fresh descriptors nobody else owns.
            let (r, w) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
            // SAFETY: fcntl on our own pipe.
            if unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, len as libc::c_int) } < 0 {
                return Err(format!("F_SETPIPE_SZ: {}", std::io::Error::last_os_error()));
            }
            let mut done = 0;
            while done < len {
                let iov = libc::iovec {
                    // SAFETY: done < len <= the mapping's length.
                    iov_base: unsafe { addr.add(done) }.cast(),
                    iov_len: len - done,
                };
                // SAFETY: the iovec covers our live mapping; the pipe takes
                // references to its pages and never writes them.
                let n = unsafe { libc::vmsplice(w.as_raw_fd(), &iov, 1, libc::SPLICE_F_NONBLOCK) };
                if n <= 0 {
                    break;
                }
                done += n as usize;
            }
            self.pipe = Some((r, w));
            Ok(format!("bytes={done}"))
        }

        /// Everything in the pipe.
        fn pipe_read(&mut self, pat: u8) -> Result<String> {
            let (r, _) = self.pipe.as_ref().ok_or("no pipe")?;
            let mut all = Vec::new();
            let mut buf = vec![0u8; 64 << 10];
            loop {
                // SAFETY: read into a buffer of its length.
                let n = unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n <= 0 {
                    break;
                }
                all.extend_from_slice(&buf[..n as usize]);
            }
            Ok(summary(&all, pat))
        }

        /// Takes every free 2 MiB hugetlb page no one has reserved.
        fn hog(&mut self) -> Result<String> {
            let map = |pages: usize| {
                // SAFETY: a new private anonymous mapping at a kernel-chosen
                // address; hugetlb reserves its pages at mmap or fails.
                let p = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        pages * PAGE,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE
                            | libc::MAP_ANONYMOUS
                            | libc::MAP_HUGETLB
                            | libc::MAP_HUGE_2MB
                            | libc::MAP_POPULATE,
                        -1,
                        0,
                    )
                };
                (p != libc::MAP_FAILED).then_some((p as usize, pages * PAGE))
            };
            let mut pages = 0;
            let n = unreserved()?;
            if n > 0 {
                if let Some(m) = map(n) {
                    self.hog.push(m);
                    pages += n;
                }
            }
            // Whatever came free meanwhile, one page at a time.
            for _ in 0..4096 {
                match map(1) {
                    Some(m) => {
                        self.hog.push(m);
                        pages += 1;
                    }
                    None => break,
                }
            }
            Ok(format!("pages={pages} unreserved_after={}", unreserved()?))
        }

        fn unhog(&mut self) {
            for (p, len) in self.hog.drain(..) {
                // SAFETY: our own mapping from `hog`, unused by anything.
                unsafe { libc::munmap(p as *mut libc::c_void, len) };
            }
        }

        /// `n` more connections (blocking connect), held idle.
        fn conns(&mut self, n: usize) -> Result<String> {
            for i in 0..n {
                match seqpacket_connect(&self.socket, 0) {
                    Ok(fd) => self.conns.push((fd, None)),
                    Err(e) => {
                        return Ok(format!(
                            "opened={i} errno={}",
                            e.raw_os_error().unwrap_or(-1)
                        ))
                    }
                }
            }
            Ok(format!("opened={n} errno=0"))
        }

        /// Reads what the daemon said on each connection that has no verdict yet.
        fn classify(&mut self) -> usize {
            let mut buf = vec![0u8; protocol::MAX_MESSAGE + 1];
            let mut pending = 0;
            for (fd, verdict) in &mut self.conns {
                if verdict.is_some() {
                    continue;
                }
                *verdict = match protocol::recv(fd.as_fd(), &mut buf, libc::MSG_DONTWAIT) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
                    Err(_) => Some(CLOSED),
                    Ok(r) if r.len == 0 => Some(CLOSED),
                    Ok(r) => match Reply::decode(&buf[..r.len]) {
                        Ok((_, Reply::Error { errno, .. })) => Some(errno),
                        _ => Some(CLOSED),
                    },
                };
                pending += usize::from(verdict.is_none());
            }
            pending
        }

        /// Waits (3 s at most) until no more than `idle` connections are
        /// without a verdict, then a moment more for late ones: how many are
        /// idle (accepted, nothing said), refused with EAGAIN, or otherwise.
        fn conn_status(&mut self, idle: usize) -> Result<String> {
            let t = Instant::now();
            while self.classify() > idle && t.elapsed() < Duration::from_secs(3) {
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(300));
            let pending = self.classify();
            let eagain = self
                .conns
                .iter()
                .filter(|c| c.1 == Some(libc::EAGAIN))
                .count();
            let other = self.conns.len() - pending - eagain;
            Ok(format!("idle={pending} eagain={eagain} other={other}"))
        }

        /// Non-blocking connects until the listen backlog is full.
        fn fill_backlog(&mut self) -> Result<String> {
            for i in 0..20000 {
                match seqpacket_connect(&self.socket, libc::SOCK_NONBLOCK) {
                    Ok(fd) => self.conns.push((fd, None)),
                    Err(e) => return Ok(format!("n={i} errno={}", e.raw_os_error().unwrap_or(-1))),
                }
            }
            Ok("n=20000 errno=0".into())
        }

        /// `threads` sleeping threads and `fds` more open descriptors.
        fn heavy(&mut self, threads: usize, fds: usize) -> Result<String> {
            let null = std::fs::File::open("/dev/null").map_err(|e| e.to_string())?;
            for _ in 0..fds {
                self.heavy
                    .push(null.try_clone().map_err(|e| format!("dup: {e}"))?);
            }
            for _ in 0..threads {
                std::thread::Builder::new()
                    .stack_size(64 << 10)
                    .spawn(|| loop {
                        std::thread::park();
                    })
                    .map_err(|e| format!("spawn: {e}"))?;
            }
            Ok(format!("threads={threads} fds={fds}"))
        }

        /// `n` rounds of: alloc `bytes` (waiting while nothing is ready),
        /// check every byte, scribble on every 4 KiB page, release.
        fn cycles(&mut self, n: usize, bytes: usize) -> Result<String> {
            let t = Instant::now();
            let (mut nonzero, mut waits) = (0, 0);
            for _ in 0..n {
                let mut m = loop {
                    match self
                        .client()
                        .alloc_with(bytes, PageKind::Huge2M, NO_FALLBACK)
                    {
                        Ok(m) => break m,
                        Err(e)
                            if e.errno() == libc::ENOMEM
                                && t.elapsed() < Duration::from_secs(20) =>
                        {
                            waits += 1;
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        Err(e) => return Ok(format!("errno={} why={e}", e.errno())),
                    }
                };
                if !matches!(m.source(), Source::Service { .. }) {
                    return Err(format!("not from the service: {:?}", m.source()));
                }
                if prezero::first_nonzero(m.as_slice()).is_some() {
                    nonzero += 1;
                }
                for b in m.as_mut_slice().iter_mut().step_by(4096) {
                    *b = 0xa5;
                }
            }
            Ok(format!(
                "errno=0 elapsed_ms={} nonzero={nonzero} waits={waits}",
                t.elapsed().as_millis()
            ))
        }
    }
}
