//! `bench clear`'s row: one size, strategy and temperature.

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub struct Clear {
    /// "hot" or "cold".
    pub mode: String,
    pub size: u64,
    pub strategy: String,
    pub gbps: f64,
    pub stdev_pct: f64,
    pub median_gbps: f64,
    /// The kernel Auto picked, on the `auto` strategies' rows only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
}
