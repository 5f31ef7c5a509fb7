//! Which segments serve a request: the pool, the segments of it, and why a
//! request is refused when none can.

use super::{Grant, Ledger, Refused};
use crate::protocol::Refusal;

impl<S> Ledger<S> {
    /// Which segments serve `bytes` on `page`-byte pages for `uid`: from one
    /// pool of that page size, the one whose segment is exactly the request
    /// first, then the one needing the fewest segments, then the least bytes
    /// beyond the request; among those that have enough ready for `uid` and
    /// keep it within its cap; for a tenant of cgroup `cg`, segments placed
    /// there first (see `ready_for`). Pools that would more than double the request
    /// come after all others: a 300 MiB VM takes two 256 MiB segments, not a
    /// 4 GiB one the next 4 GiB VM needs. Nothing changes until [`Ledger::lease`].
    ///
    /// With `nodes`, among the pools on those nodes only, in that order of
    /// preference (the node asked for, then those allowed instead, nearest
    /// first): a pool on an earlier node that has enough ready wins over any
    /// on a later one. `None`: every pool, as if all were on one node.
    pub(crate) fn choose_on(
        &self,
        uid: u32,
        cg: Option<u64>,
        bytes: u64,
        page: u64,
        nodes: Option<&[u32]>,
    ) -> Result<Grant, Refused> {
        if bytes == 0 {
            return refuse(
                Refusal::BadRequest,
                libc::EINVAL,
                0,
                "zero bytes requested".into(),
            );
        }
        // Where a pool's node stands in the order asked for (0 for any).
        let rank_of = |i: usize| match nodes {
            None => Some(0),
            Some(ns) => ns.iter().position(|&n| n == self.shapes[i].node),
        };
        let of_page = self.pools_of_page(page, nodes, rank_of)?;
        let rounded = usize::try_from(bytes)
            .ok()
            .and_then(|b| b.checked_next_multiple_of(page as usize));
        let ranked = self.ranked(&of_page, rounded, rank_of);
        if ranked.is_empty() {
            let cap = of_page.iter().map(|&i| self.shapes[i].cap).max();
            return refuse(
                Refusal::PoolCap,
                libc::ENOMEM,
                0,
                format!(
                    "{bytes} bytes is more than the cap of every pool of page size {page} \
                     (the largest is {})",
                    cap.unwrap_or(0)
                ),
            );
        }
        self.first_ready(&ranked, (uid, cg), page, rounded, nodes)
    }

    /// The pools of `page`-byte pages on a node asked for (`rank_of`), or
    /// why there are none.
    fn pools_of_page(
        &self,
        page: u64,
        nodes: Option<&[u32]>,
        rank_of: impl Fn(usize) -> Option<usize>,
    ) -> Result<Vec<usize>, Refused> {
        let any_of_page = (0..self.shapes.len()).any(|i| self.shapes[i].page as u64 == page);
        let of_page: Vec<usize> = (0..self.shapes.len())
            .filter(|&i| self.shapes[i].page as u64 == page && rank_of(i).is_some())
            .collect();
        if of_page.is_empty() && any_of_page {
            let mut on: Vec<u32> = self
                .shapes
                .iter()
                .filter(|s| s.page as u64 == page)
                .map(|s| s.node)
                .collect();
            on.sort_unstable();
            on.dedup();
            let on: Vec<String> = on.iter().map(u32::to_string).collect();
            let asked: Vec<String> = nodes.unwrap_or(&[]).iter().map(u32::to_string).collect();
            return refuse(
                Refusal::BadRequest,
                libc::EINVAL,
                0,
                format!(
                    "no pool of page size {page} on NUMA node {} (this daemon has them on nodes {})",
                    asked.join(", "),
                    on.join(", ")
                ),
            );
        }
        if of_page.is_empty() {
            let mut served: Vec<String> = self.shapes.iter().map(|s| s.page.to_string()).collect();
            served.dedup();
            return refuse(
                Refusal::BadRequest,
                libc::EINVAL,
                0,
                format!(
                    "no pool of page size {page} (this daemon serves page sizes {})",
                    served.join(", ")
                ),
            );
        }
        Ok(of_page)
    }

    /// The segments of the first of `ranked` (as [`Ledger::ranked`] gives
    /// them, for a request `rounded` to `page`) that has enough ready for
    /// `uid` of cgroup `cg` within its cap; else why none could serve: the
    /// first that lacked ready segments, or the cap.
    fn first_ready(
        &self,
        ranked: &[(usize, bool, bool, usize, usize, usize)],
        (uid, cg): (u32, Option<u64>),
        page: u64,
        rounded: Option<usize>,
        nodes: Option<&[u32]>,
    ) -> Result<Grant, Refused> {
        let used = self.uid_used(uid);
        let mut short: Option<(usize, usize, usize)> = None;
        let mut over_cap = None;
        for &(_, _, _, n, _, pool) in ranked {
            let want = n * self.shapes[pool].segment;
            if let Some(cap) = self.uid_cap.filter(|&c| used.saturating_add(want) > c) {
                over_cap.get_or_insert((want, cap));
                continue;
            }
            let mut ready = self.ready_for(pool, uid, cg);
            if ready.len() >= n {
                ready.truncate(n);
                let lent = match cg {
                    Some(_) => ready
                        .iter()
                        .filter(|id| self.entries[id].place.is_none())
                        .map(|id| self.entries[id].len)
                        .sum(),
                    None => 0,
                };
                return Ok(Grant {
                    pool,
                    ids: ready,
                    lent,
                });
            }
            short.get_or_insert((
                pool,
                n - ready.len(),
                ready.len() * self.shapes[pool].segment,
            ));
        }
        match (short, over_cap) {
            (Some((pool, missing, ready)), _) => {
                let s = self.shapes[pool];
                let on = match nodes {
                    Some(_) => format!(" on NUMA node {}", s.node),
                    None => String::new(),
                };
                Err(Refused {
                    reason: Refusal::NotReady,
                    errno: libc::ENOMEM,
                    ready,
                    message: format!(
                        "{ready} bytes ready in the pool of {page}-byte pages and {}-byte \
                         segments{on}, {} asked",
                        s.segment,
                        rounded.unwrap_or(0).next_multiple_of(s.segment)
                    ),
                    short: Some((pool, missing)),
                })
            }
            (None, Some((want, cap))) => refuse(
                Refusal::UidCap,
                libc::EDQUOT,
                0,
                format!(
                    "uid {uid} holds or has in quarantine {used} bytes; {want} more would pass \
                     its cap of {cap}"
                ),
            ),
            (None, None) => unreachable!("every ranked pool is either short or over the cap"),
        }
    }

    /// The pools of `of_page` that can hold `rounded` bytes, best first as
    /// [`Ledger::choose_on`] ranks them (`rank_of`: a pool's node's place in
    /// the order asked for), each `(.., segments, waste, pool)`.
    fn ranked(
        &self,
        of_page: &[usize],
        rounded: Option<usize>,
        rank_of: impl Fn(usize) -> Option<usize>,
    ) -> Vec<(usize, bool, bool, usize, usize, usize)> {
        // A pool holds whole segments: its capacity is the cap rounded down.
        let mut ranked: Vec<_> = of_page
            .iter()
            .filter_map(|&i| {
                let s = self.shapes[i];
                let r = rounded?;
                let n = r.div_ceil(s.segment);
                let total = n.checked_mul(s.segment).filter(|&t| t <= s.cap)?;
                let waste = total - r;
                Some((rank_of(i)?, total != r || n != 1, waste > r, n, waste, i))
            })
            .collect();
        ranked.sort_unstable();
        ranked
    }

    /// The pool a request of `bytes` on `page`-byte pages would be served
    /// from when every pool had it ready (any node): where memory prepared
    /// for such a request goes, and its bytes there (whole segments).
    pub(crate) fn pool_for_request(&self, bytes: u64, page: u64) -> Option<(usize, usize)> {
        let of_page: Vec<usize> = (0..self.shapes.len())
            .filter(|&i| self.shapes[i].page as u64 == page)
            .collect();
        let rounded = usize::try_from(bytes)
            .ok()
            .and_then(|b| b.checked_next_multiple_of(page as usize));
        let &(.., n, _, pool) = self.ranked(&of_page, rounded, |_| Some(0)).first()?;
        Some((pool, n * self.shapes[pool].segment))
    }
}

/// A refusal of `reason` with `errno`, `ready` bytes ready for the asker.
fn refuse<T>(reason: Refusal, errno: i32, ready: usize, message: String) -> Result<T, Refused> {
    Err(Refused {
        reason,
        errno,
        ready,
        message,
        short: None,
    })
}
