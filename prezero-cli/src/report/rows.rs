//! The rows the report reads, one type per kind of row, as the benches write
//! them (`prezero bench <name> --json`, `prezero info --json`). Fields a bench
//! writes only sometimes are `Option`s; fields the report does not show are
//! not declared (serde skips them).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// `prezero info --json`. Everything may be missing: a run whose `info` step
/// failed still has a report, under an unknown machine.
#[derive(Deserialize, Default)]
pub struct Info {
    pub cpu: Option<Cpu>,
    #[serde(default)]
    pub memory: Memory,
    #[serde(default)]
    pub profile: Profile,
}

#[derive(Deserialize)]
pub struct Cpu {
    pub model_name: String,
    pub vendor: String,
    pub family: u64,
    pub model: u64,
    pub logical_cpus: u64,
    #[serde(default)]
    pub caches: Vec<Cache>,
    /// The features in use (a PREZERO_CPU mask may hide some).
    #[serde(default)]
    pub features: BTreeMap<String, bool>,
    /// The features the CPU has, when a mask is in force.
    #[serde(default)]
    pub detected: BTreeMap<String, bool>,
    pub mask: Option<String>,
}

#[derive(Deserialize)]
pub struct Cache {
    pub level: u64,
    pub size: u64,
}

#[derive(Deserialize, Default)]
pub struct Memory {
    pub thp_mode: Option<String>,
    pub kernel_release: Option<String>,
}

/// Auto's size classes per temperature, and where they came from.
#[derive(Deserialize, Default)]
pub struct Profile {
    pub source: Option<String>,
    #[serde(default)]
    pub hot: Vec<Class>,
    #[serde(default)]
    pub cold: Vec<Class>,
    #[serde(default)]
    pub unknown: Vec<Class>,
}

#[derive(Deserialize)]
pub struct Class {
    /// Sizes below this many bytes; `None`: every size from the previous class.
    pub below: Option<u64>,
    pub kernel: String,
}

/// One row of `bench all --json-out` after the `info` line.
#[derive(Deserialize)]
#[serde(tag = "bench", rename_all = "kebab-case")]
enum Row {
    All(AllRun),
    Clear(Clear),
    Mmap(Mmap),
    Faults(Faults),
    Pool(Pool),
    Template(Template),
    Service(Service),
    Run(Run),
    /// A bench the report has no section for (`template-stores`, say).
    #[serde(other)]
    Other,
}

/// `bench all`'s own row: what each step did.
#[derive(Deserialize)]
pub struct AllRun {
    pub scale: String,
    pub steps: Vec<Step>,
}

#[derive(Deserialize)]
pub struct Step {
    pub step: String,
    pub command: String,
    pub rows: u64,
    /// "ok", "skipped" or "failed".
    pub status: String,
    pub reason: Option<String>,
    #[serde(default)]
    pub stderr_tail: Vec<String>,
}

#[derive(Deserialize)]
pub struct Clear {
    /// "hot" or "cold".
    pub mode: String,
    pub size: u64,
    pub strategy: String,
    pub gbps: f64,
    pub stdev_pct: f64,
    pub median_gbps: f64,
}

#[derive(Deserialize)]
pub struct Mmap {
    pub page: String,
    pub function: String,
    pub threads: u64,
    pub size: u64,
    pub gbps: f64,
    pub stdev_pct: f64,
    pub host: String,
}

#[derive(Deserialize)]
pub struct Faults {
    pub page: String,
    /// "kernel" or "prezero".
    pub source: String,
    pub size: u64,
    pub reps: u64,
    pub threads: u64,
    pub lines: u64,
    pub user_s: f64,
    pub system_s: f64,
    pub wall_s: f64,
    pub faults: u64,
    pub flt_per_cpu_s: f64,
    pub faults_per_wall_s: f64,
    pub gbps: f64,
}

#[derive(Deserialize)]
#[serde(tag = "case", rename_all = "kebab-case")]
enum Pool {
    Handout(PoolHandout),
    Sustained(PoolSustained),
    Interference(Interference),
}

#[derive(Deserialize)]
pub struct PoolHandout {
    pub source: String,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// (microseconds, fraction of hand-outs that took at most that).
    pub cdf: Vec<(f64, f64)>,
}

#[derive(Deserialize)]
pub struct PoolSustained {
    pub source: String,
    /// Kernel sources only: "warm" or "cold".
    pub host: Option<String>,
    pub inflight: u64,
    pub lines: u64,
    pub gbps: f64,
    pub stdev_pct: f64,
}

#[derive(Deserialize)]
pub struct Interference {
    pub scrubber: String,
    pub alone_s: f64,
    pub with_s: f64,
    pub slowdown_pct: f64,
    pub scrubbed_bytes_during: u64,
}

#[derive(Deserialize)]
pub struct Template {
    pub layout: String,
    pub method: String,
    pub records: u64,
    pub ms: f64,
    pub median_ms: f64,
    pub gbps: f64,
    pub stdev_pct: f64,
}

#[derive(Deserialize)]
#[serde(tag = "table", rename_all = "kebab-case")]
enum Service {
    Handout(ServiceHandout),
    Scrub(Scrub),
    VmBoot(VmBoot),
    Vmm(Vmm),
}

#[derive(Deserialize)]
pub struct ServiceHandout {
    pub page: String,
    pub size: u64,
    pub reps: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub gbps_p50: f64,
}

#[derive(Deserialize)]
pub struct Scrub {
    pub page: String,
    pub bytes: u64,
    pub scrub_gbps: f64,
    pub verify_gbps: f64,
    pub scrub_verify_gbps: f64,
    pub engine_cold_gbps: f64,
    pub ratio: f64,
}

#[derive(Deserialize)]
pub struct VmBoot {
    pub host: String,
    pub path: String,
    pub size: u64,
    pub ms: f64,
    pub stdev_pct: f64,
    pub gbps: f64,
    pub x_best_kernel: f64,
}

#[derive(Deserialize)]
pub struct Vmm {
    pub path: String,
    pub size: u64,
    pub accel: String,
    pub runs: u64,
    pub ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub stdev_pct: f64,
    pub x_service: f64,
}

/// `bench run`: one figure of one program, plainly and under `prezero run`.
#[derive(Deserialize)]
pub struct Run {
    pub program: String,
    pub figure: String,
    pub runs: u64,
    pub plain_ms: f64,
    pub plain_stdev_pct: f64,
    pub prezero_ms: f64,
    pub prezero_stdev_pct: f64,
    pub speedup: f64,
    pub goal: Option<String>,
    pub goal_met: Option<bool>,
    pub plain_peak_rss_bytes: u64,
    pub prezero_peak_rss_bytes: u64,
    pub prezero_held_beyond_use_gib: Option<f64>,
}

/// Every row of a run, by kind, in the order the benches wrote them.
#[derive(Default)]
pub struct Rows {
    pub all: Option<AllRun>,
    pub clear: Vec<Clear>,
    pub mmap: Vec<Mmap>,
    pub faults: Vec<Faults>,
    pub pool_handout: Vec<PoolHandout>,
    pub pool_sustained: Vec<PoolSustained>,
    pub interference: Vec<Interference>,
    pub template: Vec<Template>,
    pub service_handout: Vec<ServiceHandout>,
    pub scrub: Vec<Scrub>,
    pub vm_boot: Vec<VmBoot>,
    pub vmm: Vec<Vmm>,
    pub run: Vec<Run>,
    /// Rows of a known bench that do not have its fields: (row, why).
    pub unread: Vec<(String, String)>,
}

impl Rows {
    pub fn read(all: &[Value]) -> Rows {
        let mut rows = Rows::default();
        for v in all {
            match Row::deserialize(v) {
                Ok(row) => rows.push(row),
                Err(e) => rows.unread.push((v.to_string(), e.to_string())),
            }
        }
        rows
    }

    fn push(&mut self, row: Row) {
        match row {
            // The first `all` row is the run's; `bench all` writes only one.
            Row::All(r) => {
                self.all.get_or_insert(r);
            }
            Row::Clear(r) => self.clear.push(r),
            Row::Mmap(r) => self.mmap.push(r),
            Row::Faults(r) => self.faults.push(r),
            Row::Pool(Pool::Handout(r)) => self.pool_handout.push(r),
            Row::Pool(Pool::Sustained(r)) => self.pool_sustained.push(r),
            Row::Pool(Pool::Interference(r)) => self.interference.push(r),
            Row::Template(r) => self.template.push(r),
            Row::Service(Service::Handout(r)) => self.service_handout.push(r),
            Row::Service(Service::Scrub(r)) => self.scrub.push(r),
            Row::Service(Service::VmBoot(r)) => self.vm_boot.push(r),
            Row::Service(Service::Vmm(r)) => self.vmm.push(r),
            Row::Run(r) => self.run.push(r),
            Row::Other => {}
        }
    }
}

impl Info {
    /// The `info` row; one that does not parse describes no machine.
    pub fn read(v: &Value) -> Info {
        Info::deserialize(v).unwrap_or_default()
    }
}

/// The distinct values of `key` over `rows`, in first-seen order.
pub fn distinct<T, K: PartialEq>(rows: &[T], key: impl Fn(&T) -> K) -> Vec<K> {
    let mut v = Vec::new();
    for r in rows {
        let k = key(r);
        if !v.contains(&k) {
            v.push(k);
        }
    }
    v
}
