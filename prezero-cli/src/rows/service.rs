//! `bench service`'s rows, one type per table (`"table"`).

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
#[serde(tag = "table", rename_all = "kebab-case")]
pub enum ServiceTable {
    Handout(ServiceHandout),
    Scrub(Scrub),
    VmBoot(VmBoot),
    Vmm(Vmm),
    Charging(Charging),
    ClearingShare(ClearingShare),
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

/// One arm of `--charging`: memory charged to the tenant's cgroup, or the
/// shared pool's (charged to the daemon).
#[derive(Serialize, Deserialize)]
pub struct Charging {
    /// "hand-out" or "qemu ready".
    pub what: String,
    /// "shared pool" or "charged to the tenant".
    pub arm: String,
    pub size: u64,
    pub reps: u64,
    /// "us" or "ms".
    pub unit: String,
    pub p50: f64,
    pub p99: f64,
    /// p50 over the shared pool's (goal: within 1.2).
    pub x_shared: f64,
}

/// Where the CPU of clearing a tenant's memory landed.
#[derive(Serialize, Deserialize)]
pub struct ClearingShare {
    pub bytes: u64,
    /// The daemon's count of the work run inside the tenant's cgroup.
    pub cpu_in_cgroup_ms: f64,
    /// The daemon's count of the work it ran in its own cgroup for it.
    pub cpu_in_daemon_ms: f64,
    /// The tenant cgroup's own counter over the same scrubs.
    pub kernel_ms: f64,
    /// in_cgroup / (in_cgroup + in_daemon) (goal: 1).
    pub share_in_cgroup: f64,
    pub kernel_over_daemon: f64,
}
