//! Memory prepared for a tenant cgroup before its tenant starts: announced
//! by a launcher (`PREPARE`) or named in the configuration, made by a child
//! inside the cgroup (so its pages are charged there), kept at its target,
//! and given back when withdrawn or when the cgroup is removed.

use std::time::{Duration, Instant};

use super::Server;
use crate::cgroup::parse::display;
use crate::log;
use crate::protocol::{Refusal, Reply};
use crate::worker::Job;
use prezero::fmt_size;

/// How often the daemon looks whether prepared-for cgroups still exist, and
/// tries the configured ones it could not open yet.
pub(super) const LOOK_EVERY: Duration = Duration::from_secs(1);

/// A refused `PREPARE`.
type Refused = (Reply, Refusal);

fn refused(errno: i32, message: String, reason: Refusal) -> Refused {
    let reply = Reply::Error {
        errno,
        ready: 0,
        message,
        limit: false,
    };
    (reply, reason)
}

impl Server {
    /// Answers `PREPARE`: `bytes` on `page_size` pages for the cgroup at
    /// `path`, from root, the daemon's uid or the owner of the cgroup's
    /// directory only.
    pub(super) fn prepare(
        &mut self,
        conn: u64,
        path: &[u8],
        bytes: u64,
        page_size: u64,
    ) -> Result<Reply, Refused> {
        let peer = self.conns[&conn].peer_uid;
        let (key, owner) = self
            .cgroups
            .named(path)
            .map_err(|e| refused(libc::ENOENT, e, Refusal::BadRequest))?;
        if peer != 0 && peer != self.my_uid && peer != owner {
            let why = format!(
                "uid {peer} may not prepare memory for cgroup {}: only root or its owner \
                 (uid {owner}) may",
                display(path)
            );
            self.log_for(peer, &why);
            return Err(refused(libc::EACCES, why, Refusal::NotAllowed));
        }
        let (pool, target) = if bytes == 0 {
            (None, 0)
        } else {
            let Some((pool, target)) = self.ledger.pool_for_request(bytes, page_size) else {
                let why = format!("no pool of page size {page_size} can hold {bytes} bytes");
                return Err(refused(libc::EINVAL, why, Refusal::BadRequest));
            };
            (Some(pool), target)
        };
        // Memory prepared is nobody's to hold yet, but a tenant could keep
        // the pool's cap from everyone else with it: its uid's cap bounds it.
        if let Some(cap) = self.cfg.uid_cap.filter(|&c| target > c && peer != 0) {
            let why = format!("{target} bytes is more than a uid's cap of {cap} (uid_cap)");
            return Err(refused(libc::EDQUOT, why, Refusal::UidCap));
        }
        if let Some(pool) = pool {
            // Its own limit first: a preparation it cannot hold is refused
            // now, not found out a segment at a time.
            let more = target.saturating_sub(self.ledger.placed(key, Some(pool)));
            self.check_cgroup_limit(key, page_size as usize, more as u64)
                .map_err(|e| match e {
                    super::handle::AllocError::Refused(r, why) => (r, why),
                    super::handle::AllocError::Gone => {
                        refused(libc::EIO, String::new(), Refusal::BadRequest)
                    }
                })?;
        }
        self.set_prepared(key, pool.map(|p| (p, target)));
        log(&format!(
            "uid {peer} prepares {} for cgroup {}",
            fmt_size(target),
            self.cgroups.name(key)
        ));
        Ok(Reply::Prepared {
            target: target as u64,
            placed: pool.map_or(0, |p| self.ledger.placed(key, Some(p))) as u64,
        })
    }

    fn set_prepared(&mut self, key: u64, prepared: Option<(usize, usize)>) {
        if let Some(c) = self.cgroups.all.get_mut(&key) {
            c.prepared = prepared;
            c.retry_at = None;
        }
    }

    /// The configured preparations whose cgroups can be opened now; the
    /// others are tried again at the next look (a VM's cgroup may come later).
    pub(super) fn resolve_configured(&mut self) {
        let pending = std::mem::take(&mut self.pending_prepare);
        for p in pending {
            let path = p.cgroup.as_os_str().as_encoded_bytes().to_vec();
            let page = p.page.page_size() as u64;
            match self.cgroups.named(&path) {
                Ok((key, _)) => match self.ledger.pool_for_request(p.bytes as u64, page) {
                    Some(prepared) => self.set_prepared(key, Some(prepared)),
                    None => log(&format!(
                        "--prepare {}: no pool of {} pages holds {}",
                        display(&path),
                        p.page.name(),
                        fmt_size(p.bytes)
                    )),
                },
                Err(_) => self.pending_prepare.push(p),
            }
        }
    }

    /// Keeps each cgroup's prepared part at its target: ready segments beyond
    /// it go, and missing ones are made inside the cgroup, one at a time,
    /// while its limits leave room. A removed cgroup's part goes whole.
    pub(super) fn maintain_prepared(&mut self) {
        if self.last_cgroup_look.elapsed() >= LOOK_EVERY {
            self.last_cgroup_look = Instant::now();
            self.resolve_configured();
            for c in self.cgroups.all.values_mut() {
                if c.prepared.is_some() && !c.opened.exists() {
                    c.prepared = None;
                }
            }
            let ledger = &self.ledger;
            let conns = &self.conns;
            let in_use = |k| ledger.placed(k, None) > 0 || ledger.lent(k) > 0;
            let connected = |k| {
                conns
                    .values()
                    .any(|c| c.cg.as_ref().is_ok_and(|&g| g == Some(k)))
            };
            self.cgroups.forget_idle(|k| in_use(k) || connected(k));
        }
        for key in self.ledger.cgroups() {
            let target = self.cgroups.all.get(&key).and_then(|c| c.prepared);
            for pool in 0..self.pools.len() {
                let keep = target.filter(|t| t.0 == pool).map_or(0, |t| t.1);
                for id in self.ledger.surplus_in(pool, key, keep) {
                    self.destroy(id, None);
                }
            }
        }
        let wanted: Vec<(u64, usize, usize)> = self
            .cgroups
            .all
            .iter()
            .filter(|(_, c)| !c.creating && c.retry_at.is_none_or(|t| Instant::now() >= t))
            .filter_map(|(&k, c)| c.prepared.map(|(pool, bytes)| (k, pool, bytes)))
            .filter(|&(k, pool, bytes)| self.ledger.wants_growth_in(pool, k, bytes))
            .collect();
        for (key, pool, _) in wanted {
            self.grow_in(key, pool);
        }
    }

    /// Sends the worker to make one segment of `pool` inside cgroup `key`,
    /// if its limits leave room for it.
    fn grow_in(&mut self, key: u64, pool: usize) {
        let p = &self.pools[pool];
        let (page, len) = (p.cfg.page, p.cfg.segment_size);
        let ledger = &self.ledger;
        let room = self
            .cgroups
            .limit(key, page.page_size(), |k| ledger.lent(k) as u64)
            .map_or(u64::MAX, |l| l.room);
        let Some(place) = self.cgroups.placed(Some(key)) else {
            return;
        };
        let c = self.cgroups.all.get_mut(&key).expect("placed: known");
        if room < len as u64 {
            // The kernel would refuse the pages (or its OOM killer would
            // choose among the tenant's processes): wait for room.
            c.retry_at = Some(Instant::now() + Duration::from_secs(5));
            return;
        }
        let job = Job::Create {
            pool,
            page,
            len,
            home: self.pools[pool].home.clone(),
            place: Some(place),
        };
        if let Some(jobs) = &self.worker.jobs {
            c.creating = jobs.send(job).is_ok();
        }
    }

    /// A segment for cgroup `key` was made (`ok`) or not.
    pub(super) fn made_in(&mut self, key: u64, ok: bool) {
        if let Some(c) = self.cgroups.all.get_mut(&key) {
            c.creating = false;
            if !ok {
                c.retry_at = Some(Instant::now() + Duration::from_secs(5));
            }
        }
    }
}
