//! Pools short of hugetlb pages: said once, in one line, with the one
//! command that gives every pool its target (a write of each node's
//! `nr_hugepages` where there are nodes), then shown where an operator looks
//! on purpose, `STATS` and the metrics ([`Server::short_bytes`]), not again
//! in the log at every retry. A shortage that ends and comes back is said
//! once again.

use std::collections::BTreeMap;

use super::Server;
use crate::log;
use prezero::numa::Topology;

impl Server {
    /// Bytes pool `i` lacks of its target while its node is short of
    /// hugetlb pages (0 otherwise): the whole segments it would still make,
    /// within its cap.
    pub(super) fn short_bytes(&self, i: usize) -> usize {
        let p = &self.pools[i];
        if !p.hugetlb_short {
            return 0;
        }
        let c = self.ledger.counts(i);
        let seg = p.cfg.segment_size;
        let ready = c.ready * seg;
        let total = (c.ready + c.leased + c.quarantined + c.scrubbing) * seg;
        let to_target = p.cfg.target.saturating_sub(ready).div_ceil(seg);
        let room = p.cfg.cap.saturating_sub(total) / seg;
        to_target.min(room) * seg
    }

    /// Says the shortage of the pools now, once (see the module's doc).
    pub(super) fn say_shortage(&mut self) {
        let mut lacking: BTreeMap<(usize, u32), (&str, usize)> = BTreeMap::new();
        for i in 0..self.pools.len() {
            let bytes = self.short_bytes(i);
            if bytes > 0 {
                let p = &self.pools[i].cfg;
                let page = p.page.page_size();
                lacking
                    .entry((page, p.node))
                    .or_insert((p.page.name(), 0))
                    .1 += bytes / page;
            }
        }
        if lacking.is_empty() {
            self.told_shortage = false;
            return;
        }
        if std::mem::replace(&mut self.told_shortage, true) {
            return;
        }
        log(&shortage_line(&lacking, &Topology::read()));
    }
}

/// One line: the pages each node lacks, and the command that gives them.
/// `lacking`: (page size, node) -> (the page size's name, pages the pools
/// there still want).
fn shortage_line(lacking: &BTreeMap<(usize, u32), (&str, usize)>, topology: &Topology) -> String {
    let mut what = Vec::new();
    let mut commands = Vec::new();
    for (&(page, node), &(name, pages)) in lacking {
        let pool = topology
            .node(node)
            .and_then(|n| n.hugetlb.iter().find(|h| h.page_size == page));
        let (total, free) = pool.map_or((0, 0), |h| (h.total, h.free));
        what.push(format!(
            "{pages} {name} pages on node {node} ({free} free of {total})"
        ));
        // The free ones count toward what is wanted: grow the pool by the rest.
        commands.push(format!(
            "echo {} > {}",
            total + pages.saturating_sub(free),
            prezero::hugetlb::nr_path(node, page)
        ));
    }
    format!(
        "short of hugetlb pages for the pools' targets: they want {}; reserve them with: {} \
         (the pools then grow by themselves; meanwhile prezero client stats and the metrics \
         show what each lacks, and this is not said again)",
        what.join(", "),
        commands.join(" && ")
    )
}
