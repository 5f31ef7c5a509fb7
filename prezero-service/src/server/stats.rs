//! The daemon's counters, and what `STATS` and the metrics file show of them.

use std::collections::BTreeMap;
use std::time::Instant;

use super::Server;
use crate::protocol::{CgroupStats, Histogram, PoolCounters, Refusal, ServiceStats, TenantStats};

pub(super) struct Counters {
    pub(super) handouts: u64,
    pub(super) refusals: u64,
    pub(super) protocol_errors: u64,
    pub(super) by_reason: [u64; Refusal::ALL.len()],
    pub(super) latency: Histogram,
    pub(super) scrubbed_bytes: u64,
    pub(super) scrub_ns: u64,
    pub(super) fresh_bytes: u64,
    pub(super) fresh_ns: u64,
    pub(super) verified_bytes: u64,
    pub(super) verify_ns: u64,
    pub(super) verify_failures: u64,
}

impl Counters {
    pub(super) fn new() -> Counters {
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

    pub(super) fn refused(&mut self, why: Refusal) {
        self.by_reason[why as usize] += 1;
        match why {
            Refusal::Malformed => self.protocol_errors += 1,
            _ => self.refusals += 1,
        }
    }
}

impl Server {
    /// Hands the counters to the metrics file's writer when they are due.
    pub(super) fn write_metrics_if_due(&mut self) {
        let Some((_, due)) = &self.metrics else {
            return;
        };
        if Instant::now() < *due {
            return;
        }
        let text = crate::metrics::prometheus(&self.stats(0, None, true));
        if let Some((m, due)) = &mut self.metrics {
            m.write(text);
            *due = Instant::now() + self.cfg.metrics_interval;
        }
    }

    /// The counters as `uid` of cgroup `cg` sees them. `everyone` (root, the
    /// daemon's uid, the metrics file): every tenant and tenant cgroup,
    /// refusals by reason, latency and hand-outs per pool. Others: their own
    /// tenant row and cgroup row and none of those, which would tell when
    /// other tenants start VMs of a shape.
    pub(super) fn stats(&self, uid: u32, cg: Option<u64>, everyone: bool) -> ServiceStats {
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
                    node: Some(p.home.node),
                    short: self.short_bytes(i) as u64,
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
            cgroups: self.cgroup_rows(|k| everyone || Some(k) == cg),
            cgroups_omitted: 0,
        }
    }

    /// A row per tenant cgroup `shown` lets through that has anything to
    /// show, most charged (placed and lent) first.
    fn cgroup_rows(&self, shown: impl Fn(u64) -> bool) -> Vec<CgroupStats> {
        let mut rows: Vec<CgroupStats> = self
            .cgroups
            .all
            .iter()
            .filter(|(&k, _)| shown(k))
            .map(|(&k, c)| CgroupStats {
                name: c.opened.name.clone(),
                connections: self
                    .conns
                    .values()
                    .filter(|x| x.cg.as_ref().is_ok_and(|&g| g == Some(k)))
                    .count() as u32,
                placed: self.ledger.placed(k, None) as u64,
                lent: self.ledger.lent(k) as u64,
                prepared: c.prepared.map_or(0, |p| p.1) as u64,
                cleaned_bytes: c.done.cleaned_bytes,
                cpu_in_ns: c.done.cpu_in_ns,
                cpu_daemon_ns: c.done.cpu_daemon_ns,
                refusals: c.done.refusals,
            })
            .filter(|r| {
                r != &CgroupStats {
                    name: r.name.clone(),
                    ..Default::default()
                }
            })
            .collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.placed + r.lent));
        rows
    }
}
