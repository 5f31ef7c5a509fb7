//! The rows `prezero bench <name> --json` prints, one JSON object a line: one
//! type per kind of row, a file per bench. The bench builds the type and
//! prints it; the report (and anything else that reads a recording) reads the
//! same type back, so the writer and the reader cannot drift apart.
//!
//! Every row names its bench in `"bench"`; the pool's rows name their case in
//! `"case"`, the service's their table in `"table"`. A field a bench writes
//! only sometimes, or began to write after rows were recorded (`machines/`,
//! the report's fixture), is optional: those recordings still read.

mod all;
mod clear;
mod faults;
mod mmap;
mod pool;
mod programs;
mod run;
mod service;
mod template;

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use all::{AllRun, Status, Step};
pub use clear::Clear;
pub use faults::Faults;
pub use mmap::Mmap;
pub use pool::{Interference, PoolCase, PoolHandout, PoolSustained};
pub use programs::Programs;
pub use run::Run;
pub use service::{Charging, ClearingShare, Scrub, ServiceHandout, ServiceTable, VmBoot, Vmm};
pub use template::{Template, TemplateStores};

/// One row of any bench.
#[derive(Serialize, Deserialize)]
#[serde(tag = "bench", rename_all = "kebab-case")]
pub enum Row {
    All(AllRun),
    Clear(Clear),
    Mmap(Mmap),
    Faults(Faults),
    Pool(PoolCase),
    Template(Template),
    /// Written, never read: nothing shows the store study's rows (calibrate
    /// takes its figures directly), so they read as [`Row::Other`] and one
    /// that lacks a field is not reported as unread.
    #[serde(skip_deserializing)]
    TemplateStores(TemplateStores),
    Service(ServiceTable),
    Run(Run),
    Programs(Programs),
    /// A row of no bench above (`info`, or a later bench's).
    #[serde(other, skip_serializing)]
    Other,
}

impl Row {
    /// The row as a JSON value: its keys in sorted order, as every recording
    /// has them.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a bench row is a JSON object with string keys")
    }

    /// Prints the row as one line of JSON (what `--json` promises).
    pub fn print(&self) {
        println!("{}", self.to_value());
    }
}

/// Every row of a file of `prezero bench ... --json` lines (what is not a JSON
/// object, such as a line a shell added, is passed over).
pub fn read_rows(path: &Path) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the rows {}", path.display()))?;
    let rows: Vec<Value> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with('{'))
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{}: line {} is not a JSON row", path.display(), i + 1))
        })
        .collect::<Result<_>>()?;
    if rows.is_empty() {
        anyhow::bail!(
            "{} holds no JSON row (`bench all --json-out` writes one per line)",
            path.display()
        );
    }
    Ok(rows)
}

#[cfg(test)]
mod tests;
