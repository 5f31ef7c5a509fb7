//! `bench all`'s own row: the run's scale and what each step did.

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub struct AllRun {
    /// "full", "quick" or "smoke".
    pub scale: String,
    pub steps: Vec<Step>,
}

/// One step: a run of `prezero <command> --json`.
#[derive(Serialize, Deserialize)]
pub struct Step {
    pub step: String,
    pub command: String,
    /// JSON rows it printed (also those printed before it failed).
    pub rows: u64,
    /// Rows it left out here, each with why (its "not measured" lines).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_measured: Vec<String>,
    #[serde(flatten)]
    pub status: Status,
}

/// How a step ended, in `"status"`, with why it did not run or failed.
#[derive(Serialize, Deserialize, Clone)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Status {
    Ok,
    Skipped {
        reason: String,
    },
    /// Why, in one line, and the last lines of the step's stderr.
    Failed {
        reason: String,
        #[serde(default)]
        stderr_tail: Vec<String>,
    },
}
