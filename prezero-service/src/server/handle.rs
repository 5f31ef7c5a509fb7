//! Answering what a connection sends: its messages read and decoded, each
//! request answered (`ALLOC` from the ledger's choice, its descriptors sent
//! in as many messages as they need; `RELEASE`; `STATS`), and the connection
//! dropped when its client goes.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use super::Server;
use crate::ledger::{Clean, Grant, Refused};
use crate::log;
use crate::protocol::{
    self, Malformed, Refusal, Reply, Request, SegmentRecord, ALLOC_NODE, ALLOC_OTHER_NODES,
    MAX_FDS, MAX_MESSAGE,
};

impl Server {
    /// Answers what one connection has sent, at most `MAX_BATCH` messages per
    /// turn so a client that floods cannot starve the others.
    pub(super) fn serve_conn(&mut self, id: u64) {
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
                node,
            } => {
                let t = Instant::now();
                match self.alloc(conn, seq, bytes, page_size, flags, node) {
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
                        limit: false,
                    },
                    Some(Refusal::BadRequest),
                ),
            },
            Request::Stats => {
                let c = &self.conns[&conn];
                let (uid, cg) = (c.uid, c.cg.clone().ok().flatten());
                let everyone = uid == 0 || uid == self.my_uid;
                (Reply::Stats(Box::new(self.stats(uid, cg, everyone))), None)
            }
            Request::Prepare {
                cgroup,
                bytes,
                page_size,
            } => match self.prepare(conn, &cgroup, bytes, page_size) {
                Ok(reply) => (reply, None),
                Err((reply, reason)) => (reply, Some(reason)),
            },
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
        node: u32,
    ) -> std::result::Result<(), AllocError> {
        let order = self.node_order(flags, node)?;
        let (uid, cg) = self.tenant_of(conn)?;
        let chosen = self
            .ledger
            .choose_on(uid, cg, bytes, page_size, order.as_deref());
        // What the kernel would refuse is refused here too, before any
        // hand-out or fallback: the shared pages lent (Ok), or the whole
        // request, which the client would otherwise make locally (Err).
        if let Some(c) = cg {
            let want = match &chosen {
                Ok(g) => g.lent as u64,
                Err(r) if r.reason == Refusal::NotReady => bytes.next_multiple_of(page_size.max(1)),
                Err(_) => 0,
            };
            if want > 0 {
                self.check_cgroup_limit(c, page_size as usize, want)?;
            }
        }
        let grant = match chosen {
            Ok(g) => g,
            Err(refused) => return Err(self.refuse_alloc(refused, uid, cg)),
        };
        let files = self.open_segments(&grant)?;
        self.ledger.lease(&grant, conn, uid, cg);
        self.lend_to_peer(conn, &grant);
        self.send_grant(conn, seq, &grant, &files, order.is_some())
    }

    /// The nodes an `ALLOC` with `flags` looks on, in order: the node asked
    /// for, then (if allowed) the others nearest first; `None`, any node.
    /// Unknown flags are refused.
    fn node_order(
        &self,
        flags: u32,
        node: u32,
    ) -> std::result::Result<Option<Vec<u32>>, AllocError> {
        let unknown = flags & !(ALLOC_NODE | ALLOC_OTHER_NODES);
        if unknown != 0 {
            return Err(AllocError::Refused(
                Reply::Error {
                    errno: libc::EINVAL,
                    ready: 0,
                    message: format!("unknown flags {unknown:#x}"),
                    limit: false,
                },
                Refusal::BadRequest,
            ));
        }
        let named = flags & ALLOC_NODE != 0;
        Ok(named.then(|| {
            let mut order = vec![node];
            if flags & ALLOC_OTHER_NODES != 0 {
                order.extend(self.nearest.get(&node).into_iter().flatten());
            }
            order
        }))
    }

    /// The answer to an `ALLOC` the ledger refused for `uid` of cgroup `cg`.
    fn refuse_alloc(&mut self, refused: Refused, uid: u32, cg: Option<u64>) -> AllocError {
        let Refused {
            reason,
            errno,
            ready,
            message,
            short,
        } = refused;
        if let Some((pool, missing)) = short {
            // Clients wait on the worker now: it runs at normal priority
            // on every core until the pools are back at their targets,
            // and other uids' scrubbed segments get fresh pages for this one.
            self.escalate(true);
            let batch = self.ledger.make_fresh_for(pool, uid, cg, missing);
            self.send_clean(batch, Clean::Fresh);
        }
        let reply = Reply::Error {
            errno,
            ready: ready as u64,
            message,
            limit: false,
        };
        AllocError::Refused(reply, reason)
    }

    /// A descriptor of each granted segment for the client, opened anew.
    fn open_segments(&self, grant: &Grant) -> std::result::Result<Vec<OwnedFd>, AllocError> {
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
                        limit: false,
                    };
                    return Err(AllocError::Refused(reply, Refusal::NotReady));
                }
            }
        }
        Ok(files)
    }

    /// The granted segments' files given to the client's uid, so it can open
    /// them by path too; where that cannot be, said once.
    fn lend_to_peer(&mut self, conn: u64, grant: &Grant) {
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
    }

    /// The leased segments sent to `conn` (its `files`, as many messages as
    /// they need) and counted; `named`: the client named a node.
    fn send_grant(
        &mut self,
        conn: u64,
        seq: u32,
        grant: &Grant,
        files: &[OwnedFd],
        named: bool,
    ) -> std::result::Result<(), AllocError> {
        self.counters.handouts += 1;
        self.pools[grant.pool].handouts += 1;
        let segment = self.pools[grant.pool].cfg.segment_size;
        let served_on = self.pools[grant.pool].home.node;
        let n = grant.ids.len();
        // The client now maps and populates the segments: page-table work that
        // waits on the kernel's hugetlb fault locks, which the worker's page
        // faulting would hold for a page's zeroing at a time.
        self.worker
            .stand_back(Duration::from_micros(500 + ((n * segment) >> 20) as u64));
        let sock = self.conns[&conn].sock.as_fd();
        let records: Vec<SegmentRecord> = grant
            .ids
            .iter()
            .map(|&id| SegmentRecord {
                id,
                len: segment as u64,
            })
            .collect();
        // Said to a client that named a node (in version 2): the one it got,
        // which differs only where it allowed that.
        let node = named.then_some(served_on);
        for (reply, fds) in protocol::alloc_messages(&records, node).zip(files.chunks(MAX_FDS)) {
            let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            if protocol::send(sock, &reply.encode(seq), &borrowed).is_err() {
                // Leased segments go to quarantine with the connection.
                return Err(AllocError::Gone);
            }
        }
        Ok(())
    }

    pub(super) fn disconnect(&mut self, conn: u64) {
        self.conns.remove(&conn);
        let ids = self.ledger.disconnect(conn);
        self.take_back(&ids);
    }
}

pub(super) enum AllocError {
    Refused(Reply, Refusal),
    /// The client stopped reading mid-answer.
    Gone,
}

pub(super) fn send_error(
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
        limit: false,
    };
    protocol::send(sock, &r.encode(seq), &[])
}
