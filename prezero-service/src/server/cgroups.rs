//! The tenant cgroups the daemon knows: each peer's (read when it connects),
//! and each one memory is prepared for (announced with `PREPARE`, or named
//! in the configuration). A cgroup is kept open under a key the ledger
//! places segments by; what was done for it is counted here.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Instant;

use crate::cgroup::parse::display;
use crate::cgroup::{Hierarchies, Limit, Opened};
use crate::worker::Placed;

/// Most cgroups known at once: one with nothing placed, lent or prepared,
/// and no connection, is forgotten first (its counters with it).
const MOST: usize = 4096;

/// What the daemon did for one cgroup.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Done {
    pub(super) cleaned_bytes: u64,
    /// CPU of the work that ran inside the cgroup.
    pub(super) cpu_in_ns: u64,
    /// CPU the daemon spent for it in its own cgroup.
    pub(super) cpu_daemon_ns: u64,
    pub(super) refusals: u64,
}

pub(super) struct TenantCgroup {
    pub(super) opened: Arc<Opened>,
    /// `(pool, bytes)` prepared for it.
    pub(super) prepared: Option<(usize, usize)>,
    /// A segment of it is being made.
    pub(super) creating: bool,
    /// After a failed fill (its limit, a shortage), no retry before this.
    pub(super) retry_at: Option<Instant>,
    pub(super) done: Done,
}

pub(super) struct Cgroups {
    pub(super) hierarchies: Hierarchies,
    by_name: HashMap<Vec<u8>, u64>,
    pub(super) all: BTreeMap<u64, TenantCgroup>,
    next: u64,
}

impl Cgroups {
    /// The hierarchies of this machine, said in one line of the log.
    pub(super) fn new() -> Cgroups {
        let hierarchies = Hierarchies::read();
        crate::log(&if hierarchies.in_use() {
            format!(
                "tenants are charged by cgroup: pages and CPU spent for each in its own \
                 (hugetlb pages {} against memory.max)",
                if hierarchies.hugetlb_in_memory() {
                    "count"
                } else {
                    "do not count"
                }
            )
        } else {
            "no cgroup hierarchy charges here: tenants are uids only".into()
        });
        Cgroups {
            hierarchies,
            by_name: HashMap::new(),
            all: BTreeMap::new(),
            next: 1,
        }
    }

    /// The key of the cgroup a peer is in; `Ok(None)` on a machine whose
    /// hierarchies charge nothing (no cgroup to charge to).
    pub(super) fn of_peer(
        &mut self,
        pidfd: Option<BorrowedFd<'_>>,
        pid: i32,
    ) -> Result<Option<u64>, String> {
        if !self.hierarchies.in_use() {
            return Ok(None);
        }
        let opened = self.hierarchies.of_peer(pidfd, pid)?;
        Ok(Some(self.register(opened)))
    }

    /// The key of the cgroup at `path`, and who owns its directory.
    pub(super) fn named(&mut self, path: &[u8]) -> Result<(u64, u32), String> {
        let opened = self.hierarchies.named(path)?;
        let owner = opened.owner;
        Ok((self.register(opened), owner))
    }

    /// The key of `opened`: the one its name has, unless that cgroup was
    /// removed since (a new one of the same name is another cgroup).
    fn register(&mut self, opened: Opened) -> u64 {
        if let Some(&key) = self.by_name.get(&opened.id) {
            if self.all.get(&key).is_some_and(|c| c.opened.exists()) {
                return key;
            }
        }
        let key = self.next;
        self.next += 1;
        self.by_name.insert(opened.id.clone(), key);
        self.all.insert(
            key,
            TenantCgroup {
                opened: Arc::new(opened),
                prepared: None,
                creating: false,
                retry_at: None,
                done: Done::default(),
            },
        );
        key
    }

    /// Forgets cgroups beyond [`MOST`] that `busy` does not name (those with
    /// connections, segments, or something prepared), oldest first.
    pub(super) fn forget_idle(&mut self, busy: impl Fn(u64) -> bool) {
        if self.all.len() <= MOST {
            return;
        }
        let idle: Vec<u64> = self
            .all
            .iter()
            .filter(|(&k, c)| c.prepared.is_none() && !busy(k))
            .map(|(&k, _)| k)
            .take(self.all.len() - MOST)
            .collect();
        for k in idle {
            if let Some(c) = self.all.remove(&k) {
                self.by_name.remove(&c.opened.id);
            }
        }
    }

    /// Where a job for cgroup `key` runs.
    pub(super) fn placed(&self, key: Option<u64>) -> Option<Placed> {
        let key = key?;
        self.all.get(&key).map(|c| Placed {
            key,
            cg: c.opened.clone(),
        })
    }

    /// The cgroup's name for people (escaped).
    pub(super) fn name(&self, key: u64) -> String {
        self.all
            .get(&key)
            .map_or_else(|| format!("#{key}"), |c| display(&c.opened.name))
    }

    /// The tightest limit on `page`-byte hugetlb pages for cgroup `key`,
    /// counting `lent(k)` bytes the daemon lends each cgroup `k`.
    pub(super) fn limit(&self, key: u64, page: usize, lent: impl Fn(u64) -> u64) -> Option<Limit> {
        let c = self.all.get(&key)?;
        // A level's tenants are the cgroups at or below it in its hierarchy.
        let under = |hier: Option<&str>, level: &[u8]| -> u64 {
            self.all
                .iter()
                .filter(|(_, c)| {
                    c.opened.path_in(hier).is_some_and(|n| {
                        n.starts_with(level) && (n.len() == level.len() || n[level.len()] == b'/')
                    })
                })
                .map(|(&k, _)| lent(k))
                .sum()
        };
        self.hierarchies.limit(&c.opened, page, under)
    }

    pub(super) fn done_mut(&mut self, key: u64) -> Option<&mut Done> {
        self.all.get_mut(&key).map(|c| &mut c.done)
    }
}
