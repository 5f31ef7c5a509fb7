//! Accepting connections: who may connect (root, the daemon's uid, the
//! allowed uids and groups), the per-uid and overall connection limits, and
//! the refusals' log, which no tenant can flood.

use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use super::handle::send_error;
use super::{Conn, Server};
use crate::log;
use crate::protocol::Refusal;
use crate::tenant::{peer_pidfd, tenant_uid};
use prezero_sys as sys;

/// Most connections at once: each costs two descriptors.
const MAX_CONNS: usize = 4096;

/// What one uid causes (refused connections, malformed messages) is logged at
/// most this often (with the count of lines not logged), so a tenant cannot
/// flood the log.
const LOG_EVERY: Duration = Duration::from_secs(1);

impl Server {
    pub(super) fn accept_all(&mut self) {
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
            let cg = self
                .cgroups
                .of_peer(pidfd.as_ref().map(|p| p.as_fd()), cred.pid);
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
                    cg,
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
    pub(super) fn log_for(&mut self, uid: u32, msg: &str) {
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
}
