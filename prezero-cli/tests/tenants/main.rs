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
//!
//! The attacks, by what the tenant tries: `kept` (references to a segment
//! kept past its release), `files` (changes to a segment's file), `floods`
//! (connections, threads and descriptors), `admission` (who is served and
//! charged); `role` is the tenants' side.

#[path = "../common/mod.rs"]
mod common;

mod admission;
mod files;
mod floods;
mod kept;
mod role;

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::tenant::{role_command, tenant_daemon, RoleProcess};
use common::*;

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

// ---------------------------------------------------------------------------
// The test's side: tenant processes and their answers.

/// A daemon both tenants may use.
fn daemon_for_tenants(pool: &str, extra: &[&str]) -> Option<Daemon> {
    tenant_daemon(&[TENANT_A, TENANT_B], pool, extra)
}

/// One tenant process (see the module comment). Killed on drop.
struct Tenant {
    uid: u32,
    p: RoleProcess,
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
        let mut cmd = role_command("tenant_role");
        cmd.env(ROLE_ENV, "tenant").env(SOCKET_ENV, socket);
        // Everything the child needs is made before the fork: it must not allocate.
        let groups: Vec<libc::gid_t> = groups.to_vec();
        let gid = uid as libc::gid_t;
        // Room for the floods (descriptors) and the io_uring fixed buffer
        // (pinned pages count against RLIMIT_MEMLOCK), as far as the hard
        // limits go: raising those needs CAP_SYS_RESOURCE, which root may lack.
        let nofile = soft_limit(libc::RLIMIT_NOFILE, 16384);
        let memlock = soft_limit(libc::RLIMIT_MEMLOCK, 64 << 20);
        let in_child = move || {
            let fail = || Err(std::io::Error::last_os_error());
            // SAFETY: reads a limit made before the fork.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &nofile) } != 0 {
                return fail();
            }
            // SAFETY: as above.
            if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &memlock) } != 0 {
                return fail();
            }
            // SAFETY: reads the group list made before the fork.
            if unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) } != 0 {
                return fail();
            }
            // SAFETY: no pointers; the calling thread's credentials.
            if unsafe { libc::syscall(libc::SYS_setgid, gid) } != 0 {
                return fail();
            }
            // SAFETY: as for setgid.
            if unsafe { libc::syscall(libc::SYS_setuid, uid) } != 0 {
                return fail();
            }
            Ok(())
        };
        // SAFETY: the closure runs in the forked child before exec and makes only
        // system calls on data made before the fork: no allocation, no lock. The
        // credentials are set with raw system calls, which change the calling
        // thread's only (the child has no other), in the order that keeps the
        // permission to make the next: groups, gid, then uid. (std's `uid()`
        // would run before this and drop root first.)
        unsafe { cmd.pre_exec(in_child) };
        let mut t = Tenant {
            uid,
            p: RoleProcess::spawn(cmd, format!("tenant uid {uid}")),
        };
        t.answer("start", Duration::from_secs(20));
        t
    }

    /// Waits up to `limit` for the next answer; a failed command is a panic.
    fn answer(&mut self, what: &str, limit: Duration) -> Answer {
        match self.p.answer(limit) {
            Some(line) => {
                if let Some(e) = line.strip_prefix("err ") {
                    panic!(
                        "tenant uid {}: '{what}' failed: {e}\n{}",
                        self.uid,
                        self.p.output()
                    );
                }
                Answer::parse(line.strip_prefix("ok").unwrap_or(&line).trim().to_owned())
            }
            None => panic!(
                "tenant uid {} gave no answer to '{what}' within {limit:?} (or exited):\n{}",
                self.uid,
                self.p.output()
            ),
        }
    }

    /// Sends one command and waits (20 s at most) for its answer.
    fn ask(&mut self, cmd: &str) -> Answer {
        self.ask_within(cmd, Duration::from_secs(20))
    }

    fn ask_within(&mut self, cmd: &str, limit: Duration) -> Answer {
        self.p.send(cmd);
        let a = self.answer(cmd, limit);
        if std::env::var_os("PREZERO_TENANT_TRACE").is_some() {
            eprintln!("tenant uid {}: {cmd} -> {a}", self.uid);
        }
        a
    }

    fn pid(&self) -> u32 {
        self.p.child.id()
    }

    /// Lets the tenant end on its own (dropping what it holds), and reaps it.
    fn exit(mut self) {
        self.ask("exit");
        let t = Instant::now();
        while self.p.child.try_wait().unwrap().is_none() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "tenant uid {} did not exit:\n{}",
                self.uid,
                self.p.output()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Segments the daemon's ledger lists (read from the file: asks the daemon nothing).
fn ledger_segments(d: &Daemon) -> usize {
    let mut p = d.socket.clone().into_os_string();
    p.push(".ledger");
    std::fs::read_to_string(PathBuf::from(p)).map_or(0, |t| t.lines().skip(1).count())
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
