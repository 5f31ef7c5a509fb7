//! `prezero serve`: one event loop owns every segment and connection; a worker
//! thread scrubs and creates segments. See `docs/PROTOCOL.md` for the wire side.
//!
//! The segments' states, who is charged, which pool serves a request, and
//! every transition are in [`super::ledger`] (pure data, explored
//! exhaustively in its tests); this loop moves messages and descriptors and
//! calls those transitions. Beyond them:
//!
//! * Only the event loop changes states; the worker owns a segment's memory
//!   only while it is `Scrubbing`, and hands it back by message.
//! * A segment that fails verification, or whose pages cannot be had, is
//!   destroyed, never handed out.
//! * Every segment is in the ledger file, so that a restarted daemon finds the
//!   ones still held (start-up only: [`adopt`]), takes them over as
//!   `Quarantined`, and charges their holders' uids.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::{PoolConfig, Reuse, ServerConfig};
use super::ledger::{adopt, write_ledger, Clean, Ledger, Refused, State};
use super::listen::{bind, refuse_if_served, restrict_socket};
use super::log;
use super::metrics::MetricsFile;
use super::protocol::{
    self, Histogram, Malformed, PoolCounters, Refusal, Reply, Request, SegmentRecord, ServiceStats,
    TenantStats, MAX_FDS, MAX_MESSAGE,
};
use super::segment::{check_leases_work, Segment};
use super::tenant::{peer_pidfd, tenant_uid};
use super::worker::{Done, Job, Worker};
use crate::error::{Error, Result};
use crate::sys::{self, UnixAddr};

struct Conn {
    sock: OwnedFd,
    pidfd: Option<OwnedFd>,
    pid: i32,
    /// The tenant it counts as (see [`tenant_uid`]).
    uid: u32,
    /// Its own uid: segments leased on it are lent to this uid, whose
    /// programs open them by name.
    peer_uid: u32,
}

struct Counters {
    handouts: u64,
    refusals: u64,
    protocol_errors: u64,
    by_reason: [u64; Refusal::ALL.len()],
    latency: Histogram,
    scrubbed_bytes: u64,
    scrub_ns: u64,
    fresh_bytes: u64,
    fresh_ns: u64,
    verified_bytes: u64,
    verify_ns: u64,
    verify_failures: u64,
}

impl Counters {
    fn new() -> Counters {
        Counters {
            handouts: 0,
            refusals: 0,
            protocol_errors: 0,
            by_reason: [0; Refusal::ALL.len()],
            latency: Histogram::latency(),
            scrubbed_bytes: 0,
            scrub_ns: 0,
            fresh_bytes: 0,
            fresh_ns: 0,
            verified_bytes: 0,
            verify_ns: 0,
            verify_failures: 0,
        }
    }

    fn refused(&mut self, why: Refusal) {
        self.by_reason[why as usize] += 1;
        match why {
            Refusal::Malformed => self.protocol_errors += 1,
            _ => self.refusals += 1,
        }
    }
}

struct PoolRun {
    cfg: PoolConfig,
    creating: bool,
    /// After a failed creation (hugetlb shortage), no retry before this.
    retry_at: Option<Instant>,
    handouts: u64,
}

/// Most connections at once: each costs two descriptors.
const MAX_CONNS: usize = 4096;

/// What one uid causes (refused connections, malformed messages) is logged at
/// most this often (with the count of lines not logged), so a tenant cannot
/// flood the log.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// The daemon. [`Server::start`] creates the pools and the socket; [`Server::run`]
/// serves until SIGINT, SIGTERM or SIGHUP.
pub struct Server {
    cfg: ServerConfig,
    listener: OwnedFd,
    pools: Vec<PoolRun>,
    ledger: Ledger<Segment>,
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
    /// The daemon's effective uid (always allowed to connect).
    my_uid: u32,
    /// Per uid: when a line it caused was last logged, and lines not logged since.
    log_last: HashMap<u32, (Instant, u64)>,
    ledger_file: PathBuf,
    /// The worker could not be raised once already (logged then).
    told_no_escalation: bool,
    /// Segments could not be lent to a tenant's uid once already (logged then).
    told_no_chown: bool,
    /// The metrics file's writer, and when it is next due.
    metrics: Option<(MetricsFile, Instant)>,
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
        UnixAddr::new(&cfg.socket)?;
        refuse_if_served(&cfg.socket)?;
        let metrics = match &cfg.metrics_textfile {
            Some(path) => Some((MetricsFile::start(path)?, Instant::now())),
            None => None,
        };
        check_leases_work()?;
        // One descriptor per segment and two per connection: take the hard limit.
        let _ = sys::raise_nofile_limit();
        // Blocked here, before any thread starts, so every thread inherits it.
        let signals = sys::signals_to_fd(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP])
            .map_err(|e| Error::os("signalfd", e))?;
        // A lease break (someone opening a segment during the lease probe) would
        // send SIGIO, whose default action ends the process.
        let _ = sys::ignore_signal(libc::SIGIO);
        // Other uids cannot reach our descriptors through /proc/PID/fd.
        let _ = sys::set_dumpable(false);
        let wake = Arc::new(sys::eventfd().map_err(|e| Error::os("eventfd", e))?);
        let (tx, done) = std::sync::mpsc::channel();
        let worker = Worker::spawn(cfg.scrub_priority, cfg.verify, tx, wake.clone())
            .map_err(|e| Error::os("spawn scrubber thread", e))?;

        let ledger_file = cfg.ledger_path();
        let mut ledger = Ledger::new(cfg.shapes(), cfg.uid_cap);
        for (seg, uid) in adopt(&ledger_file, &cfg.pools) {
            let Some(pool) = ledger.pool_for(seg.page_size(), seg.len()) else {
                continue;
            };
            log(&format!(
                "segment of {} from a previous instance is still held by uid {uid}: \
                 taken over in quarantine and charged to that uid",
                mib(seg.len())
            ));
            let (len, file) = (seg.len(), (seg.dev, seg.ino));
            ledger.adopt(pool, seg, len, file, uid);
        }
        let threads = crate::sys::online_cpus();
        for (i, p) in cfg.pools.iter().enumerate() {
            let held: usize = ledger
                .entries()
                .filter(|(_, e)| e.pool == i)
                .map(|(_, e)| e.len)
                .sum();
            let want = p.target.min(p.cap.saturating_sub(held)) / p.segment_size;
            let t = Instant::now();
            let mut got = 0;
            let mut shortage = None;
            while got < want {
                let made = Segment::create(p.page, p.segment_size)
                    .and_then(|seg| seg.repopulate(0, p.segment_size, threads).map(|()| seg));
                match made {
                    Ok(seg) => {
                        let file = (seg.dev, seg.ino);
                        ledger.add_ready(i, seg, p.segment_size, file);
                        got += 1;
                    }
                    Err(e @ Error::HugetlbShortage { .. }) => {
                        shortage = Some(e);
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            let name = format!("{}/{}", p.page.name(), mib(p.segment_size));
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
                         {free} free {} pages; reserve more with: echo {} > {}",
                        mib(got * p.segment_size),
                        mib(p.target),
                        p.page.name(),
                        total + more,
                        crate::cpu::HugetlbPool::nr_path(page)
                    ));
                }
            }
        }
        write_ledger(&ledger_file, &ledger);
        let listener = bind(&cfg.socket)?;
        restrict_socket(&cfg.socket, &cfg.allow_uids, &cfg.allow_gids);
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
                    handouts: 0,
                })
                .collect(),
            cfg,
            listener,
            ledger,
            conns: HashMap::new(),
            next_conn: 1,
            counters: Counters::new(),
            worker,
            done,
            wake,
            signals,
            last_check: Instant::now(),
            accept_paused_until: None,
            my_uid: sys::geteuid(),
            log_last: HashMap::new(),
            ledger_file,
            told_no_escalation: false,
            told_no_chown: false,
            metrics,
        })
    }

    /// Serves until SIGINT, SIGTERM or SIGHUP, then shuts down: connections close, the
    /// worker stops, the socket is removed. Segments clients hold stay valid for
    /// them (their own open file and mappings keep the pages).
    pub fn run(mut self) -> Result<()> {
        loop {
            self.maintain();
            self.write_metrics_if_due();
            let paused = self.accept_paused_until.filter(|&t| Instant::now() < t);
            let mut fds = vec![
                sys::pollfd_in(self.signals.as_raw_fd()),
                // A negative fd is skipped by poll: no accepting while out of descriptors.
                sys::pollfd_in(paused.map_or(self.listener.as_raw_fd(), |_| -1)),
                sys::pollfd_in(self.wake.as_raw_fd()),
            ];
            let mut owners = Vec::with_capacity(self.conns.len() * 2);
            for (&id, c) in &self.conns {
                fds.push(sys::pollfd_in(c.sock.as_raw_fd()));
                owners.push(id);
                if let Some(p) = &c.pidfd {
                    fds.push(sys::pollfd_in(p.as_raw_fd()));
                    owners.push(id);
                }
            }
            let timeout = if self.ledger.any_quarantined() || paused.is_some() {
                self.cfg.recheck.as_millis().max(1) as libc::c_int
            } else {
                // A pool that could not grow retries when its time comes, and
                // the metrics file is rewritten when due, whether or not a
                // client asks anything meanwhile.
                self.pools
                    .iter()
                    .filter_map(|p| p.retry_at)
                    .chain(self.metrics.as_ref().map(|m| m.1))
                    .min()
                    .map_or(-1, |t| {
                        t.saturating_duration_since(Instant::now())
                            .as_millis()
                            .clamp(1, i32::MAX as u128) as libc::c_int
                    })
            };
            match sys::poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::os("poll", e)),
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
            if self.ledger.any_quarantined() && self.last_check.elapsed() >= self.cfg.recheck {
                self.check_quarantine();
            }
        }
        self.shutdown();
        Ok(())
    }

    fn shutdown(&mut self) {
        log(&format!(
            "stopping: {} connections, {} segments still with clients (they stay valid)",
            self.conns.len(),
            self.ledger.leased()
        ));
        self.conns.clear();
        self.worker.shutdown();
        self.ledger.clear();
        let _ = std::fs::remove_file(&self.cfg.socket);
        // The last counters, with nothing held by the daemon any more.
        let last = super::metrics::prometheus(&self.stats(0, true));
        if let Some((m, _)) = self.metrics.take() {
            m.write(last);
            m.stop();
        }
    }

    /// Hands the counters to the metrics file's writer when they are due.
    fn write_metrics_if_due(&mut self) {
        let Some((_, due)) = &self.metrics else {
            return;
        };
        if Instant::now() < *due {
            return;
        }
        let text = super::metrics::prometheus(&self.stats(0, true));
        if let Some((m, due)) = &mut self.metrics {
            m.write(text);
            *due = Instant::now() + self.cfg.metrics_interval;
        }
    }

    fn accept_all(&mut self) {
        loop {
            let sock = match sys::accept(self.listener.as_fd()) {
                Ok(sock) => sock,
                Err(e) => {
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    ) {
                        // The connection waits in the backlog; polling the listener
                        // now would only spin.
                        if self.accept_paused_until.is_none() {
                            log("out of descriptors: accepting paused (raise LimitNOFILE)");
                        }
                        self.accept_paused_until =
                            Some(Instant::now() + Duration::from_millis(100));
                    }
                    return;
                }
            };
            self.accept_paused_until = None;
            let Ok(cred) = sys::peer_cred(sock.as_fd()) else {
                continue;
            };
            if let Err(why) = self.authorize(sock.as_fd(), &cred) {
                self.refuse_conn(sock.as_fd(), &cred, Refusal::NotAllowed, &why);
                continue;
            }
            let pidfd = peer_pidfd(sock.as_fd(), cred.pid);
            let tenant = tenant_uid(pidfd.as_ref(), cred.pid, cred.uid);
            let of_uid = self.conns.values().filter(|c| c.uid == tenant).count();
            if of_uid >= self.cfg.max_conns_per_uid {
                let why = format!(
                    "uid {tenant} has {of_uid} connections open, its limit (max_conns_per_uid)"
                );
                self.refuse_conn(sock.as_fd(), &cred, Refusal::TooManyConnections, &why);
                continue;
            }
            if self.conns.len() >= MAX_CONNS {
                let why = format!("{MAX_CONNS} connections open, the daemon's limit");
                self.refuse_conn(sock.as_fd(), &cred, Refusal::TooManyConnections, &why);
                continue;
            }
            let id = self.next_conn;
            self.next_conn += 1;
            self.conns.insert(
                id,
                Conn {
                    sock,
                    pidfd,
                    pid: cred.pid,
                    uid: tenant,
                    peer_uid: cred.uid,
                },
            );
        }
    }

    /// Answers a refused connection and logs it.
    fn refuse_conn(
        &mut self,
        sock: BorrowedFd<'_>,
        cred: &libc::ucred,
        reason: Refusal,
        why: &str,
    ) {
        self.counters.refused(reason);
        let errno = match reason {
            Refusal::NotAllowed => libc::EACCES,
            _ => libc::EAGAIN,
        };
        let _ = send_error(sock, 0, errno, 0, why);
        self.log_for(
            cred.uid,
            &format!("refused pid {} uid {}: {why}", cred.pid, cred.uid),
        );
    }

    /// Logs what one uid caused, at most once every [`LOG_EVERY`] per
    /// uid (with the count of lines not logged), so a tenant cannot flood the log.
    fn log_for(&mut self, uid: u32, msg: &str) {
        let now = Instant::now();
        let entry = self.log_last.entry(uid).or_insert((now - LOG_EVERY, 0));
        if now.duration_since(entry.0) >= LOG_EVERY {
            let more = match entry.1 {
                0 => String::new(),
                n => format!(" ({n} more refusals of this uid not logged)"),
            };
            log(&format!("{msg}{more}"));
            *entry = (now, 0);
        } else {
            entry.1 += 1;
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
            let groups = sys::peer_groups(sock).unwrap_or_default();
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
                    self.counters.refused(Refusal::Malformed);
                    let c = &self.conns[&id];
                    let _ = send_error(c.sock.as_fd(), 0, libc::EPROTO, 0, why);
                    let (pid, uid) = (c.pid, c.uid);
                    self.log_for(
                        uid,
                        &format!("pid {pid} uid {uid}: malformed message ({why}): disconnected"),
                    );
                    return self.disconnect(id);
                }
            }
        }
    }

    /// Answers one request; false if the connection has to go (it does not read).
    fn handle(&mut self, conn: u64, seq: u32, req: Request) -> bool {
        let (reply, reason) = match req {
            Request::Alloc {
                bytes,
                page_size,
                flags,
            } => {
                let t = Instant::now();
                match self.alloc(conn, seq, bytes, page_size, flags) {
                    Ok(()) => {
                        self.counters.latency.record(t.elapsed().as_nanos() as u64);
                        return true;
                    }
                    Err(AllocError::Gone) => return false,
                    Err(AllocError::Refused(r, reason)) => (r, Some(reason)),
                }
            }
            Request::Release { ids } => match self.ledger.release(conn, &ids) {
                Ok(()) => {
                    self.take_back(&ids);
                    // Clients let go before they release: the lease is usually
                    // granted now, and the cleaning need not wait for the next round.
                    self.check_quarantine_of(&ids);
                    let count = ids.len() as u32;
                    (Reply::Released { count }, None)
                }
                Err(id) => (
                    Reply::Error {
                        errno: libc::EINVAL,
                        ready: 0,
                        message: format!(
                            "segment {id} is not held on this connection (or named twice)"
                        ),
                    },
                    Some(Refusal::BadRequest),
                ),
            },
            Request::Stats => {
                let uid = self.conns[&conn].uid;
                let everyone = uid == 0 || uid == self.my_uid;
                (Reply::Stats(Box::new(self.stats(uid, everyone))), None)
            }
        };
        if let Some(r) = reason {
            self.counters.refused(r);
        }
        let sock = self.conns[&conn].sock.as_fd();
        protocol::send(sock, &reply.encode(seq), &[]).is_ok()
    }

    fn alloc(
        &mut self,
        conn: u64,
        seq: u32,
        bytes: u64,
        page_size: u64,
        flags: u32,
    ) -> std::result::Result<(), AllocError> {
        if flags != 0 {
            return Err(AllocError::Refused(
                Reply::Error {
                    errno: libc::EINVAL,
                    ready: 0,
                    message: format!("unknown flags {flags:#x}"),
                },
                Refusal::BadRequest,
            ));
        }
        let uid = self.conns[&conn].uid;
        let grant = match self.ledger.choose(uid, bytes, page_size) {
            Ok(g) => g,
            Err(Refused {
                reason,
                errno,
                ready,
                message,
                short,
            }) => {
                if let Some((pool, missing)) = short {
                    // Clients wait on the worker now: it runs at normal priority
                    // on every core until the pools are back at their targets,
                    // and other uids' scrubbed segments get fresh pages for this one.
                    self.escalate(true);
                    let batch = self.ledger.make_fresh_for(pool, uid, missing);
                    self.send_clean(batch, Clean::Fresh);
                }
                let reply = Reply::Error {
                    errno,
                    ready: ready as u64,
                    message,
                };
                return Err(AllocError::Refused(reply, reason));
            }
        };
        let mut files = Vec::with_capacity(grant.ids.len());
        for &id in &grant.ids {
            let seg = self.ledger.home(id).expect("ready segments are home");
            match seg.open_for_client() {
                Ok(f) => files.push(f),
                Err(e) => {
                    let reply = Reply::Error {
                        errno: e.errno(),
                        ready: 0,
                        message: e.to_string(),
                    };
                    return Err(AllocError::Refused(reply, Refusal::NotReady));
                }
            }
        }
        self.ledger.lease(&grant, conn, uid);
        let peer = self.conns[&conn].peer_uid;
        for &id in &grant.ids {
            let lent = self
                .ledger
                .home(id)
                .expect("leased segments are home")
                .lend_to(peer);
            if let Err(e) = lent {
                if !std::mem::replace(&mut self.told_no_chown, true) {
                    log(&format!(
                        "cannot lend segments to their tenants' uids ({e}; needs CAP_CHOWN): \
                         only this daemon's uid can open them by /proc/self/fd path, \
                         descriptors work for everyone"
                    ));
                }
            }
        }
        self.counters.handouts += 1;
        self.pools[grant.pool].handouts += 1;
        let segment = self.pools[grant.pool].cfg.segment_size;
        let n = grant.ids.len();
        // The client now maps and populates the segments: page-table work that
        // waits on the kernel's hugetlb fault locks, which the worker's page
        // faulting would hold for a page's zeroing at a time.
        self.worker
            .stand_back(Duration::from_micros(500 + ((n * segment) >> 20) as u64));
        let sock = self.conns[&conn].sock.as_fd();
        for (k, (ids, fds)) in grant
            .ids
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
                        len: segment as u64,
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

    fn disconnect(&mut self, conn: u64) {
        self.conns.remove(&conn);
        let ids = self.ledger.disconnect(conn);
        self.take_back(&ids);
    }

    /// Newly quarantined segments go back to the daemon's uid before anything
    /// else: a tenant's `O_PATH` descriptor can then no longer be reopened
    /// (the lease check cannot see one). One that cannot be taken back is
    /// destroyed, never handed out again.
    fn take_back(&mut self, ids: &[u64]) {
        for &id in ids {
            let Some(seg) = self.ledger.home(id) else {
                continue;
            };
            if let Err(e) = seg.take_back() {
                log(&format!(
                    "segment {id}: cannot take it back from its lease ({e}); destroyed"
                ));
                self.destroy(id, None);
            }
        }
    }

    /// Sends every quarantined segment nobody else holds to the worker.
    fn check_quarantine(&mut self) {
        self.last_check = Instant::now();
        let ids = self.ledger.quarantined();
        self.check_quarantine_of(&ids);
    }

    /// Sends those of `ids` that are quarantined and held by nobody else to the
    /// worker, to be scrubbed in place for the uid that held them or given
    /// fresh pages (see [`Ledger::start_clean`]).
    fn check_quarantine_of(&mut self, ids: &[u64]) {
        let (mut in_place, mut fresh) = (Vec::new(), Vec::new());
        for &id in ids {
            let quarantined = self
                .ledger
                .get(id)
                .is_some_and(|e| matches!(e.state, State::Quarantined { .. }));
            let Some(seg) = self.ledger.home(id).filter(|_| quarantined) else {
                continue;
            };
            match seg.has_other_openers() {
                Ok(false) => {}
                Ok(true) => continue,
                Err(e) => {
                    log(&format!(
                        "segment {id}: lease check failed ({e}); kept in quarantine"
                    ));
                    continue;
                }
            }
            let always_fresh = self.cfg.reuse == Reuse::Fresh;
            match self.ledger.start_clean(id, always_fresh) {
                Some((seg, Clean::InPlace)) => in_place.push((id, seg)),
                Some((seg, Clean::Fresh)) => fresh.push((id, seg)),
                None => {}
            }
        }
        self.send_clean(in_place, Clean::InPlace);
        self.send_clean(fresh, Clean::Fresh);
    }

    /// Sends `batch` to the worker; if it is gone (shutdown), the segments go.
    fn send_clean(&mut self, batch: Vec<(u64, Segment)>, how: Clean) {
        if batch.is_empty() {
            return;
        }
        let ids: Vec<u64> = batch.iter().map(|&(id, _)| id).collect();
        let sent = match &self.worker.jobs {
            Some(jobs) => jobs.send(Job::Clean(batch, how)).is_ok(),
            None => false,
        };
        if !sent {
            for id in ids {
                self.ledger.remove(id);
            }
        }
    }

    /// Forgets segment `id` and frees its pages in the worker, not in the
    /// event loop: the ledger's segment, or `returned` by the worker.
    fn destroy(&mut self, id: u64, returned: Option<Segment>) {
        let home = self.ledger.remove(id);
        self.destroy_segment(returned.or(home));
    }

    fn destroy_segment(&mut self, seg: Option<Segment>) {
        if let (Some(seg), Some(jobs)) = (seg, &self.worker.jobs) {
            let _ = jobs.send(Job::Destroy(seg));
        }
        write_ledger(&self.ledger_file, &self.ledger);
    }

    fn collect_done(&mut self) {
        let _ = sys::eventfd_take(self.wake.as_fd());
        while let Ok(done) = self.done.try_recv() {
            match done {
                Done::Cleaned {
                    id,
                    seg,
                    how,
                    bad,
                    clean,
                    verify,
                    verified,
                } => {
                    self.counters.scrubbed_bytes += seg.len() as u64;
                    self.counters.scrub_ns += clean.as_nanos() as u64;
                    if how == Clean::Fresh {
                        self.counters.fresh_bytes += seg.len() as u64;
                        self.counters.fresh_ns += clean.as_nanos() as u64;
                    }
                    self.counters.verified_bytes += verified as u64;
                    self.counters.verify_ns += verify.as_nanos() as u64;
                    if let Some(off) = bad {
                        self.counters.verify_failures += 1;
                        log(&format!(
                            "segment {id}: non-zero byte at offset {off} after cleaning; destroyed, never handed out"
                        ));
                        self.destroy(id, Some(seg));
                        continue;
                    }
                    // Unwanted: forgotten meanwhile, or taken over from an
                    // instance configured otherwise.
                    if let Err(seg) = self.ledger.cleaned(id, seg, how) {
                        self.destroy_segment(Some(seg));
                    }
                }
                Done::Lost { id, why } => {
                    log(&format!(
                        "segment {id}: no fresh pages for it ({why}); destroyed, the pool is smaller until it grows back"
                    ));
                    self.destroy(id, None);
                }
                Done::Abandoned { id } => {
                    self.ledger.remove(id);
                }
                Done::Created { pool, seg } => {
                    let p = &mut self.pools[pool];
                    p.creating = false;
                    match seg {
                        Ok(seg) => {
                            p.retry_at = None;
                            let (len, file) = (seg.len(), (seg.dev, seg.ino));
                            self.ledger.add_ready(pool, seg, len, file);
                            write_ledger(&self.ledger_file, &self.ledger);
                        }
                        Err(e) => {
                            if p.retry_at.is_none() {
                                log(&format!(
                                    "pool {}/{}: cannot grow toward its target: {e}; retrying every 5 s",
                                    p.cfg.page.name(),
                                    mib(p.cfg.segment_size)
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
            let extra = self.ledger.surplus(i);
            if !extra.is_empty() {
                for id in extra {
                    self.destroy(id, None);
                }
                continue;
            }
            let p = &mut self.pools[i];
            let waiting = p.retry_at.is_some_and(|t| Instant::now() < t);
            if self.ledger.wants_growth(i) && !p.creating && !waiting {
                let job = Job::Create {
                    pool: i,
                    page: p.cfg.page,
                    len: p.cfg.segment_size,
                };
                if let Some(jobs) = &self.worker.jobs {
                    p.creating = jobs.send(job).is_ok();
                }
            }
        }
        if !self.ledger.any_short() {
            self.escalate(false);
        }
    }

    /// Raises the worker while clients are refused (see [`Worker::set_urgent`]);
    /// says once if it cannot.
    fn escalate(&mut self, urgent: bool) {
        if let Err(e) = self.worker.set_urgent(urgent) {
            if !self.told_no_escalation {
                self.told_no_escalation = true;
                log(&format!(
                    "cannot raise the worker's priority while clients are refused ({e}): it stays \
                     at {:?} (give the daemon CAP_SYS_NICE)",
                    self.cfg.scrub_priority
                ));
            }
        }
    }

    /// The counters as `uid` sees them. `everyone` (root, the daemon's uid, the
    /// metrics file): every tenant, refusals by reason, latency and hand-outs
    /// per pool. Others: their own tenant row and none of those, which would
    /// tell when other tenants start VMs of a shape.
    fn stats(&self, uid: u32, everyone: bool) -> ServiceStats {
        let pools = self
            .pools
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let c = self.ledger.counts(i);
                PoolCounters {
                    page_size: p.cfg.page.page_size() as u64,
                    segment_size: p.cfg.segment_size as u64,
                    target: p.cfg.target as u64,
                    cap: p.cfg.cap as u64,
                    ready: c.ready as u64,
                    leased: c.leased as u64,
                    quarantined: c.quarantined as u64,
                    scrubbing: c.scrubbing as u64,
                    handouts: if everyone { p.handouts } else { 0 },
                }
            })
            .collect();
        let mut tenants: BTreeMap<u32, TenantStats> = BTreeMap::new();
        for c in self.conns.values() {
            tenants
                .entry(c.uid)
                .or_insert(TenantStats {
                    uid: c.uid,
                    ..Default::default()
                })
                .connections += 1;
        }
        for (u, bytes) in self.ledger.charged() {
            tenants
                .entry(u)
                .or_insert(TenantStats {
                    uid: u,
                    ..Default::default()
                })
                .charged = bytes as u64;
        }
        let mut tenants: Vec<TenantStats> = tenants
            .into_values()
            .filter(|t| everyone || t.uid == uid)
            .collect();
        tenants.sort_by_key(|t| {
            (
                std::cmp::Reverse(t.charged),
                std::cmp::Reverse(t.connections),
            )
        });
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
            uid_used: self.ledger.uid_used(uid) as u64,
            uid_cap: self.cfg.uid_cap.map_or(u64::MAX, |c| c as u64),
            refusals_by_reason: if everyone {
                k.by_reason.to_vec()
            } else {
                Vec::new()
            },
            latency: if everyone {
                k.latency.clone()
            } else {
                Histogram::default()
            },
            fresh_bytes: k.fresh_bytes,
            fresh_ns: k.fresh_ns,
            tenants,
            tenants_omitted: 0,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.worker.shutdown();
    }
}

enum AllocError {
    Refused(Reply, Refusal),
    /// The client stopped reading mid-answer.
    Gone,
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
