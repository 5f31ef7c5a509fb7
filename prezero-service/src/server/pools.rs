//! The pools' upkeep: segments taken back from their tenants and checked in
//! quarantine, sent to the worker to be made zero, its results taken in,
//! segments destroyed, and each pool grown toward its target or trimmed to it.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use super::{pool_name, Server};
use crate::config::Reuse;
use crate::ledger::{write_ledger, Clean, State};
use crate::log;
use crate::segment::Segment;
use crate::worker::{Done, Job};
use crate::{Error, Result};
use prezero_sys as sys;

impl Server {
    /// Newly quarantined segments go back to the daemon's uid before anything
    /// else: a tenant's `O_PATH` descriptor can then no longer be reopened
    /// (the lease check cannot see one). One that cannot be taken back is
    /// destroyed, never handed out again.
    pub(super) fn take_back(&mut self, ids: &[u64]) {
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
    pub(super) fn check_quarantine(&mut self) {
        self.last_check = Instant::now();
        let ids = self.ledger.quarantined();
        self.check_quarantine_of(&ids);
    }

    /// Sends those of `ids` that are quarantined and held by nobody else to the
    /// worker, to be scrubbed in place for the uid that held them or given
    /// fresh pages (see [`Ledger::start_clean`]).
    ///
    /// [`Ledger::start_clean`]: crate::ledger::Ledger::start_clean
    pub(super) fn check_quarantine_of(&mut self, ids: &[u64]) {
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

    /// Sends `batch` to the worker, each segment to be cleaned in the cgroup
    /// the ledger says (see `Ledger::clean_work`); if the worker is gone
    /// (shutdown), the segments go.
    pub(super) fn send_clean(&mut self, batch: Vec<(u64, Segment)>, how: Clean) {
        if batch.is_empty() {
            return;
        }
        let ids: Vec<u64> = batch.iter().map(|&(id, _)| id).collect();
        let batch: Vec<_> = batch
            .into_iter()
            .map(|(id, seg)| {
                let run_in = self.ledger.clean_work(id, how).run_in;
                (id, seg, self.cgroups.placed(run_in))
            })
            .collect();
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
    pub(super) fn destroy(&mut self, id: u64, returned: Option<Segment>) {
        let home = self.ledger.remove(id);
        self.destroy_segment(returned.or(home));
    }

    fn destroy_segment(&mut self, seg: Option<Segment>) {
        self.discard(seg);
        // Unwritten, the file lists a segment that is gone: a restart finds
        // nobody holding it.
        self.record();
    }

    /// Frees a segment's pages in the worker.
    fn discard(&self, seg: Option<Segment>) {
        if let (Some(seg), Some(jobs)) = (seg, &self.worker.jobs) {
            let _ = jobs.send(Job::Destroy(seg));
        }
    }

    /// Writes the ledger file; false if it cannot be written (said once, and
    /// again once it can be).
    fn record(&mut self) -> bool {
        let path = self.ledger_file.display();
        match write_ledger(&self.ledger_file, &self.ledger) {
            Ok(()) => {
                if std::mem::replace(&mut self.ledger_unwritten, false) {
                    log(&format!("the ledger {path} is written again"));
                }
                true
            }
            Err(e) => {
                if !std::mem::replace(&mut self.ledger_unwritten, true) {
                    log(&format!(
                        "cannot write the ledger {path} ({e}): new segments are destroyed, \
                         never handed out, until it can be (a restart finds only what it lists)"
                    ));
                }
                false
            }
        }
    }

    /// A new segment joins `pool`'s ready ones once the ledger file lists
    /// it: one it does not list, handed out, would not be found by a restart
    /// (its holder uncharged), so it is destroyed instead.
    fn add_recorded(
        &mut self,
        pool: usize,
        seg: Segment,
        place: Option<u64>,
    ) -> Result<(), String> {
        let (len, file) = (seg.len(), (seg.dev, seg.ino));
        let id = self.ledger.add_ready(pool, seg, len, file, place);
        if self.record() {
            return Ok(());
        }
        let seg = self.ledger.remove(id);
        self.discard(seg);
        Err("a new segment would not be in the ledger file, which cannot be written".into())
    }

    pub(super) fn collect_done(&mut self) {
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
                    cpu,
                    ran_in,
                } => {
                    self.count_for_cgroup(id, how, seg.len(), cpu, ran_in);
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
                Done::Misplaced { id, why } => {
                    log(&format!(
                        "segment {id}: {why}; destroyed, never handed out as its node's"
                    ));
                    self.destroy(id, None);
                }
                Done::Abandoned { id } => {
                    self.ledger.remove(id);
                }
                Done::Created {
                    pool,
                    seg,
                    place: Some(key),
                    cpu,
                } => self.created_in(key, pool, seg, cpu),
                Done::Created {
                    pool,
                    seg,
                    place: None,
                    ..
                } => {
                    self.pools[pool].creating = false;
                    // Short of hugetlb pages: said once for all pools, then
                    // shown in STATS and the metrics, not every retry.
                    let short = matches!(
                        seg,
                        Err(Error::Local(prezero::Error::HugetlbShortage { .. }))
                    );
                    let added = match seg {
                        Ok(seg) => self.add_recorded(pool, seg, None),
                        Err(e) => Err(e.to_string()),
                    };
                    let p = &mut self.pools[pool];
                    p.hugetlb_short = short;
                    match added {
                        Ok(()) => p.retry_at = None,
                        Err(e) => {
                            if p.retry_at.is_none() && !short {
                                log(&format!(
                                    "pool {}: cannot grow toward its target: {e}; retrying every 5 s",
                                    pool_name(&p.cfg)
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
    pub(super) fn maintain(&mut self) {
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
            let wants = self.ledger.wants_growth(i);
            // At its target or cap, a pool lacks nothing.
            p.hugetlb_short &= wants;
            if wants && !p.creating && !waiting {
                let job = Job::Create {
                    pool: i,
                    page: p.cfg.page,
                    len: p.cfg.segment_size,
                    home: p.home.clone(),
                    place: None,
                };
                if let Some(jobs) = &self.worker.jobs {
                    p.creating = jobs.send(job).is_ok();
                }
            }
        }
        self.maintain_prepared();
        if !self.ledger.any_short() {
            self.escalate(false);
        }
        self.say_shortage();
    }

    /// A segment of `pool` made inside cgroup `key` (its pages charged
    /// there) with `cpu`, or why not.
    fn created_in(&mut self, key: u64, pool: usize, seg: Result<Segment>, cpu: Duration) {
        let len = self.pools[pool].cfg.segment_size;
        let added = match seg {
            Ok(seg) => self.add_recorded(pool, seg, Some(key)),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = &added {
            let name = self.cgroups.name(key);
            log(&format!(
                "cgroup {name}: cannot prepare a segment ({e}); retrying in 5 s"
            ));
        }
        if let (Ok(()), Some(d)) = (&added, self.cgroups.done_mut(key)) {
            d.cleaned_bytes += len as u64;
            d.cpu_in_ns += cpu.as_nanos() as u64;
        }
        self.made_in(key, added.is_ok());
    }

    /// Counts a cleaning of `len` bytes that took `cpu` to the cgroup it was
    /// for: its own if it ran there (`ran_in`), the daemon's spent for it if
    /// it ran here.
    fn count_for_cgroup(
        &mut self,
        id: u64,
        how: Clean,
        len: usize,
        cpu: Duration,
        ran_in: Option<u64>,
    ) {
        let w = self.ledger.clean_work(id, how);
        let Some(key) = ran_in.or(w.run_in).or(w.for_cg) else {
            return;
        };
        if let Some(d) = self.cgroups.done_mut(key) {
            d.cleaned_bytes += len as u64;
            match ran_in {
                Some(_) => d.cpu_in_ns += cpu.as_nanos() as u64,
                None => d.cpu_daemon_ns += cpu.as_nanos() as u64,
            }
        }
    }

    /// Raises the worker while clients are refused (see [`Worker::set_urgent`]);
    /// says once if it cannot.
    ///
    /// [`Worker::set_urgent`]: crate::worker::Worker::set_urgent
    pub(super) fn escalate(&mut self, urgent: bool) {
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
}
