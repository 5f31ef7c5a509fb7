//! The harness shared by the `prezero serve` tests: a daemon of the test's own
//! on a temporary socket, with 2 MiB hugetlb pages it reserves and gives back,
//! and the helpers that check what it hands out.

// Each test file uses part of the harness.
#![allow(dead_code)]

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use prezero::{HugetlbReservation, PageKind};
use prezero_service::protocol;
use prezero_service::{AllocOptions, Client, NodeChoice, ServiceMemory, ServiceStats, Source};
use prezero_testkit::TempDir;

pub mod tenant;

pub const MB: usize = 1 << 20;
pub const PAGE: usize = 2 * MB;
pub const NOBODY: u32 = 65534;

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_prezero")
}

/// A daemon of this test: stopped (SIGTERM) and its directory removed on drop,
/// then the hugetlb pool put back.
pub struct Daemon {
    pub child: Option<Child>,
    /// Removed (after the daemon stopped) when dropped.
    pub dir: TempDir,
    pub socket: PathBuf,
    /// Free 2 MiB pages before the daemon started: what must be free after it.
    pub free_before: usize,
    /// Everything after `serve`, for [`Daemon::restart`].
    args: Vec<OsString>,
    /// The daemon's environment beyond the test's.
    env: Vec<(OsString, OsString)>,
    _pages: HugetlbReservation,
}

/// The hugetlb pages a daemon with a pool of `page` pages for each of `pools`
/// needs, reserved (or `None`, said why, when they cannot be).
fn reserve_for(page: PageKind, pools: &[&str]) -> Option<HugetlbReservation> {
    let cap: usize = pools
        .iter()
        .map(|pool| {
            pool.split(',')
                .find_map(|kv| kv.strip_prefix("cap="))
                .map(|v| v.trim_end_matches('M').parse::<usize>().unwrap() * MB)
                .expect("tests give cap in M")
        })
        .sum();
    // Room for the daemon's cap plus local fallbacks the tests make (2 MiB).
    let slack = if page == PageKind::Huge2M { 64 } else { 0 };
    match HugetlbReservation::ensure_free(page.page_size(), cap / page.page_size() + slack) {
        Ok(r) => Some(r),
        Err(e) => {
            prezero_testkit::skip(
                "hugetlb",
                format!("cannot reserve {page} hugetlb pages: {e}"),
            );
            None
        }
    }
}

/// The kernel may free a dead process's hugetlb pages a moment after wait()
/// returns; a leak is pages that stay gone. More free pages than before are
/// no leak: a process of an earlier test (a killed client) may have held some
/// when the count was taken.
pub fn pages_come_back(page: PageKind, free_before: usize) {
    let t = Instant::now();
    while free_pages_of(page) < free_before {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{page} hugetlb pages leaked: {} free, {free_before} before",
            free_pages_of(page)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn free_pages_of(page: PageKind) -> usize {
    prezero::mm::hugetlb_pool(page.page_size()).map_or(0, |p| p.free)
}

/// Free 2 MiB pages no mapping has reserved.
pub fn unreserved_pages() -> usize {
    let read = |name: &str| -> usize {
        std::fs::read_to_string(format!("/sys/kernel/mm/hugepages/hugepages-2048kB/{name}"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    };
    read("free_hugepages").saturating_sub(read("resv_hugepages"))
}

/// Every free 2 MiB hugetlb page no mapping has reserved, taken by mappings
/// of this process's own, and given back on drop.
pub struct Hog(Vec<(usize, usize)>);

impl Hog {
    pub fn take() -> Hog {
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
        let mut hog = Hog(Vec::new());
        let n = unreserved_pages();
        if n > 0 {
            hog.0.extend(map(n));
        }
        // Whatever came free meanwhile, one page at a time.
        while let Some(m) = map(1) {
            hog.0.push(m);
        }
        hog
    }

    /// How many pages it holds.
    pub fn pages(&self) -> usize {
        self.0.iter().map(|&(_, len)| len / PAGE).sum()
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        for &(p, len) in &self.0 {
            // SAFETY: our own mapping from `take`, unused by anything.
            unsafe { libc::munmap(p as *mut libc::c_void, len) };
        }
    }
}

impl Daemon {
    /// A daemon with one 2 MiB pool (`pool` is the `--pool` value after "2MB:").
    pub fn start(pool: &str, extra: &[&str]) -> Option<Daemon> {
        Daemon::start_on(PageKind::Huge2M, pool, extra)
    }

    /// A daemon with one pool of `page` pages.
    pub fn start_on(page: PageKind, pool: &str, extra: &[&str]) -> Option<Daemon> {
        Daemon::start_pools(page, &[pool], extra)
    }

    /// A daemon with a pool of `page` pages for each of `pools`.
    pub fn start_pools(page: PageKind, pools: &[&str], extra: &[&str]) -> Option<Daemon> {
        let pages = reserve_for(page, pools)?;
        Some(Daemon::start_with(page, pools, extra, pages))
    }

    /// A daemon with one 2 MiB pool, its process given `env` (and its restarts).
    pub fn start_env(pool: &str, extra: &[&str], env: &[(&str, &str)]) -> Option<Daemon> {
        let pages = reserve_for(PageKind::Huge2M, &[pool])?;
        Some(Daemon::start_full(
            PageKind::Huge2M,
            &[pool],
            extra,
            env,
            pages,
        ))
    }

    /// A daemon with a pool of `page` pages for each of `pools`, on the
    /// hugetlb pages `pages` holds for it.
    pub fn start_with(
        page: PageKind,
        pools: &[&str],
        extra: &[&str],
        pages: HugetlbReservation,
    ) -> Daemon {
        Daemon::start_full(page, pools, extra, &[], pages)
    }

    fn start_full(
        page: PageKind,
        pools: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
        pages: HugetlbReservation,
    ) -> Daemon {
        let dir = TempDir::new("serve-test");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let socket = dir.join("s.sock");
        let free_before = free_pages_of(page);
        let mut args: Vec<OsString> = vec!["--socket".into(), socket.clone().into()];
        for pool in pools {
            args.push("--pool".into());
            args.push(format!("{}:{pool}", page.name()).into());
        }
        args.extend(extra.iter().map(OsString::from));
        let mut d = Daemon {
            child: None,
            dir,
            socket,
            free_before,
            args,
            env: env.iter().map(|&(k, v)| (k.into(), v.into())).collect(),
            _pages: pages,
        };
        d.spawn();
        let t = Instant::now();
        // The socket file exists from bind(), before listen(): a connection
        // that succeeds says the daemon accepts clients.
        while !Client::connect(&d.socket).is_ok_and(|c| c.is_connected()) {
            assert!(d.is_running(), "daemon exited at start-up: {}", d.log());
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "daemon did not start: {}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        d
    }

    /// Starts `prezero serve` with this daemon's arguments; its log is
    /// appended to daemon.log, so that a restart keeps both instances' lines.
    /// Returns at once (see [`Daemon::restart`] for a daemon that serves).
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "one instance at a time");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("daemon.log"))
            .unwrap();
        let child = Command::new(bin())
            .arg("serve")
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> libc::pid_t {
        self.child.as_ref().expect("running").id() as libc::pid_t
    }

    /// Whether the daemon process has not exited (a stopped one has not).
    pub fn is_running(&self) -> bool {
        let Some(child) = &self.child else {
            return false;
        };
        // SAFETY: an all-zero siginfo_t is valid; waitid writes into the local.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own child; WNOWAIT leaves it to be reaped by Child.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                child.id(),
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid is set by waitid (0 when nothing has exited).
        r == 0 && unsafe { info.si_pid() } == 0
    }

    /// The daemon lives on: its process runs, and a fresh client connects and
    /// gets answers.
    pub fn assert_serves(&self) {
        assert!(self.is_running(), "the daemon died:\n{}", self.log());
        let c = Client::connect(&self.socket).unwrap();
        assert!(
            c.is_connected(),
            "a fresh client cannot connect (errno {:?}):\n{}",
            c.connect_errno(),
            self.log()
        );
        if let Err(e) = c.stats() {
            panic!("a fresh client is not served: {e}\n{}", self.log());
        }
    }

    pub fn client(&self) -> Client {
        let c = Client::connect(&self.socket).unwrap();
        assert!(c.is_connected());
        c
    }

    pub fn stats(&self) -> ServiceStats {
        self.client().stats().unwrap()
    }

    /// Waits until nothing is leased, quarantined or being scrubbed.
    pub fn wait_all_ready(&self) {
        wait_for(
            "every segment back and ready",
            Duration::from_secs(30),
            || {
                let s = self.stats();
                let p = s.pools[0];
                p.leased + p.quarantined + p.scrubbing == 0 && p.ready * p.segment_size >= p.target
            },
        );
    }

    /// SIGTERM (after a SIGCONT, in case a test stopped it), and the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
        // SAFETY: as above.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if t.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!("daemon did not stop within 30 s: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL: no shutdown, the socket file and the ledger stay behind.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// A new instance on the same socket, directory and arguments, once the
    /// last one is gone (killed or stopped); returns when it accepts clients.
    pub fn restart(&mut self) {
        self.spawn();
        wait_for(
            "the restarted daemon to accept clients",
            Duration::from_secs(30),
            || {
                assert!(self.is_running(), "restart failed:\n{}", self.log());
                Client::connect(&self.socket).unwrap().is_connected()
            },
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
    }
}

pub fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < limit, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn wait_for_log(d: &Daemon, needle: &str, limit: Duration) {
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

pub const NO_FALLBACK: AllocOptions = AllocOptions {
    fallback: false,
    populate_threads: 1,
    node: NodeChoice::Caller,
    other_nodes: false,
};

pub fn from_service(c: &Client, bytes: usize) -> prezero_service::Result<ServiceMemory> {
    c.alloc_with(bytes, PageKind::Huge2M, NO_FALLBACK)
}

/// [`from_service`], retried while the pool has nothing ready (ENOMEM), up to `limit`.
pub fn from_service_within(c: &Client, bytes: usize, limit: Duration) -> ServiceMemory {
    from_service_opts_within(c, bytes, NO_FALLBACK, limit)
}

/// [`from_service_within`] with `opts`, up to 30 s.
pub fn from_service_opts(c: &Client, bytes: usize, opts: AllocOptions) -> ServiceMemory {
    from_service_opts_within(c, bytes, opts, Duration::from_secs(30))
}

fn from_service_opts_within(
    c: &Client,
    bytes: usize,
    opts: AllocOptions,
    limit: Duration,
) -> ServiceMemory {
    let t = Instant::now();
    loop {
        match c.alloc_with(bytes, PageKind::Huge2M, opts) {
            Ok(m) => return m,
            Err(e) if e.errno() == libc::ENOMEM && t.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => panic!("no {bytes} bytes from the service within {limit:?}: {e}"),
        }
    }
}

pub fn assert_all_zero(m: &ServiceMemory) {
    assert!(
        matches!(m.source(), Source::Service { .. }),
        "{:?}",
        m.source()
    );
    if let Some(off) = prezero::first_nonzero(m.as_slice()) {
        panic!("byte {off} of {} handed out is not zero", m.len());
    }
}

/// A second mapping of `m`'s first segment, independent of `m`.
pub struct KeptMapping(pub *mut u8, pub usize);

impl KeptMapping {
    pub fn of(m: &ServiceMemory) -> KeptMapping {
        let s = m.segments()[0];
        // SAFETY: a new shared mapping of a memfd we hold, at a kernel-chosen address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                s.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                s.fd.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        KeptMapping(p.cast(), s.len)
    }
}

impl Drop for KeptMapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unused after this.
        unsafe { libc::munmap(self.0.cast(), self.1) };
    }
}

/// The pool's counters: (ready, leased, quarantined + scrubbing).
pub fn counts(d: &Daemon) -> (u64, u64, u64) {
    let p = d.stats().pools[0];
    (p.ready, p.leased, p.quarantined + p.scrubbing)
}

pub fn prezero_as(uid: u32, args: &[&str]) -> (bool, String) {
    use std::os::unix::process::CommandExt;
    let out = Command::new(bin())
        .args(args)
        .uid(uid)
        .gid(uid)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `prezero client ARGS --socket <d's socket>` as uid nobody.
pub fn client_as_nobody(d: &Daemon, args: &[&str]) -> (bool, String) {
    let mut all = vec!["client"];
    all.extend(args);
    all.extend(["--socket", d.socket.to_str().unwrap()]);
    prezero_as(NOBODY, &all)
}

pub fn can_switch_uid() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        prezero_testkit::skip("root", "running a client under another uid needs root");
        return false;
    }
    let (ok, out) = prezero_as(NOBODY, &["--version"]);
    if !ok {
        prezero_testkit::skip(
            "state",
            format!("uid {NOBODY} cannot run {} ({out})", bin()),
        );
    }
    ok
}

/// A connected `SOCK_SEQPACKET` socket to `path`, or connect(2)'s error.
pub fn seqpacket_connect(path: &Path, flags: libc::c_int) -> std::io::Result<OwnedFd> {
    let kind = libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | flags;
    // SAFETY: socket() has no memory-safety preconditions.
    let fd = unsafe { libc::socket(libc::AF_UNIX, kind, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the descriptor just made, owned as soon as it exists.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a zeroed sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as _;
    for (d, s) in addr.sun_path.iter_mut().zip(path.to_str().unwrap().bytes()) {
        *d = s as libc::c_char;
    }
    let at = (&addr as *const libc::sockaddr_un).cast();
    // SAFETY: a sockaddr_un built on the stack, of the size passed.
    let r = unsafe { libc::connect(fd, at, std::mem::size_of::<libc::sockaddr_un>() as _) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(sock)
}

/// Sends raw datagrams (and descriptors) on a fresh connection.
pub struct Raw(pub OwnedFd);

impl Raw {
    pub fn connect(path: &Path) -> Raw {
        Raw(seqpacket_connect(path, 0).unwrap())
    }

    pub fn send(&self, msg: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) -> bool {
        protocol::send(self.0.as_fd(), msg, fds).is_ok()
    }

    /// Drains replies for up to `wait`; false once the daemon has hung up.
    pub fn drain(&self, wait: Duration) -> bool {
        let mut buf = vec![0u8; protocol::MAX_MESSAGE + 1];
        let mut p = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: poll on one local pollfd.
            let n = unsafe { libc::poll(&mut p, 1, wait.as_millis() as i32) };
            if n <= 0 {
                return true;
            }
            match protocol::recv(self.0.as_fd(), &mut buf, libc::MSG_DONTWAIT) {
                Ok(r) if r.len == 0 => return false,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    }
}

/// The daemon's ledger file read strictly: the `(dev, ino)` of every segment
/// it lists, or what is wrong with it (a half-written file is).
pub fn ledger_files(path: &Path) -> Result<std::collections::HashSet<(u64, u64)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines();
    let header = lines
        .next()
        .and_then(|h| h.strip_prefix("prezero-ledger 1"));
    // The boot it was written in: a 36-character id.
    let boot_ok = header.is_some_and(|b| b.is_empty() || b.len() == 37 && b.starts_with(' '));
    if !boot_ok || !text.ends_with('\n') {
        return Err(format!("not a whole ledger file: {text:?}"));
    }
    lines
        .map(|line| {
            let f: Vec<u64> = line
                .split(' ')
                .map(|x| x.parse().map_err(|_| format!("line {line:?}")))
                .collect::<Result<_, _>>()?;
            match f[..] {
                [dev, ino, page] if page == PAGE as u64 || page == 1 << 30 => Ok((dev, ino)),
                _ => Err(format!("line {line:?}")),
            }
        })
        .collect()
}

/// The `(dev, ino)` of each of `m`'s segments: their names in the ledger file.
pub fn files_of(m: &ServiceMemory) -> Vec<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    m.segments()
        .iter()
        .map(|s| {
            let f = std::fs::File::from(s.fd.try_clone_to_owned().unwrap());
            let md = f.metadata().unwrap();
            (md.dev(), md.ino())
        })
        .collect()
}

/// The ledger file of a daemon that keeps it beside its socket (the default).
pub fn ledger_path(d: &Daemon) -> PathBuf {
    let mut p = d.socket.clone().into_os_string();
    p.push(".ledger");
    PathBuf::from(p)
}
