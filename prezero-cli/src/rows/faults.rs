//! `bench faults`'s row: first-touch faults of one page kind and source.

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub struct Faults {
    pub page: String,
    /// "kernel" or "prezero".
    pub source: String,
    pub size: u64,
    pub reps: u64,
    pub threads: u64,
    /// Cache lines touched per 4 KiB page.
    pub lines: u64,
    pub user_s: f64,
    pub system_s: f64,
    pub wall_s: f64,
    pub faults: u64,
    pub flt_per_cpu_s: f64,
    pub faults_per_wall_s: f64,
    pub gbps: f64,
}
