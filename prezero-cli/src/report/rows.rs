//! The rows the report reads: a run's bench rows gathered by kind (their
//! types are the rows format's, `crate::rows`), and the `info` row
//! (`prezero info --json`), whose types are here: fields it writes only
//! sometimes are `Option`s; fields the report does not show are not declared
//! (serde skips them).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::rows::{
    AllRun, Clear, Faults, Interference, Mmap, PoolCase, PoolHandout, PoolSustained, Programs, Row,
    Run, Scrub, ServiceHandout, ServiceTable, Template, VmBoot, Vmm,
};

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
    pub programs: Vec<Programs>,
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
            Row::Pool(PoolCase::Handout(r)) => self.pool_handout.push(r),
            Row::Pool(PoolCase::Sustained(r)) => self.pool_sustained.push(r),
            Row::Pool(PoolCase::Interference(r)) => self.interference.push(r),
            Row::Template(r) => self.template.push(r),
            Row::Service(ServiceTable::Handout(r)) => self.service_handout.push(r),
            Row::Service(ServiceTable::Scrub(r)) => self.scrub.push(r),
            Row::Service(ServiceTable::VmBoot(r)) => self.vm_boot.push(r),
            Row::Service(ServiceTable::Vmm(r)) => self.vmm.push(r),
            Row::Run(r) => self.run.push(r),
            Row::Programs(r) => self.programs.push(r),
            // No section shows them (the store study's rows read as Other;
            // the charging rows are `bench service --charging`'s alone).
            Row::TemplateStores(_)
            | Row::Service(ServiceTable::Charging(_) | ServiceTable::ClearingShare(_))
            | Row::Other => {}
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
