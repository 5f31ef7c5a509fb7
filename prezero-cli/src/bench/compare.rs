//! `prezero bench compare a.json b.json`: the ratio b/a for every row the two
//! `--json` outputs share, marking changes beyond the noise both measured.

use std::path::PathBuf;

use anyhow::Result;
use serde_json::Value;

use crate::rows::read_rows;
use crate::table::Table;

#[derive(clap::Args)]
pub struct Args {
    /// The baseline: lines of `prezero bench ... --json`.
    a: PathBuf,
    /// The run to compare against it.
    b: PathBuf,
}

/// Measured fields: what is compared, never part of a row's identity.
const MEASURES: [&str; 10] = [
    "gbps",
    "median_gbps",
    "stdev_pct",
    "ms",
    "median_ms",
    "p50_us",
    "p99_us",
    "max_us",
    "kernel",
    "scrubbed_bytes_during",
];

fn key(v: &Value) -> String {
    let mut parts: Vec<String> = v
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !MEASURES.contains(&k.as_str()))
        .map(|(k, v)| {
            format!(
                "{k}={}",
                v.as_str().map_or_else(|| v.to_string(), str::to_owned)
            )
        })
        .collect();
    parts.sort();
    parts.join(" ")
}

/// The figure to compare and whether higher is better.
fn figure(v: &Value) -> Option<(f64, bool)> {
    for (k, higher) in [
        ("gbps", true),
        ("ms", false),
        ("p99_us", false),
        ("slowdown_pct", false),
    ] {
        if let Some(x) = v[k].as_f64() {
            return Some((x, higher));
        }
    }
    None
}

pub fn run(args: &Args) -> Result<()> {
    let (a, b) = (read_rows(&args.a)?, read_rows(&args.b)?);
    let mut shown = 0;
    // The last column marks a change beyond the noise.
    let table = Table::new(" ")
        .left(70)
        .right(10)
        .right(10)
        .right(8)
        .gap("")
        .left(0);
    table.print(&["row", "a", "b", "b/a"]);
    for rb in &b {
        let k = key(rb);
        let Some(ra) = a.iter().find(|r| key(r) == k) else {
            continue;
        };
        let (Some((xa, higher)), Some((xb, _))) = (figure(ra), figure(rb)) else {
            continue;
        };
        let ratio = xb / xa.max(1e-12);
        // Beyond noise: more than twice the larger measured spread (or 5%).
        let noise = 2.0
            * ra["stdev_pct"]
                .as_f64()
                .unwrap_or(2.5)
                .max(rb["stdev_pct"].as_f64().unwrap_or(2.5))
            / 100.0;
        let mark = if (ratio - 1.0).abs() <= noise {
            ""
        } else if (ratio > 1.0) == higher {
            "  better"
        } else {
            "  WORSE"
        };
        table.print(&[
            k,
            format!("{xa:.2}"),
            format!("{xb:.2}"),
            format!("{ratio:.3}"),
            mark.to_string(),
        ]);
        shown += 1;
    }
    println!("{shown} rows in common");
    Ok(())
}
