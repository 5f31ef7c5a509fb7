//! `bench programs`' row: one real program in one arm (plainly, under
//! `prezero run`, under `prezero run --lazy`).

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub struct Programs {
    pub program: String,
    /// What it ran, as a person would say it.
    pub command: String,
    /// "plain", "prezero" or "lazy".
    pub arm: String,
    pub runs: u64,
    /// Wall time: the median and the spread.
    pub time_ms: f64,
    pub time_min_ms: f64,
    pub time_max_ms: f64,
    /// `wait4`'s `ru_maxrss` (the largest peak of one process of the tree):
    /// the median and the spread.
    pub peak_rss_bytes: u64,
    pub peak_rss_min_bytes: u64,
    pub peak_rss_max_bytes: u64,
    /// Plain median time / this arm's: above 1 is faster (1 for plain).
    pub speedup: f64,
    /// This arm's median peak RSS / plain's.
    pub rss_ratio: f64,
    /// Whether its time is the first touch of large zeroed memory.
    pub first_touch: bool,
    /// What the issue asks of this arm's time and RSS, and whether it was met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_goal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_goal_met: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_goal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_goal_met: Option<bool>,
    /// The sizes' share of their full values (below 1 where memory was short).
    pub scale: f64,
    /// What prezero said on stderr in this arm (the lazy mode not available).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}
