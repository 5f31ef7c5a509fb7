//! `bench run`'s row: one figure of one program, plainly, under `prezero run`
//! and under `prezero run --lazy`.

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub struct Run {
    pub program: String,
    pub figure: String,
    pub runs: u64,
    /// Medians.
    pub plain_ms: f64,
    pub plain_stdev_pct: f64,
    pub prezero_ms: f64,
    pub prezero_stdev_pct: f64,
    /// plain / prezero: above 1 is faster.
    pub speedup: f64,
    /// What the issue asks of this figure (">= 2x"), and whether it was met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal_met: Option<bool>,
    pub plain_peak_rss_bytes: u64,
    pub prezero_peak_rss_bytes: u64,
    /// The bench's own peak RSS: every process's peak reads at least this
    /// (wait4 counts the image a child was spawned from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_floor_bytes: Option<u64>,
    #[serde(default)]
    pub smoke: bool,
    /// What the preload's cache held at peak beyond use, and the use, in GiB
    /// (when its summary line was read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prezero_held_beyond_use_gib: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prezero_peak_in_use_gib: Option<f64>,
    /// numpy's first_pass_later only: plain first_pass_later / plain
    /// second_pass, the most any allocator can give that loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_speedup: Option<f64>,
    /// What the `_ms` fields hold when not milliseconds: "MiB" for a memory
    /// figure (the sparse program's RssAnon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// The lazy arm (`prezero run --lazy`), in rows that have one: median,
    /// spread, plain / lazy, its goal, and its peak RSS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lazy_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lazy_stdev_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lazy_speedup: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lazy_goal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lazy_goal_met: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lazy_peak_rss_bytes: Option<u64>,
    /// The lowest MemAvailable seen while each arm's processes ran: the
    /// memory the machine had left beside them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plain_low_available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prezero_low_available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lazy_low_available_bytes: Option<u64>,
}
