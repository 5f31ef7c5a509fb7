//! `bench service`'s rows, one type per table (`"table"`).

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
#[serde(tag = "table", rename_all = "kebab-case")]
pub enum ServiceTable {
    Handout(ServiceHandout),
    Scrub(Scrub),
    VmBoot(VmBoot),
    Vmm(Vmm),
}

/// Hand-out latency of one request size.
#[derive(Serialize, Deserialize)]
pub struct ServiceHandout {
    pub page: String,
    pub size: u64,
    pub reps: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub gbps_p50: f64,
}

/// The daemon's scrubber against the clearing engine on cold memory.
#[derive(Serialize, Deserialize)]
pub struct Scrub {
    pub page: String,
    pub bytes: u64,
    pub scrub_gbps: f64,
    pub verify_gbps: f64,
    pub scrub_verify_gbps: f64,
    pub engine_cold_gbps: f64,
    /// scrub / engine.
    pub ratio: f64,
}

/// One path of the VM boot: zeroed, populated 2 MiB memory.
#[derive(Serialize, Deserialize)]
pub struct VmBoot {
    /// "warm" or "cold".
    pub host: String,
    pub path: String,
    pub size: u64,
    /// Median.
    pub ms: f64,
    pub stdev_pct: f64,
    pub gbps: f64,
    pub x_best_kernel: f64,
}

/// One way of giving QEMU its guest RAM: spawn until QMP answers.
#[derive(Serialize, Deserialize)]
pub struct Vmm {
    pub path: String,
    pub size: u64,
    /// "kvm" or "tcg".
    pub accel: String,
    pub runs: u64,
    /// Median.
    pub ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub stdev_pct: f64,
    pub x_service: f64,
}
