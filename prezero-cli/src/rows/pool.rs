//! `bench pool`'s rows, one type per case (`"case"`).

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
#[serde(tag = "case", rename_all = "kebab-case")]
pub enum PoolCase {
    Handout(PoolHandout),
    Sustained(PoolSustained),
    Interference(Interference),
}

/// Latency of getting 2 MiB of zeroed, usable memory from one source.
#[derive(Serialize, Deserialize)]
pub struct PoolHandout {
    pub source: String,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// (microseconds, fraction of hand-outs that took at most that).
    pub cdf: Vec<(f64, f64)>,
}

/// GB/s of zeroed memory handed out, touched and freed with `inflight` held.
#[derive(Serialize, Deserialize)]
pub struct PoolSustained {
    pub source: String,
    /// Kernel sources only: "warm" or "cold".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub inflight: u64,
    /// Cache lines touched per 4 KiB page.
    pub lines: u64,
    pub gbps: f64,
    pub stdev_pct: f64,
}

/// A CPU-bound foreground alone and beside a scrubber with a backlog.
#[derive(Serialize, Deserialize)]
pub struct Interference {
    /// The scrubber's priority.
    pub scrubber: String,
    pub alone_s: f64,
    pub with_s: f64,
    pub slowdown_pct: f64,
    pub scrubbed_bytes_during: u64,
}
