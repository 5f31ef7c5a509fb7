//! What each tenant cgroup has in the ledger: the segments placed in it
//! (their pages charged to it by the kernel, a part prepared for it), what
//! the daemon lends its tenants of the shared pool, and where the work on a
//! segment runs so that the kernel charges its CPU to the right cgroup.

use super::{Clean, Entry, Ledger, State};

/// Where the work on a segment runs, and for whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Work {
    /// The cgroup its child process runs in (`None`: the daemon's own).
    pub(crate) run_in: Option<u64>,
    /// The cgroup the work is done for, when that is not where it runs: the
    /// daemon counts its CPU to it, which the kernel could not.
    pub(crate) for_cg: Option<u64>,
}

impl<S> Ledger<S> {
    /// Bytes of `pool` (every pool: `None`) placed in cgroup `cg`, in every state.
    pub(crate) fn placed(&self, cg: u64, pool: Option<usize>) -> usize {
        self.entries
            .values()
            .filter(|e| e.place == Some(cg) && pool.is_none_or(|p| e.pool == p))
            .map(|e| e.len)
            .sum()
    }

    /// Bytes of shared segments the tenants of `cg` hold, have in quarantine
    /// or being cleaned: charged to the daemon by the kernel, lent to `cg`.
    pub(crate) fn lent(&self, cg: u64) -> usize {
        self.entries
            .values()
            .filter(|e| e.holder == Some(cg) && e.place != Some(cg) && e.state.charged().is_some())
            .map(|e| e.len)
            .sum()
    }

    /// Every cgroup with a segment placed in it or lent to it.
    pub(crate) fn cgroups(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .entries
            .values()
            .flat_map(|e| [e.place, e.holder])
            .flatten()
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Whether `pool` should grow by a segment placed in `cg`, toward the
    /// `target` bytes prepared for it, with room under the pool's cap.
    pub(crate) fn wants_growth_in(&self, pool: usize, cg: u64, target: usize) -> bool {
        let s = self.shapes[pool];
        let total: usize = self
            .entries
            .values()
            .filter(|e| e.pool == pool)
            .map(|e| e.len)
            .sum();
        self.placed(cg, Some(pool)) < target && total + s.segment <= s.cap
    }

    /// Ready segments of `pool` placed in `cg` beyond the `target` bytes
    /// prepared for it (all of them for 0: the cgroup is gone, or its
    /// launcher withdrew): they go, and their pages leave its charge.
    pub(crate) fn surplus_in(&self, pool: usize, cg: u64, target: usize) -> Vec<u64> {
        let s = self.shapes[pool];
        let beyond = self.placed(cg, Some(pool)).saturating_sub(target);
        self.entries
            .iter()
            .filter(|(_, e)| {
                e.pool == pool && e.place == Some(cg) && matches!(e.state, State::Ready { .. })
            })
            .map(|(&id, _)| id)
            .take(beyond / s.segment)
            .collect()
    }

    /// Where cleaning segment `id` `how` runs: a scrub in place in the
    /// cgroup of the tenant that held it (its CPU is that tenant's to pay);
    /// fresh pages where the segment is placed (they are charged where they
    /// are faulted in), for the holder if that is elsewhere.
    pub(crate) fn clean_work(&self, id: u64, how: Clean) -> Work {
        let Some(Entry { place, holder, .. }) = self.entries.get(&id) else {
            return Work {
                run_in: None,
                for_cg: None,
            };
        };
        match how {
            Clean::InPlace => Work {
                run_in: holder.or(*place),
                for_cg: None,
            },
            Clean::Fresh => Work {
                run_in: *place,
                for_cg: holder.filter(|h| Some(*h) != *place),
            },
        }
    }
}
