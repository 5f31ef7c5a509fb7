//! Crash consistency of `prezero serve`: a loop SIGKILLs the daemon at random
//! moments under tenant load and restarts it each time. The moments are aimed
//! as well as a test outside the daemon can aim them: anywhere while tenants
//! allocate and release, while the event loop runs (a hand-out, a release, a
//! ledger write), while a ledger write is under way (its temporary file
//! exists), while the worker thread runs (a fill, a scrub, a verification), and
//! during start-up (the first fill, the take-over of held segments).
//!
//! The tenants are processes of two uids, two each, that allocate (8 or 16
//! MiB), check each hand-out zero and whole, write a tag into every 4 KiB
//! page of what they hold, hold it a while, check the tags intact before they
//! release, and now and then drop everything and disconnect. After each kill
//! (tenants paused): the ledger file reads whole and lists every segment a
//! tenant holds, and no segment is held by two tenants. After each restart
//! (tenants paused again): every uid's charge (`STATS` as root) comes to what
//! its tenants really hold, and the new ledger file lists it all.
//!
//! Beside the loop, a crash of the whole machine: a ledger file from before
//! the last boot takes nothing over.
//!
//! `PREZERO_CRASH_ROUNDS` rounds (10 by default, for CI); `scripts/crash-loop.sh
//! ROUNDS` runs more by hand. `PREZERO_CRASH_SEED` repeats a run's choices.
//! Skips (printing why) when not root or when the hugetlb pages cannot be
//! reserved.

mod common;

use std::collections::{HashMap, HashSet};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::tenant::{can_run_tenants, role_command, tenant_daemon, RoleProcess};
use common::*;

const TENANT_A: u32 = 64221;
const TENANT_B: u32 = 64222;
const SEGMENT: usize = 8 * MB;
/// Small beside what the tenants hold (up to 4 x 32 MiB), so segments come
/// and go all the time: fills, scrubs, trims and ledger writes.
const POOL: &str = "target=32M,cap=160M,segment=8M";

const ROUNDS_ENV: &str = "PREZERO_CRASH_ROUNDS";
const ROLE_ENV: &str = "PREZERO_CRASH_ROLE";
const SOCKET_ENV: &str = "PREZERO_CRASH_SOCKET";
const SEED_ENV: &str = "PREZERO_CRASH_SEED";

/// Held by each test for its whole run: the crash loop counts the machine's
/// free hugetlb pages at the end, which a daemon of another test would change.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// xorshift64: the loop's and each tenant's choices.
fn next(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

// ---------------------------------------------------------------------------
// The test's side.

/// One tenant process: commands a line on stdin, answers on stdout.
struct Tenant {
    uid: u32,
    p: RoleProcess,
}

/// What a paused tenant holds.
struct Holding {
    uid: u32,
    bytes: u64,
    files: Vec<(u64, u64)>,
}

impl Tenant {
    fn spawn(uid: u32, seed: u64, socket: &Path) -> Tenant {
        let mut cmd = role_command("load_role");
        cmd.env(ROLE_ENV, "load")
            .env(SOCKET_ENV, socket)
            .env(SEED_ENV, seed.to_string())
            .uid(uid)
            .gid(uid);
        let mut t = Tenant {
            uid,
            p: RoleProcess::spawn(cmd, format!("tenant uid {uid}")),
        };
        t.answer("start");
        t
    }

    fn answer(&mut self, what: &str) -> String {
        match self.p.answer(Duration::from_secs(30)) {
            Some(line) => line,
            None => panic!(
                "tenant uid {} gave no answer to '{what}' ({}); its threads:\n{}\n{}",
                self.uid,
                match self.p.child.try_wait() {
                    Ok(Some(status)) => format!("it ended: {status}"),
                    _ => "it runs".into(),
                },
                threads_of(self.p.child.id()),
                self.p.output()
            ),
        }
    }

    fn ask(&mut self, cmd: &str) -> String {
        self.p.send(cmd);
        self.answer(cmd)
    }

    /// Stops it between two steps; what it holds. A failed check of its
    /// (a hand-out not zero, a tag changed under it) is a panic here.
    fn pause(&mut self) -> Holding {
        let a = self.ask("pause");
        let field = |k: &str| {
            a.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .unwrap_or_else(|| panic!("no {k} in '{a}'"))
        };
        if field("fails=") != "0" {
            panic!(
                "tenant uid {}: {a}\n{}",
                self.uid,
                self.p
                    .output()
                    .lines()
                    .rev()
                    .take(20)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        let files = field("files=")
            .split(',')
            .filter(|f| !f.is_empty())
            .map(|f| {
                let (dev, ino) = f.split_once(':').unwrap();
                (dev.parse().unwrap(), ino.parse().unwrap())
            })
            .collect();
        Holding {
            uid: self.uid,
            bytes: field("bytes=").parse().unwrap(),
            files,
        }
    }
}

/// Each thread of process `pid`: its name, state, where it waits and its
/// kernel stack, for a tenant that does not answer.
fn threads_of(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return "gone".into();
    };
    let mut out = String::new();
    for t in tasks.flatten() {
        let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
        let stat = read("stat");
        let state = stat.rsplit_once(") ").map_or("?", |(_, s)| &s[..1]);
        out.push_str(&format!(
            "{} {} {} in {}\n{}",
            t.file_name().to_string_lossy(),
            read("comm").trim_end(),
            state,
            read("wchan"),
            read("stack")
        ));
    }
    out
}

/// Where a round's kill is aimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Moment {
    /// Anywhere while tenants allocate and release.
    Load,
    /// While the event loop runs.
    EventLoop,
    /// While the ledger's temporary file exists.
    LedgerWrite,
    /// While the worker thread runs.
    Worker,
    /// During start-up, after a kill under load.
    StartUp,
}

/// Busy-waits up to 1 s for `cond`; whether it came.
fn poll_for(mut cond: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(1) {
        if cond() {
            return true;
        }
        std::hint::spin_loop();
    }
    false
}

/// Whether the daemon's thread named `name` (its first 15 bytes) is running
/// (or waiting on the disk): "prezero", the event loop; "prezero-serve-s",
/// the worker.
fn thread_runs(pid: i32, name: &str) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").and_then(|(_, s)| s.chars().next());
        return matches!(state, Some('R' | 'D'));
    }
    false
}

/// The checks after a kill: the ledger file reads whole and lists every
/// segment a tenant holds; none is held twice.
fn check_held(held: &[Holding], ledger: &Path, when: &str) {
    let listed = ledger_files(ledger).unwrap_or_else(|e| panic!("{when}: the ledger file: {e}"));
    let mut seen = HashSet::new();
    for h in held {
        for f in &h.files {
            assert!(
                seen.insert(*f),
                "{when}: segment {f:?} is held by two tenants at once"
            );
            assert!(
                listed.contains(f),
                "{when}: segment {f:?} held by uid {} is not in the ledger file",
                h.uid
            );
        }
    }
}

/// Waits (10 s at most) until every uid's charge is what its tenants hold.
fn charges_agree(d: &Daemon, held: &[Holding], round: usize) -> Duration {
    let mut want: HashMap<u32, u64> = HashMap::new();
    for h in held {
        *want.entry(h.uid).or_insert(0) += h.bytes;
    }
    want.retain(|_, b| *b > 0);
    let t = Instant::now();
    loop {
        let s = d.stats();
        let got: HashMap<u32, u64> = s
            .tenants
            .iter()
            .filter(|t| t.charged > 0)
            .map(|t| (t.uid, t.charged))
            .collect();
        if got == want {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "round {round}: charges {got:?}, but the tenants hold {want:?}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[derive(Default)]
struct Tally {
    aimed: HashMap<Moment, usize>,
    /// Kills that came while their aim held (the temporary file there, the
    /// thread running).
    hit: HashMap<Moment, usize>,
    /// Kills that left the ledger's temporary file behind: mid-write.
    tmp_left: usize,
    /// Start-up kills before the instance listened.
    before_listening: usize,
    most_held: usize,
}

#[test]
fn the_daemon_killed_at_random_moments_under_tenant_load_loses_nothing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !can_run_tenants() {
        return;
    }
    let rounds: usize = std::env::var(ROUNDS_ENV)
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(10);
    let seed: u64 = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            t.unwrap().as_nanos() as u64 | 1
        });
    eprintln!("crash loop: {rounds} rounds, {SEED_ENV}={seed}");
    let Some(mut d) = tenant_daemon(&[TENANT_A, TENANT_B], POOL, &[]) else {
        return;
    };
    let ledger = ledger_path(&d);
    let tmp = {
        let mut p = ledger.clone().into_os_string();
        p.push(".tmp");
        PathBuf::from(p)
    };
    let mut rng = seed;
    let mut tenants: Vec<Tenant> = [TENANT_A, TENANT_A, TENANT_B, TENANT_B]
        .iter()
        .map(|&uid| Tenant::spawn(uid, next(&mut rng) | 1, &d.socket))
        .collect();
    let mut tally = Tally::default();
    let mut startup = Duration::from_millis(100);
    let pause_all = |tenants: &mut [Tenant]| -> Vec<Holding> {
        tenants.iter_mut().map(Tenant::pause).collect()
    };
    for round in 1..=rounds {
        for t in &mut tenants {
            t.ask("resume");
        }
        std::thread::sleep(Duration::from_millis(next(&mut rng) % 200));
        let moment = [
            Moment::Load,
            Moment::EventLoop,
            Moment::LedgerWrite,
            Moment::Worker,
            Moment::StartUp,
        ][(next(&mut rng) % 5) as usize];
        *tally.aimed.entry(moment).or_insert(0) += 1;
        let pid = d.pid();
        let hit = match moment {
            Moment::Load | Moment::StartUp => true,
            Moment::LedgerWrite => poll_for(|| std::fs::symlink_metadata(&tmp).is_ok()),
            Moment::EventLoop => poll_for(|| thread_runs(pid, "prezero")),
            Moment::Worker => poll_for(|| thread_runs(pid, "prezero-serve-s")),
        };
        d.kill9();
        if hit {
            *tally.hit.entry(moment).or_insert(0) += 1;
        }
        tally.tmp_left += usize::from(tmp.exists());
        if moment == Moment::StartUp {
            let listening = d.log().matches("listening on").count();
            d.spawn();
            let wait = next(&mut rng) % (startup.as_micros() as u64).max(1);
            std::thread::sleep(Duration::from_micros(wait));
            d.kill9();
            let early = d.log().matches("listening on").count() == listening;
            tally.before_listening += usize::from(early);
            tally.tmp_left += usize::from(tmp.exists());
        }
        let held = pause_all(&mut tenants);
        tally.most_held = tally
            .most_held
            .max(held.iter().map(|h| h.files.len()).sum());
        check_held(&held, &ledger, &format!("round {round}, after the kill"));

        for t in &mut tenants {
            t.ask("resume");
        }
        let t = Instant::now();
        d.restart();
        startup = t.elapsed();
        std::thread::sleep(Duration::from_millis(next(&mut rng) % 100));
        let held = pause_all(&mut tenants);
        let settled = charges_agree(&d, &held, round);
        check_held(&held, &ledger, &format!("round {round}, after the restart"));
        let segments: usize = held.iter().map(|h| h.files.len()).sum();
        eprintln!(
            "round {round}/{rounds}: {moment:?}{} killed; restarted in {} ms; \
             {segments} segments held; charges agreed after {} ms",
            if hit { "" } else { " (missed its aim)" },
            startup.as_millis(),
            settled.as_millis()
        );
    }
    for mut t in tenants.drain(..) {
        t.ask("exit");
    }
    d.wait_all_ready();
    let s = d.stats();
    assert_eq!(s.verify_failures, 0);
    assert!(s.tenants.iter().all(|t| t.charged == 0), "{:?}", s.tenants);
    let c = d.client();
    let all = from_service_within(&c, 32 * MB, Duration::from_secs(10));
    assert_all_zero(&all);
    drop(all);
    drop(c);
    assert!(d.stop().success());
    pages_come_back(prezero::PageKind::Huge2M, d.free_before);
    let n = |m: &HashMap<Moment, usize>, k| m.get(&k).copied().unwrap_or(0);
    eprintln!(
        "crash loop: {rounds} of {rounds} rounds passed ({SEED_ENV}={seed}). Kills aimed \
         (hit/aimed): under load {}/{}, while the event loop ran {}/{}, at a ledger write \
         {}/{}, while the worker ran {}/{}, in start-up {}/{} (before listening: {}); kills \
         that left the ledger's temporary file: {}; most segments held at a kill: {}",
        n(&tally.hit, Moment::Load),
        n(&tally.aimed, Moment::Load),
        n(&tally.hit, Moment::EventLoop),
        n(&tally.aimed, Moment::EventLoop),
        n(&tally.hit, Moment::LedgerWrite),
        n(&tally.aimed, Moment::LedgerWrite),
        n(&tally.hit, Moment::Worker),
        n(&tally.aimed, Moment::Worker),
        n(&tally.hit, Moment::StartUp),
        n(&tally.aimed, Moment::StartUp),
        tally.before_listening,
        tally.tmp_left,
        tally.most_held
    );
}

/// A machine crash leaves a ledger kept on a disk naming files of the boot
/// before; inode numbers start again at every boot, so its lines can name
/// files of this one. Here one names a local memfd of a client's own, named
/// and sealed as segments are (as the client's fallback is): a daemon that
/// took it over would make it root's, mode 0600 (the client could no longer
/// open it by path, as a VMM given `mem-path` does) and charge the client.
#[test]
fn a_ledger_written_before_the_last_boot_takes_nothing_over() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::fs::MetadataExt;
    // SAFETY: a NUL-terminated name and valid flags.
    let fd = unsafe {
        libc::memfd_create(
            c"prezero-local".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    assert!(fd >= 0, "{}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor nobody else owns.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.set_len(PAGE as u64).unwrap();
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on our own memfd, open for the call.
    let sealed = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) };
    assert_eq!(sealed, 0);
    let before = file.metadata().unwrap();
    let dir = prezero_testkit::TempDir::new("stale-ledger");
    let ledger = dir.join("ledger");
    std::fs::write(
        &ledger,
        format!(
            "prezero-ledger 1 00000000-0000-0000-0000-000000000000\n{} {} {PAGE}\n",
            before.dev(),
            before.ino()
        ),
    )
    .unwrap();
    let started = Daemon::start(
        "target=2M,cap=2M,segment=2M",
        &["--ledger", ledger.to_str().unwrap()],
    );
    let Some(d) = started else {
        return;
    };
    let log = d.log();
    let charged: u64 = d.stats().tenants.iter().map(|t| t.charged).sum();
    let after = file.metadata().unwrap();
    drop(d);
    assert!(!log.contains("taken over"), "{log}");
    assert!(log.contains("before the machine last booted"), "{log}");
    assert_eq!(charged, 0);
    assert_eq!(
        (after.uid(), after.mode()),
        (before.uid(), before.mode()),
        "the client's own file was taken over"
    );
}

// ---------------------------------------------------------------------------
// The tenants' side.

#[test]
#[ignore = "the tenants' side, run by the crash loop under test uids"]
fn load_role() {
    let Some(role) = std::env::var_os(ROLE_ENV) else {
        return;
    };
    assert_eq!(role, "load");
    let socket = PathBuf::from(std::env::var_os(SOCKET_ENV).expect("socket path"));
    let seed = std::env::var(SEED_ENV).unwrap().parse().unwrap();
    load::serve(socket, seed);
}

mod load {
    //! A tenant's load in a thread of its own; commands on stdin (`pause`,
    //! `resume`, `exit`) each answered with one line `@@ ...` on stdout.

    use std::io::BufRead;
    use std::path::{Path, PathBuf};
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::Duration;

    use prezero::PageKind;
    use prezero_service::{Client, ServiceMemory, Source};

    use super::{next, SEGMENT};
    use crate::common::tenant::say;
    use crate::common::{files_of, NO_FALLBACK};

    #[derive(Default)]
    struct Control {
        pause: bool,
        /// The load stands still, its report made.
        parked: Option<String>,
        exit: bool,
    }

    type Shared = Arc<(Mutex<Control>, Condvar)>;

    pub fn serve(socket: PathBuf, seed: u64) {
        let shared: Shared = Arc::default();
        let s = shared.clone();
        let load = std::thread::spawn(move || run(&socket, seed, &s));
        say("ok ready");
        let (lock, cv) = &*shared;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let mut c = lock.lock().unwrap();
            match line.trim() {
                "pause" => {
                    c.pause = true;
                    cv.notify_all();
                    let report = loop {
                        if let Some(r) = &c.parked {
                            break r.clone();
                        }
                        c = cv.wait(c).unwrap();
                    };
                    say(&format!("ok {report}"));
                }
                "resume" => {
                    c.pause = false;
                    c.parked = None;
                    cv.notify_all();
                    say("ok");
                }
                "exit" => {
                    c.exit = true;
                    cv.notify_all();
                    drop(c);
                    load.join().unwrap();
                    say("ok");
                    return;
                }
                other => say(&format!("err unknown command '{other}'")),
            }
        }
    }

    /// An allocation held, with the tag written into each of its 4 KiB pages.
    struct Held {
        m: ServiceMemory,
        tag: u64,
    }

    impl Held {
        fn intact(&self) -> Option<String> {
            let bad = self
                .m
                .as_slice()
                .chunks(4096)
                .position(|p| p[..8] != self.tag.to_ne_bytes())?;
            Some(format!(
                "the tag of a held allocation ({} bytes, files {:?}) changed in page {bad}",
                self.m.len(),
                files_of(&self.m)
            ))
        }
    }

    /// What a paused tenant answers: bytes and segment files held, failed checks.
    fn report(held: &[Held], fails: &[String]) -> String {
        let files: Vec<String> = held
            .iter()
            .flat_map(|h| files_of(&h.m))
            .map(|(dev, ino)| format!("{dev}:{ino}"))
            .collect();
        let bytes: usize = held.iter().map(|h| h.m.len()).sum();
        format!(
            "bytes={bytes} files={} fails={} why={}",
            files.join(","),
            fails.len(),
            fails.first().map_or("", String::as_str)
        )
    }

    fn run(socket: &Path, seed: u64, shared: &Shared) {
        let (lock, cv) = &**shared;
        let mut rng = seed;
        let mut held: Vec<Held> = Vec::new();
        let mut client: Option<Client> = None;
        let mut fails: Vec<String> = Vec::new();
        let mut made = 0u64;
        loop {
            {
                let mut c = lock.lock().unwrap();
                // A resume and the next pause can both come before this
                // thread wakes: every pause that finds no report gets one.
                while c.pause && !c.exit {
                    if c.parked.is_none() {
                        fails.extend(held.iter().filter_map(Held::intact));
                        c.parked = Some(report(&held, &fails));
                        cv.notify_all();
                    }
                    c = cv.wait(c).unwrap();
                }
                if c.exit {
                    return;
                }
            }
            let r = next(&mut rng);
            match r % 16 {
                0..=8 if held.len() < 2 => {
                    let c = client
                        .get_or_insert_with(|| Client::connect(socket).expect("the path fits"));
                    let bytes = if r & 64 == 0 { SEGMENT } else { 2 * SEGMENT };
                    match c.alloc_with(bytes, PageKind::Huge2M, NO_FALLBACK) {
                        Ok(mut m) => {
                            if !matches!(m.source(), Source::Service { .. }) || m.len() != bytes {
                                fails.push(format!("a hand-out of {bytes}: {:?}", m.source()));
                            }
                            if let Some(off) = prezero::first_nonzero(m.as_slice()) {
                                fails.push(format!(
                                    "byte {off} of a hand-out of {bytes} (files {:?}) is not zero",
                                    files_of(&m)
                                ));
                            }
                            made += 1;
                            let tag = (seed << 32) ^ made;
                            for p in m.as_mut_slice().chunks_mut(4096) {
                                p[..8].copy_from_slice(&tag.to_ne_bytes());
                            }
                            held.push(Held { m, tag });
                        }
                        Err(e)
                            if matches!(e.errno(), libc::ENOMEM | libc::EDQUOT | libc::EAGAIN) =>
                        {
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        // The daemon is gone: a new connection, when it is back.
                        Err(_) => {
                            client = None;
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                }
                15 => {
                    // Everything dropped, and the connection with it.
                    fails.extend(held.iter().filter_map(Held::intact));
                    held.clear();
                    client = None;
                }
                _ if !held.is_empty() => {
                    let h = held.swap_remove((r >> 8) as usize % held.len());
                    fails.extend(h.intact());
                }
                _ => {}
            }
            std::thread::sleep(Duration::from_micros(r % 4000));
        }
    }
}
