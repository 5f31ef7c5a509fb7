//! `prezero serve`'s TOML config: the CLI's reading of the file
//! (`prezero_service::ConfigFile`, as `prezero serve` reads it, with no flags
//! over it) and the library's checks (`ServerConfig::placed_pools`, as
//! `validate` and `Server::start` make them, on this machine's NUMA
//! topology). Any text is an error or a config that passes them, never a
//! panic, and the pools of a config that passes are what the daemon relies
//! on: each on one node, of hugetlb pages, segments whole pages within the
//! cap, the target within the cap, at most `MAX_POOLS`, no two alike. The
//! same text as a `--prepare` flag is read too.
#![no_main]

use std::collections::HashSet;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use prezero::numa::Topology;
use prezero_service::protocol::MAX_POOLS;

use prezero_service::{ConfigFile, ConfigPrepare};

/// Read once: a sysfs read per input would be most of the time spent.
fn topology() -> &'static Topology {
    static TOPOLOGY: OnceLock<Topology> = OnceLock::new();
    TOPOLOGY.get_or_init(Topology::read)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The same text as a `--prepare` flag, read as a `[[prepare]]` table is:
    // one that passes names an absolute cgroup path and hugetlb pages.
    if let Ok(p) = ConfigPrepare::from_flag(text) {
        let mut f = ConfigFile::default();
        f.prepare.push(p);
        if let Ok(cfg) = f.config(Vec::new()) {
            for p in &cfg.prepare {
                assert!(p.cgroup.is_absolute() && p.page.is_hugetlb(), "{p:?}");
            }
        }
    }
    let Ok(cfg) = ConfigFile::parse(text).and_then(|f| f.config(Vec::new())) else {
        return;
    };
    let Ok(placed) = cfg.placed_pools(topology()) else {
        return;
    };
    assert!(
        !placed.is_empty() && placed.len() <= MAX_POOLS,
        "{placed:?}"
    );
    let mut seen = HashSet::new();
    for p in &placed {
        assert!(topology().node(p.node).is_some(), "{p:?} not on a node");
        assert!(p.page.is_hugetlb(), "{p:?}");
        assert!(
            p.segment_size > 0 && p.segment_size.is_multiple_of(p.page.page_size()),
            "{p:?}: segments of part pages"
        );
        // Shares of a node's memory made bytes: whole segments, within the cap.
        assert!(p.segment_size <= p.cap && p.target <= p.cap, "{p:?}");
        assert!(seen.insert((p.page, p.segment_size, p.node)), "{p:?} twice");
    }
    assert!(cfg.max_conns_per_uid > 0);
    assert!(!cfg.metrics_interval.is_zero());
});
