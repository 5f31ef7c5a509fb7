//! `prezero serve`: one event loop owns every segment and connection; a worker
//! thread scrubs and creates segments. See `docs/PROTOCOL.md` for the wire side.
//!
//! A segment's life, and the rule that keeps tenants apart:
//!
//! ```text
//!   create ──> Ready ──ALLOC──> Leased(conn) ──RELEASE / disconnect / exit──> Quarantined(uid)
//!                ^                                                              │
//!                │               no other open file description (lease check)   │
//!                │               and no fd or mapping in /proc                  v
//!                └──── verified zero <── Scrubbing(uid) <───────────────────────┘
//! ```
//!
//! * Only the event loop changes states; the worker owns a segment's memory
//!   only while it is `Scrubbing`, and hands it back by message.
//! * `Quarantined` and `Scrubbing` segments count against the uid that held them.
//! * A segment that fails verification is destroyed, never handed out.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::protocol::{
    self, Malformed, PoolCounters, Reply, Request, SegmentRecord, ServiceStats, MAX_FDS,
    MAX_MESSAGE,
};
use super::segment::{check_leases_work, Segment};
use super::worker::{Done, Job, Verify, Worker};
use super::{socket_address, DEFAULT_SOCKET};
use crate::error::{Error, Result};
use crate::pool::ScrubPriority;
use crate::region::PageKind;

/// One pool of the daemon: segments of one page size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// `Huge2M` or `Huge1G`.
    pub page: PageKind,
    /// Bytes per segment (a multiple of the page size): the unit handed out.
    pub segment_size: usize,
    /// Zeroed bytes to keep ready; more is created in the background, and ready
    /// memory beyond it goes back to the hugetlb pool.
    pub target: usize,
    /// Most bytes of this pool in all states together.
    pub cap: usize,
}

/// Everything `prezero serve` is told.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where the socket is created (default `/run/prezero/prezero.sock`).
    pub socket: PathBuf,
    /// At most one pool per page size.
    pub pools: Vec<PoolConfig>,
    /// Uids that may connect, besides root and the daemon's own uid.
    pub allow_uids: Vec<u32>,
    /// Groups whose members (primary or supplementary) may connect.
    pub allow_gids: Vec<u32>,
    /// Most bytes one uid may hold plus have in quarantine (`None`: no cap).
    pub uid_cap: Option<usize>,
    /// How scrubbed segments are checked.
    pub verify: Verify,
    /// The worker's scheduling.
    pub scrub_priority: ScrubPriority,
    /// How often quarantined segments are checked for other holders.
    pub recheck: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            socket: PathBuf::from(DEFAULT_SOCKET),
            pools: Vec::new(),
            allow_uids: Vec::new(),
            allow_gids: Vec::new(),
            uid_cap: None,
            verify: Verify::Full,
            scrub_priority: ScrubPriority::Idle,
            recheck: Duration::from_millis(20),
        }
    }
}

impl ServerConfig {
    fn validate(&self) -> Result<()> {
        if self.pools.is_empty() {
            return Err(Error::invalid("no pools configured"));
        }
        let mut seen = HashSet::new();
        for p in &self.pools {
            let name = p.page.name();
            if !p.page.is_hugetlb() {
                return Err(Error::invalid(format!(
                    "pool {name}: the service serves hugetlb pages (2MB or 1GB)"
                )));
            }
            if !seen.insert(p.page) {
                return Err(Error::invalid(format!("two pools of page size {name}")));
            }
            let page = p.page.page_size();
            if p.segment_size == 0 || !p.segment_size.is_multiple_of(page) {
                return Err(Error::invalid(format!(
                    "pool {name}: segment size {} is not a positive multiple of the page size",
                    p.segment_size
                )));
            }
            if p.cap < p.segment_size || p.target > p.cap {
                return Err(Error::invalid(format!(
                    "pool {name}: need segment <= cap and target <= cap"
                )));
            }
        }
        if let Verify::Sampled { one_in: 0 } = self.verify {
            return Err(Error::invalid("sampled verification needs one_in >= 1"));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ready,
    Leased { conn: u64, uid: u32 },
    Quarantined { uid: u32 },
    Scrubbing { uid: u32 },
}

struct Slot {
    pool: usize,
    len: usize,
    state: State,
    /// `None` while the worker has it.
    seg: Option<Segment>,
}

struct Conn {
    sock: OwnedFd,
    pidfd: Option<OwnedFd>,
    pid: i32,
    uid: u32,
}

#[derive(Default)]
struct Counters {
    handouts: u64,
    refusals: u64,
    protocol_errors: u64,
    scrubbed_bytes: u64,
    scrub_ns: u64,
    verified_bytes: u64,
    verify_ns: u64,
    verify_failures: u64,
}

struct PoolRun {
    cfg: PoolConfig,
    creating: bool,
    /// After a failed creation (hugetlb shortage), no retry before this.
    retry_at: Option<Instant>,
}

/// Most connections at once: each costs two descriptors.
const MAX_CONNS: usize = 4096;

/// The daemon. [`Server::start`] creates the pools and the socket; [`Server::run`]
/// serves until SIGINT or SIGTERM.
pub struct Server {
    cfg: ServerConfig,
    listener: OwnedFd,
    pools: Vec<PoolRun>,
    slots: BTreeMap<u64, Slot>,
    next_id: u64,
    conns: HashMap<u64, Conn>,
    next_conn: u64,
    counters: Counters,
    worker: Worker,
    done: Receiver<Done>,
    wake: Arc<OwnedFd>,
    signals: OwnedFd,
    last_check: Instant,
    /// Set while accept(2) fails for want of descriptors.
    accept_paused_until: Option<Instant>,
    /// Peer credentials of the process that starts the daemon.
    my_uid: u32,
}

fn log(msg: &str) {
    eprintln!("prezero serve: {msg}");
}

fn mib(bytes: usize) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

impl Server {
    /// Checks the configuration, blocks SIGINT/SIGTERM/SIGHUP in the calling
    /// thread (they arrive through a signalfd and stop [`Server::run`]), creates
    /// and populates each pool's initial segments, and only then creates the
    /// socket, so a client that can connect finds memory ready. A hugetlb
    /// shortage is logged and leaves a smaller pool.
    pub fn start(cfg: ServerConfig) -> Result<Server> {
        cfg.validate()?;
        // Fail before populating gigabytes, not after.
        socket_address(&cfg.socket)?;
        refuse_if_served(&cfg.socket)?;
        check_leases_work()?;
        raise_nofile_limit();
        let signals = block_stop_signals()?;
        // A lease break (someone opening a segment during the lease probe) would
        // send SIGIO, whose default action ends the process.
        // SAFETY: ignoring a signal has no preconditions.
        unsafe { libc::signal(libc::SIGIO, libc::SIG_IGN) };
        // SAFETY: prctl(PR_SET_DUMPABLE, 0) only changes this process's
        // /proc ownership and ptrace access: other uids cannot reach our fds.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
        // SAFETY: eventfd has no memory-safety preconditions.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(Error::os("eventfd", io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(raw) });
        let (tx, done) = std::sync::mpsc::channel();
        let worker = Worker::spawn(cfg.scrub_priority, cfg.verify, tx, wake.clone())
            .map_err(|e| Error::os("spawn scrubber thread", e))?;

        let mut slots = BTreeMap::new();
        let mut next_id = 1;
        let threads = crate::sys::online_cpus();
        for (i, p) in cfg.pools.iter().enumerate() {
            let want = p.target.div_ceil(p.segment_size);
            let t = Instant::now();
            let mut got = 0;
            let mut shortage = None;
            while got < want {
                match Segment::create(p.page, p.segment_size, threads) {
                    Ok(seg) => {
                        slots.insert(
                            next_id,
                            Slot {
                                pool: i,
                                len: p.segment_size,
                                state: State::Ready,
                                seg: Some(seg),
                            },
                        );
                        next_id += 1;
                        got += 1;
                    }
                    Err(e @ Error::HugetlbShortage { .. }) => {
                        shortage = Some(e);
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            let name = p.page.name();
            let s = mib(p.segment_size);
            match shortage {
                None => log(&format!(
                    "pool {name}: {got} segments of {s} ready ({}) in {:.2} s",
                    mib(got * p.segment_size),
                    t.elapsed().as_secs_f64()
                )),
                Some(_) => {
                    let page = p.page.page_size();
                    let free = crate::cpu::hugetlb_pool(page).map_or(0, |h| h.free);
                    let total = crate::cpu::hugetlb_pool(page).map_or(0, |h| h.total);
                    let more = (want - got) * (p.segment_size / page);
                    log(&format!(
                        "pool {name}: hugetlb shortage: {got} of {want} segments of {s} ({} of {}); \
                         {free} free {name} pages; reserve more with: echo {} > {}",
                        mib(got * p.segment_size),
                        mib(p.target),
                        total + more,
                        crate::cpu::HugetlbPool::nr_path(page)
                    ));
                }
            }
        }
        let listener = bind(&cfg.socket)?;
        log(&format!(
            "listening on {} (protocol {})",
            cfg.socket.display(),
            protocol::VERSION
        ));
        Ok(Server {
            pools: cfg
                .pools
                .iter()
                .map(|&cfg| PoolRun {
                    cfg,
                    creating: false,
                    retry_at: None,
                })
                .collect(),
            cfg,
            listener,
            slots,
            next_id,
            conns: HashMap::new(),
            next_conn: 1,
            counters: Counters::default(),
            worker,
            done,
            wake,
            signals,
            last_check: Instant::now(),
            accept_paused_until: None,
            // SAFETY: geteuid has no preconditions.
            my_uid: unsafe { libc::geteuid() },
        })
    }

    /// Serves until SIGINT or SIGTERM, then shuts down: connections close, the
    /// worker stops, the socket is removed. Segments clients hold stay valid for
    /// them (their own open file and mappings keep the pages).
    pub fn run(mut self) -> Result<()> {
        loop {
            self.maintain();
            let paused = self.accept_paused_until.filter(|&t| Instant::now() < t);
            let mut fds = vec![
                pollfd(self.signals.as_raw_fd()),
                // A negative fd is skipped by poll: no accepting while out of descriptors.
                pollfd(paused.map_or(self.listener.as_raw_fd(), |_| -1)),
                pollfd(self.wake.as_raw_fd()),
            ];
            let mut owners = Vec::with_capacity(self.conns.len() * 2);
            for (&id, c) in &self.conns {
                fds.push(pollfd(c.sock.as_raw_fd()));
                owners.push(id);
                if let Some(p) = &c.pidfd {
                    fds.push(pollfd(p.as_raw_fd()));
                    owners.push(id);
                }
            }
            let timeout = if self.any_quarantined() || paused.is_some() {
                self.cfg.recheck.as_millis().max(1) as libc::c_int
            } else {
                -1
            };
            // SAFETY: fds is a live array of pollfd of the stated length.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(Error::os("poll", e));
            }
            if fds[0].revents != 0 {
                break;
            }
            if fds[2].revents != 0 {
                self.collect_done();
            }
            if fds[1].revents != 0 {
                self.accept_all();
            }
            for (pfd, &id) in fds[3..].iter().zip(&owners) {
                if pfd.revents == 0 || !self.conns.contains_key(&id) {
                    continue;
                }
                let c = &self.conns[&id];
                let is_pidfd = c.pidfd.as_ref().is_some_and(|p| p.as_raw_fd() == pfd.fd);
                if is_pidfd {
                    // The client process exited: whatever it held is released,
                    // even if a child inherited the socket.
                    self.disconnect(id);
                } else if pfd.revents & libc::POLLIN != 0 {
                    self.serve_conn(id);
                } else {
                    self.disconnect(id);
                }
            }
            if self.any_quarantined() && self.last_check.elapsed() >= self.cfg.recheck {
                self.check_quarantine();
            }
        }
        self.shutdown();
        Ok(())
    }

    fn shutdown(&mut self) {
        let outstanding = self
            .slots
            .values()
            .filter(|s| matches!(s.state, State::Leased { .. }))
            .count();
        log(&format!(
            "stopping: {} connections, {outstanding} segments still with clients (they stay valid)",
            self.conns.len()
        ));
        self.conns.clear();
        self.worker.shutdown();
        self.slots.clear();
        let _ = std::fs::remove_file(&self.cfg.socket);
    }

    fn any_quarantined(&self) -> bool {
        self.slots
            .values()
            .any(|s| matches!(s.state, State::Quarantined { .. }))
    }

    fn accept_all(&mut self) {
        loop {
            // SAFETY: accept4 with null address buffers only returns a new descriptor.
            let raw = unsafe {
                libc::accept4(
                    self.listener.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if raw < 0 {
                let e = io::Error::last_os_error().raw_os_error();
                if matches!(
                    e,
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                ) {
                    // The connection waits in the backlog; polling the listener
                    // now would only spin.
                    if self.accept_paused_until.is_none() {
                        log("out of descriptors: accepting paused (raise LimitNOFILE)");
                    }
                    self.accept_paused_until = Some(Instant::now() + Duration::from_millis(100));
                }
                return;
            }
            self.accept_paused_until = None;
            // SAFETY: a fresh descriptor nobody else owns.
            let sock = unsafe { OwnedFd::from_raw_fd(raw) };
            let Ok(cred) = peer_cred(sock.as_fd()) else {
                continue;
            };
            if let Err(why) = self.authorize(sock.as_fd(), &cred) {
                self.counters.refusals += 1;
                log(&format!("refused pid {} uid {}: {why}", cred.pid, cred.uid));
                let _ = send_error(sock.as_fd(), 0, libc::EACCES, 0, &why);
                continue;
            }
            if self.conns.len() >= MAX_CONNS {
                self.counters.refusals += 1;
                let _ = send_error(sock.as_fd(), 0, libc::EAGAIN, 0, "too many connections");
                continue;
            }
            let pidfd = peer_pidfd(sock.as_fd(), cred.pid);
            let id = self.next_conn;
            self.next_conn += 1;
            self.conns.insert(
                id,
                Conn {
                    sock,
                    pidfd,
                    pid: cred.pid,
                    uid: cred.uid,
                },
            );
        }
    }

    fn authorize(
        &self,
        sock: BorrowedFd<'_>,
        cred: &libc::ucred,
    ) -> std::result::Result<(), String> {
        if cred.uid == 0
            || cred.uid == self.my_uid
            || self.cfg.allow_uids.contains(&cred.uid)
            || self.cfg.allow_gids.contains(&cred.gid)
        {
            return Ok(());
        }
        if !self.cfg.allow_gids.is_empty() {
            let groups = peer_groups(sock);
            if groups.iter().any(|g| self.cfg.allow_gids.contains(g)) {
                return Ok(());
            }
        }
        Err(format!(
            "uid {} (gid {}) may not use this service: add it to allow_uids or allow_gids",
            cred.uid, cred.gid
        ))
    }

    /// Answers what one connection has sent, at most `MAX_BATCH` messages per
    /// turn so a client that floods cannot starve the others.
    fn serve_conn(&mut self, id: u64) {
        const MAX_BATCH: usize = 64;
        let mut buf = vec![0u8; MAX_MESSAGE + 1];
        for _ in 0..MAX_BATCH {
            let Some(c) = self.conns.get(&id) else { return };
            let got = match protocol::recv(c.sock.as_fd(), &mut buf, libc::MSG_DONTWAIT) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => return self.disconnect(id),
            };
            if got.len == 0 && !got.truncated {
                return self.disconnect(id);
            }
            let decoded = if got.truncated {
                Err(Malformed("longer than 4096 bytes"))
            } else if !got.fds.is_empty() || got.fds_truncated {
                Err(Malformed("requests carry no file descriptors"))
            } else {
                Request::decode(&buf[..got.len])
            };
            drop(got.fds);
            match decoded {
                Ok((seq, req)) => {
                    if !self.handle(id, seq, req) {
                        return self.disconnect(id);
                    }
                }
                Err(Malformed(why)) => {
                    self.counters.protocol_errors += 1;
                    let c = &self.conns[&id];
                    log(&format!(
                        "pid {} uid {}: malformed message ({why}): disconnected",
                        c.pid, c.uid
                    ));
                    let _ = send_error(c.sock.as_fd(), 0, libc::EPROTO, 0, why);
                    return self.disconnect(id);
                }
            }
        }
    }

    /// Answers one request; false if the connection has to go (it does not read).
    fn handle(&mut self, conn: u64, seq: u32, req: Request) -> bool {
        let reply = match req {
            Request::Alloc {
                bytes,
                page_size,
                flags,
            } => match self.alloc(conn, seq, bytes, page_size, flags) {
                Ok(()) => return true,
                Err(AllocError::Gone) => return false,
                Err(AllocError::Refused(r)) => r,
            },
            Request::Release { ids } => self.release(conn, &ids),
            Request::Stats => Reply::Stats(self.stats(self.conns[&conn].uid)),
        };
        if matches!(reply, Reply::Error { .. }) {
            self.counters.refusals += 1;
        }
        let sock = self.conns[&conn].sock.as_fd();
        protocol::send(sock, &reply.encode(seq), &[]).is_ok()
    }

    fn uid_used(&self, uid: u32) -> usize {
        self.slots
            .values()
            .filter(|s| match s.state {
                State::Leased { uid: u, .. }
                | State::Quarantined { uid: u }
                | State::Scrubbing { uid: u } => u == uid,
                State::Ready => false,
            })
            .map(|s| s.len)
            .sum()
    }

    fn alloc(
        &mut self,
        conn: u64,
        seq: u32,
        bytes: u64,
        page_size: u64,
        flags: u32,
    ) -> std::result::Result<(), AllocError> {
        let refuse = |errno, ready: usize, message: String| {
            Err(AllocError::Refused(Reply::Error {
                errno,
                ready: ready as u64,
                message,
            }))
        };
        if flags != 0 {
            return refuse(libc::EINVAL, 0, format!("unknown flags {flags:#x}"));
        }
        let Some(pool) = self
            .pools
            .iter()
            .position(|p| p.cfg.page.page_size() as u64 == page_size)
        else {
            let served: Vec<_> = self.pools.iter().map(|p| p.cfg.page.name()).collect();
            return refuse(
                libc::EINVAL,
                0,
                format!(
                    "no pool of page size {page_size} (this daemon serves {})",
                    served.join(", ")
                ),
            );
        };
        let cfg = self.pools[pool].cfg;
        let ready: Vec<u64> = self
            .slots
            .iter()
            .filter(|(_, s)| s.pool == pool && s.state == State::Ready)
            .map(|(&id, _)| id)
            .collect();
        let ready_bytes = ready.len() * cfg.segment_size;
        if bytes == 0 {
            return refuse(libc::EINVAL, ready_bytes, "zero bytes requested".into());
        }
        if bytes > cfg.cap as u64 {
            return refuse(
                libc::ENOMEM,
                ready_bytes,
                format!(
                    "{bytes} bytes is more than the {} pool's cap of {}",
                    cfg.page.name(),
                    cfg.cap
                ),
            );
        }
        let n = (bytes as usize).div_ceil(cfg.segment_size);
        let uid = self.conns[&conn].uid;
        if let Some(cap) = self.cfg.uid_cap {
            let used = self.uid_used(uid);
            if used + n * cfg.segment_size > cap {
                return refuse(
                    libc::EDQUOT,
                    ready_bytes,
                    format!(
                        "uid {uid} holds or has in quarantine {used} bytes; {} more would pass its cap of {cap}",
                        n * cfg.segment_size
                    ),
                );
            }
        }
        if ready.len() < n {
            return refuse(
                libc::ENOMEM,
                ready_bytes,
                format!(
                    "{} bytes ready in the {} pool, {} asked",
                    ready_bytes,
                    cfg.page.name(),
                    n * cfg.segment_size
                ),
            );
        }
        let chosen = &ready[..n];
        let mut files = Vec::with_capacity(n);
        for id in chosen {
            let seg = self.slots[id]
                .seg
                .as_ref()
                .expect("ready segments are home");
            match seg.open_for_client() {
                Ok(f) => files.push(f),
                Err(e) => return refuse(e.errno(), ready_bytes, e.to_string()),
            }
        }
        for id in chosen {
            self.slots.get_mut(id).expect("chosen from slots").state = State::Leased { conn, uid };
        }
        self.counters.handouts += 1;
        let sock = self.conns[&conn].sock.as_fd();
        for (k, (ids, fds)) in chosen
            .chunks(MAX_FDS)
            .zip(files.chunks(MAX_FDS))
            .enumerate()
        {
            let reply = Reply::Alloc {
                total: n as u32,
                first: (k * MAX_FDS) as u32,
                segments: ids
                    .iter()
                    .map(|&id| SegmentRecord {
                        id,
                        len: cfg.segment_size as u64,
                    })
                    .collect(),
            };
            let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            if protocol::send(sock, &reply.encode(seq), &borrowed).is_err() {
                // Leased segments go to quarantine with the connection.
                return Err(AllocError::Gone);
            }
        }
        Ok(())
    }

    fn release(&mut self, conn: u64, ids: &[u64]) -> Reply {
        let mut seen = HashSet::new();
        for id in ids {
            let held = self
                .slots
                .get(id)
                .is_some_and(|s| matches!(s.state, State::Leased { conn: c, .. } if c == conn));
            if !held || !seen.insert(*id) {
                return Reply::Error {
                    errno: libc::EINVAL,
                    ready: 0,
                    message: format!(
                        "segment {id} is not held on this connection (or named twice)"
                    ),
                };
            }
        }
        for id in ids {
            let s = self.slots.get_mut(id).expect("checked above");
            if let State::Leased { uid, .. } = s.state {
                s.state = State::Quarantined { uid };
            }
        }
        Reply::Released {
            count: ids.len() as u32,
        }
    }

    fn disconnect(&mut self, conn: u64) {
        self.conns.remove(&conn);
        for s in self.slots.values_mut() {
            if let State::Leased { conn: c, uid } = s.state {
                if c == conn {
                    s.state = State::Quarantined { uid };
                }
            }
        }
    }

    /// Sends every quarantined segment nobody else holds to the scrubber.
    fn check_quarantine(&mut self) {
        self.last_check = Instant::now();
        let mut candidates = Vec::new();
        for (&id, s) in &self.slots {
            if let (State::Quarantined { .. }, Some(seg)) = (s.state, &s.seg) {
                match seg.has_other_openers() {
                    Ok(false) => candidates.push(id),
                    Ok(true) => {}
                    Err(e) => log(&format!(
                        "segment {id}: lease check failed ({e}); kept in quarantine"
                    )),
                }
            }
        }
        if candidates.is_empty() {
            return;
        }
        let mut batch = Vec::with_capacity(candidates.len());
        for id in candidates {
            let s = self.slots.get_mut(&id).expect("candidate from slots");
            if let State::Quarantined { uid } = s.state {
                batch.push((id, s.seg.take().expect("quarantined segments are home")));
                s.state = State::Scrubbing { uid };
            }
        }
        let jobs = self
            .worker
            .jobs
            .as_ref()
            .expect("worker runs until shutdown");
        if let Err(e) = jobs.send(Job::Scrub(batch)) {
            let Job::Scrub(batch) = e.0 else {
                unreachable!("sent a scrub job")
            };
            for (id, seg) in batch {
                self.requarantine(id, seg);
            }
        }
    }

    fn requarantine(&mut self, id: u64, seg: Segment) {
        if let Some(s) = self.slots.get_mut(&id) {
            if let State::Scrubbing { uid } = s.state {
                s.seg = Some(seg);
                s.state = State::Quarantined { uid };
            }
        }
    }

    /// Frees a segment's pages in the worker, not in the event loop.
    fn destroy(&mut self, id: u64) {
        if let Some(seg) = self.slots.remove(&id).and_then(|s| s.seg) {
            if let Some(jobs) = &self.worker.jobs {
                let _ = jobs.send(Job::Destroy(seg));
            }
        }
    }

    fn collect_done(&mut self) {
        let mut buf = [0u8; 8];
        // SAFETY: an 8-byte read into a local from our nonblocking eventfd.
        unsafe { libc::read(self.wake.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
        while let Ok(done) = self.done.try_recv() {
            match done {
                Done::StillHeld { id, seg } => self.requarantine(id, seg),
                Done::Scrubbed {
                    id,
                    seg,
                    bad,
                    scrub,
                    verify,
                    verified,
                } => {
                    self.counters.scrubbed_bytes += seg.len() as u64;
                    self.counters.scrub_ns += scrub.as_nanos() as u64;
                    self.counters.verified_bytes += verified as u64;
                    self.counters.verify_ns += verify.as_nanos() as u64;
                    if let Some(off) = bad {
                        self.counters.verify_failures += 1;
                        log(&format!(
                            "segment {id}: non-zero byte at offset {off} after scrubbing; destroyed, never handed out"
                        ));
                        self.slots.remove(&id);
                        continue;
                    }
                    if let Some(s) = self.slots.get_mut(&id) {
                        s.seg = Some(seg);
                        s.state = State::Ready;
                    }
                }
                Done::Abandoned { id, .. } => {
                    self.slots.remove(&id);
                }
                Done::Created { pool, seg } => {
                    let p = &mut self.pools[pool];
                    p.creating = false;
                    match seg {
                        Ok(seg) => {
                            p.retry_at = None;
                            self.slots.insert(
                                self.next_id,
                                Slot {
                                    pool,
                                    len: seg.len(),
                                    state: State::Ready,
                                    seg: Some(seg),
                                },
                            );
                            self.next_id += 1;
                        }
                        Err(e) => {
                            if p.retry_at.is_none() {
                                log(&format!(
                                    "pool {}: cannot grow toward its target: {e}; retrying every 5 s",
                                    p.cfg.page.name()
                                ));
                            }
                            p.retry_at = Some(Instant::now() + Duration::from_secs(5));
                        }
                    }
                }
            }
        }
    }

    /// Grows each pool toward its ready target (one segment at a time, in the
    /// worker) and gives ready memory beyond the target back to the hugetlb pool.
    fn maintain(&mut self) {
        for i in 0..self.pools.len() {
            let cfg = self.pools[i].cfg;
            let (mut ready, mut total) = (0, 0);
            for s in self.slots.values().filter(|s| s.pool == i) {
                total += s.len;
                if s.state == State::Ready {
                    ready += s.len;
                }
            }
            if ready >= cfg.target + cfg.segment_size {
                let extra = self
                    .slots
                    .iter()
                    .filter(|(_, s)| s.pool == i && s.state == State::Ready)
                    .map(|(&id, _)| id)
                    .take((ready - cfg.target) / cfg.segment_size)
                    .collect::<Vec<_>>();
                for id in extra {
                    self.destroy(id);
                }
                continue;
            }
            let p = &mut self.pools[i];
            let waiting = p.retry_at.is_some_and(|t| Instant::now() < t);
            if ready < cfg.target && total + cfg.segment_size <= cfg.cap && !p.creating && !waiting
            {
                let job = Job::Create {
                    pool: i,
                    page: cfg.page,
                    len: cfg.segment_size,
                };
                if let Some(jobs) = &self.worker.jobs {
                    p.creating = jobs.send(job).is_ok();
                }
            }
        }
    }

    fn stats(&self, uid: u32) -> ServiceStats {
        let pools = self
            .pools
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut c = PoolCounters {
                    page_size: p.cfg.page.page_size() as u64,
                    segment_size: p.cfg.segment_size as u64,
                    target: p.cfg.target as u64,
                    cap: p.cfg.cap as u64,
                    ..Default::default()
                };
                for s in self.slots.values().filter(|s| s.pool == i) {
                    match s.state {
                        State::Ready => c.ready += 1,
                        State::Leased { .. } => c.leased += 1,
                        State::Quarantined { .. } => c.quarantined += 1,
                        State::Scrubbing { .. } => c.scrubbing += 1,
                    }
                }
                c
            })
            .collect();
        let k = &self.counters;
        ServiceStats {
            pools,
            clients: self.conns.len() as u64,
            handouts: k.handouts,
            refusals: k.refusals,
            protocol_errors: k.protocol_errors,
            scrubbed_bytes: k.scrubbed_bytes,
            scrub_ns: k.scrub_ns,
            verified_bytes: k.verified_bytes,
            verify_ns: k.verify_ns,
            verify_failures: k.verify_failures,
            uid,
            uid_used: self.uid_used(uid) as u64,
            uid_cap: self.cfg.uid_cap.map_or(u64::MAX, |c| c as u64),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.worker.shutdown();
    }
}

enum AllocError {
    Refused(Reply),
    /// The client stopped reading mid-answer.
    Gone,
}

fn pollfd(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

fn send_error(
    sock: BorrowedFd<'_>,
    seq: u32,
    errno: i32,
    ready: u64,
    message: &str,
) -> io::Result<()> {
    let r = Reply::Error {
        errno,
        ready,
        message: message.into(),
    };
    protocol::send(sock, &r.encode(seq), &[])
}

fn block_stop_signals() -> Result<OwnedFd> {
    // SAFETY: sigset operations on a local set; pthread_sigmask and signalfd only
    // read it. Blocking here, before any thread starts, makes every thread inherit it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(Error::os("signalfd", io::Error::last_os_error()));
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Creates the listening socket: the directory if missing, a stale socket file
/// replaced, a live one refused; mode 0666 because `SO_PEERCRED` decides who
/// may use it.
/// One descriptor per segment and two per connection: take the hard limit.
fn raise_nofile_limit() {
    // SAFETY: getrlimit/setrlimit read and write a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// A daemon already answering at `path` is an error; a stale socket file is not.
fn refuse_if_served(path: &Path) -> Result<()> {
    if path.exists() && super::client::connect_socket(path).is_ok() {
        return Err(Error::invalid(format!(
            "{} is served by a running daemon",
            path.display()
        )));
    }
    Ok(())
}

fn bind(path: &Path) -> Result<OwnedFd> {
    let (addr, addr_len) = socket_address(path)?;
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() && !dir.exists() {
            std::fs::create_dir_all(dir).map_err(|e| Error::os("create socket directory", e))?;
        }
    }
    if path.exists() {
        refuse_if_served(path)?;
        std::fs::remove_file(path).map_err(|e| Error::os("remove stale socket", e))?;
    }
    let sock = super::seqpacket_socket(libc::SOCK_NONBLOCK).map_err(|e| Error::os("socket", e))?;
    // SAFETY: addr is a valid sockaddr_un of addr_len bytes.
    if unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            addr_len,
        )
    } != 0
    {
        return Err(Error::os("bind", io::Error::last_os_error()));
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| Error::os("chmod socket", e))?;
    // SAFETY: listen on our own bound socket.
    if unsafe { libc::listen(sock.as_raw_fd(), 128) } != 0 {
        return Err(Error::os("listen", io::Error::last_os_error()));
    }
    Ok(sock)
}

fn peer_cred(sock: BorrowedFd<'_>) -> io::Result<libc::ucred> {
    // SAFETY: a zeroed ucred is valid; getsockopt writes at most `len` bytes into it.
    unsafe {
        let mut cred: libc::ucred = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        if libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(cred)
    }
}

/// The peer's supplementary groups (`SO_PEERGROUPS`), empty if unavailable.
fn peer_groups(sock: BorrowedFd<'_>) -> Vec<u32> {
    let mut groups = vec![0u32; 256];
    let mut len = (groups.len() * 4) as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `groups`.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERGROUPS,
            groups.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Vec::new();
    }
    groups.truncate(len as usize / 4);
    groups
}

/// A pidfd for the peer: `SO_PEERPIDFD` (Linux 6.5, immune to pid reuse), else
/// `pidfd_open` on the pid from `SO_PEERCRED`.
fn peer_pidfd(sock: BorrowedFd<'_>, pid: i32) -> Option<OwnedFd> {
    const SO_PEERPIDFD: libc::c_int = 77;
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `fd`.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 || fd < 0 {
        // SAFETY: pidfd_open has no memory-safety preconditions.
        fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as libc::c_int;
        if fd < 0 {
            return None;
        }
        // SAFETY: set close-on-exec on our own fresh descriptor.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}
