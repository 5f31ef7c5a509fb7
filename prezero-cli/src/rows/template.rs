//! `bench template`'s rows: a method's figure for one layout, and (`--stores`)
//! one kernel's `template_fill_words` rate at one size.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub struct Template {
    pub layout: String,
    pub method: String,
    pub records: u64,
    /// Mean.
    pub ms: f64,
    pub median_ms: f64,
    /// From the median.
    pub gbps: f64,
    pub stdev_pct: f64,
    /// The streaming kernel: the ceiling's fastest, or template-words' own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// The ceiling only: every streaming kernel's median, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates_median_ms: Option<BTreeMap<String, f64>>,
    /// The C reference only: the variant run and how it was built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

/// `bench template --stores`.
#[derive(Serialize, Deserialize)]
pub struct TemplateStores {
    /// "hot" or "cold".
    pub mode: String,
    pub size: u64,
    pub kernel: String,
    pub streaming: bool,
    /// Median.
    pub gbps: f64,
    pub stdev_pct: f64,
}
