//! The service's counters in the Prometheus text exposition format (0.0.4),
//! for `prezero serve --metrics-textfile` (node_exporter's textfile
//! collector) and `prezero client stats --prometheus`. Both render a
//! [`ServiceStats`], so the file and the wire never disagree.
//!
//! Names follow Prometheus conventions: `prezero_` prefix, base units
//! (bytes, seconds) in the name, `_total` on counters, one histogram.
//!
//! The daemon's writer of the file is in `file.rs`.

mod file;

use std::fmt::Write;

use super::protocol::{Histogram, Refusal, ServiceStats};
pub(crate) use file::MetricsFile;
use prezero::size_label;

/// Upper bounds of the hand-out latency buckets: a hand-out is page-table free
/// on the daemon's side (tens of microseconds) unless the loop is behind.
pub(crate) const LATENCY_BOUNDS_NS: [u64; 15] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    1_000_000_000,
];

impl Histogram {
    /// An empty histogram with the daemon's buckets.
    pub(crate) fn latency() -> Histogram {
        Histogram {
            bounds_ns: LATENCY_BOUNDS_NS.to_vec(),
            counts: vec![0; LATENCY_BOUNDS_NS.len()],
            sum_ns: 0,
            count: 0,
        }
    }

    /// Counts one observation of `ns` nanoseconds.
    pub(crate) fn record(&mut self, ns: u64) {
        if let Some(i) = self.bounds_ns.iter().position(|&b| ns <= b) {
            self.counts[i] += 1;
        }
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.count += 1;
    }
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The text exposition of `stats`.
pub fn prometheus(stats: &ServiceStats) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: &[(String, f64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, v) in samples {
            let _ = writeln!(out, "{name}{labels} {v}");
        }
    };
    pool_families(stats, &mut family);
    request_families(stats, &mut family);
    cleaning_families(stats, &mut family);
    tenant_families(stats, &mut family);
    cgroup_families(stats, &mut family);
    out
}

/// A pool's labels: its page and segment sizes, and its node. A daemon that
/// does not say where a pool is gets no node label.
fn pool_labels(p: &super::PoolCounters) -> String {
    let node = p.node.map_or(String::new(), |n| format!(",node=\"{n}\""));
    format!(
        "page=\"{}\",segment=\"{}\"{node}",
        size_label(p.page_size as usize),
        size_label(p.segment_size as usize)
    )
}

/// The families by pool: its bytes by state, its target, cap and shortage,
/// its hand-outs.
fn pool_families(
    stats: &ServiceStats,
    family: &mut impl FnMut(&str, &str, &str, &[(String, f64)]),
) {
    let mut by_state = Vec::new();
    for p in &stats.pools {
        for (state, n) in [
            ("ready", p.ready),
            ("held", p.leased),
            ("quarantined", p.quarantined),
            ("scrubbing", p.scrubbing),
        ] {
            by_state.push((
                format!("{{{},state=\"{state}\"}}", pool_labels(p)),
                n.saturating_mul(p.segment_size) as f64,
            ));
        }
    }
    family(
        "prezero_pool_bytes",
        "gauge",
        "Bytes of each pool by segment state: ready (zero, verified), held by clients, \
         quarantined (released, maybe still held), scrubbing (being made zero).",
        &by_state,
    );
    let per_pool = |f: fn(&super::PoolCounters) -> u64| -> Vec<(String, f64)> {
        stats
            .pools
            .iter()
            .map(|p| (format!("{{{}}}", pool_labels(p)), f(p) as f64))
            .collect()
    };
    family(
        "prezero_pool_target_bytes",
        "gauge",
        "Zeroed bytes each pool keeps ready.",
        &per_pool(|p| p.target),
    );
    family(
        "prezero_pool_cap_bytes",
        "gauge",
        "Most bytes each pool holds in all states.",
        &per_pool(|p| p.cap),
    );
    family(
        "prezero_pool_hugetlb_short_bytes",
        "gauge",
        "Bytes each pool lacks of its target because its node has too few free hugetlb \
         pages (the daemon's log said once what reserves them).",
        &per_pool(|p| p.short),
    );
    family(
        "prezero_handouts_total",
        "counter",
        "ALLOC requests served, by pool.",
        &per_pool(|p| p.handouts),
    );
}

/// The families of requests: refusals by reason, and the hand-outs' latency.
fn request_families(
    stats: &ServiceStats,
    family: &mut impl FnMut(&str, &str, &str, &[(String, f64)]),
) {
    let reasons: Vec<(String, f64)> = Refusal::ALL
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let n = stats.refusals_by_reason.get(i).copied().unwrap_or(0);
            (format!("{{reason=\"{}\"}}", r.name()), n as f64)
        })
        .collect();
    family(
        "prezero_refusals_total",
        "counter",
        "Requests and connections answered with an error, by reason.",
        &reasons,
    );
    let h = &stats.latency;
    let mut buckets = Vec::with_capacity(h.bounds_ns.len() + 3);
    let mut cumulative = 0;
    for (&b, &c) in h.bounds_ns.iter().zip(&h.counts) {
        cumulative = c.saturating_add(cumulative);
        buckets.push((
            format!("_bucket{{le=\"{}\"}}", seconds(b)),
            cumulative as f64,
        ));
    }
    buckets.push(("_bucket{le=\"+Inf\"}".into(), h.count as f64));
    buckets.push(("_sum".into(), seconds(h.sum_ns)));
    buckets.push(("_count".into(), h.count as f64));
    family(
        "prezero_handout_latency_seconds",
        "histogram",
        "Time from an ALLOC request read to its last answer sent.",
        &buckets,
    );
}

/// The families of the worker's cleaning and verifying.
fn cleaning_families(
    stats: &ServiceStats,
    family: &mut impl FnMut(&str, &str, &str, &[(String, f64)]),
) {
    let in_place = |total: u64, fresh: u64| total.saturating_sub(fresh);
    family(
        "prezero_cleaned_bytes_total",
        "counter",
        "Bytes made zero again after a release: scrubbed in place, or given fresh pages.",
        &[
            (
                "{how=\"in_place\"}".into(),
                in_place(stats.scrubbed_bytes, stats.fresh_bytes) as f64,
            ),
            ("{how=\"fresh\"}".into(), stats.fresh_bytes as f64),
        ],
    );
    family(
        "prezero_clean_seconds_total",
        "counter",
        "Time the worker spent making released segments zero.",
        &[
            (
                "{how=\"in_place\"}".into(),
                seconds(in_place(stats.scrub_ns, stats.fresh_ns)),
            ),
            ("{how=\"fresh\"}".into(), seconds(stats.fresh_ns)),
        ],
    );
    family(
        "prezero_verified_bytes_total",
        "counter",
        "Bytes read back to check they are zero.",
        &[(String::new(), stats.verified_bytes as f64)],
    );
    family(
        "prezero_verify_seconds_total",
        "counter",
        "Time spent verifying.",
        &[(String::new(), seconds(stats.verify_ns))],
    );
    family(
        "prezero_verify_failures_total",
        "counter",
        "Segments that failed verification (destroyed, never handed out).",
        &[(String::new(), stats.verify_failures as f64)],
    );
}

/// The families by tenant uid: connections and what each is charged.
fn tenant_families(
    stats: &ServiceStats,
    family: &mut impl FnMut(&str, &str, &str, &[(String, f64)]),
) {
    family(
        "prezero_connections",
        "gauge",
        "Connections open, by tenant uid.",
        &stats
            .tenants
            .iter()
            .map(|t| (format!("{{uid=\"{}\"}}", t.uid), t.connections as f64))
            .collect::<Vec<_>>(),
    );
    family(
        "prezero_tenant_charged_bytes",
        "gauge",
        "Bytes each tenant holds, has in quarantine or being cleaned (what its cap counts).",
        &stats
            .tenants
            .iter()
            .map(|t| (format!("{{uid=\"{}\"}}", t.uid), t.charged as f64))
            .collect::<Vec<_>>(),
    );
    family(
        "prezero_tenants_omitted",
        "gauge",
        "Tenants left out of the two families above to fit one STATS message.",
        &[(String::new(), stats.tenants_omitted as f64)],
    );
}

/// A Prometheus label value: backslash, double quote and newline escaped
/// (a cgroup's name is anyone's bytes; not UTF-8 becomes U+FFFD).
fn label(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The families by tenant cgroup: what the kernel charges to it, what the
/// daemon lends it, what was prepared for it, and what cleaning cost it.
fn cgroup_families(
    stats: &ServiceStats,
    family: &mut impl FnMut(&str, &str, &str, &[(String, f64)]),
) {
    let by = |f: &dyn Fn(&super::CgroupStats) -> Vec<(&'static str, f64)>| -> Vec<(String, f64)> {
        stats
            .cgroups
            .iter()
            .flat_map(|c| {
                let name = label(&c.name);
                f(c).into_iter()
                    .map(move |(extra, v)| (format!("{{cgroup=\"{name}\"{extra}}}"), v))
            })
            .collect()
    };
    family(
        "prezero_cgroup_bytes",
        "gauge",
        "Bytes a tenant cgroup has of the service: placed (its pages, charged to it by the \
         kernel: what was prepared for it, held or ready) and lent (shared pages its tenants \
         hold, charged to the daemon, counted against its limits by the daemon).",
        &by(&|c| {
            vec![
                (",by=\"placed\"", c.placed as f64),
                (",by=\"lent\"", c.lent as f64),
            ]
        }),
    );
    family(
        "prezero_cgroup_prepared_bytes",
        "gauge",
        "Bytes prepared for a tenant cgroup (announced with PREPARE, or configured).",
        &by(&|c| vec![("", c.prepared as f64)]),
    );
    family(
        "prezero_cgroup_cleaned_bytes_total",
        "counter",
        "Bytes made zero for a tenant cgroup: its released segments, its prepared fills.",
        &by(&|c| vec![("", c.cleaned_bytes as f64)]),
    );
    family(
        "prezero_cgroup_clean_cpu_seconds_total",
        "counter",
        "CPU that work took for a tenant cgroup: where=\"cgroup\" ran inside it (its cpu.stat \
         has it), where=\"daemon\" in the daemon's cgroup where it could not.",
        &by(&|c| {
            vec![
                (",where=\"cgroup\"", seconds(c.cpu_in_ns)),
                (",where=\"daemon\"", seconds(c.cpu_daemon_ns)),
            ]
        }),
    );
    family(
        "prezero_cgroup_refusals_total",
        "counter",
        "Requests refused because a tenant cgroup was at its hugetlb or memory limit.",
        &by(&|c| vec![("", c.refusals as f64)]),
    );
    family(
        "prezero_cgroups_omitted",
        "gauge",
        "Tenant cgroups left out of the families above to fit one STATS message.",
        &[(String::new(), stats.cgroups_omitted as f64)],
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PoolCounters, TenantStats};

    #[test]
    fn every_family_has_help_and_type_and_buckets_are_cumulative() {
        let mut h = Histogram::latency();
        for ns in [1, 10_000, 10_001, 2_000_000, 5_000_000_000] {
            h.record(ns);
        }
        let stats = ServiceStats {
            pools: vec![PoolCounters {
                page_size: 2 << 20,
                segment_size: 4 << 30,
                ready: 2,
                handouts: 5,
                short: 4 << 20,
                ..Default::default()
            }],
            refusals_by_reason: vec![3],
            latency: h,
            tenants: vec![TenantStats {
                uid: 1000,
                connections: 2,
                charged: 1 << 21,
            }],
            ..Default::default()
        };
        let text = prometheus(&stats);
        assert!(text.contains(
            "prezero_pool_bytes{page=\"2MiB\",segment=\"4GiB\",state=\"ready\"} 8589934592"
        ));
        assert!(text.contains("prezero_refusals_total{reason=\"not_ready\"} 3"));
        assert!(text
            .contains("prezero_pool_hugetlb_short_bytes{page=\"2MiB\",segment=\"4GiB\"} 4194304"));
        let mut on_node = stats.clone();
        on_node.pools[0].node = Some(1);
        assert!(prometheus(&on_node).contains(
            "prezero_pool_bytes{page=\"2MiB\",segment=\"4GiB\",node=\"1\",state=\"ready\"} 8589934592"
        ));
        assert!(text.contains("prezero_refusals_total{reason=\"malformed\"} 0"));
        assert!(text.contains("prezero_handout_latency_seconds_bucket{le=\"0.00001\"} 2"));
        assert!(text.contains("prezero_handout_latency_seconds_bucket{le=\"0.0025\"} 4"));
        assert!(text.contains("prezero_handout_latency_seconds_bucket{le=\"+Inf\"} 5"));
        assert!(text.contains("prezero_connections{uid=\"1000\"} 2"));
        let mut cg = stats.clone();
        cg.cgroups = vec![crate::CgroupStats {
            name: b"/vm \"1\"\\x\ny".to_vec(),
            placed: 4096,
            cpu_in_ns: 1_500_000_000,
            ..Default::default()
        }];
        let t = prometheus(&cg);
        assert!(
            t.contains(
                "prezero_cgroup_bytes{cgroup=\"/vm \\\"1\\\"\\\\x\\ny\",by=\"placed\"} 4096"
            ),
            "{t}"
        );
        assert!(t.contains("prezero_cgroup_clean_cpu_seconds_total{cgroup=\"/vm \\\"1\\\"\\\\x\\ny\",where=\"cgroup\"} 1.5"));
        let mut typed = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                typed.insert(rest.split(' ').next().unwrap().to_owned());
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s))
                    .filter(|f| typed.contains(*f))
                    .unwrap_or(name);
                assert!(typed.contains(family), "{name} has no TYPE line before it");
            }
        }
    }
}
