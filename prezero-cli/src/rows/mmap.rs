//! `bench mmap`'s row: map + populate of one page kind by one function.

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub struct Mmap {
    pub page: String,
    pub function: String,
    pub threads: u64,
    pub size: u64,
    pub gbps: f64,
    pub stdev_pct: f64,
    /// "warm" or "cold": whether the host had backed the memory before.
    pub host: String,
    /// populate-parallel's NUMA nodes, part by part (`--nodes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<u32>>,
}
