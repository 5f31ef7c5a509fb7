//! What `prezero calibrate` measured beside the choices it made: the figures a
//! profile file keeps for people and for `calibrate --check`. The library acts
//! on none of them, so a file without them (written by hand, or before
//! calibrate measured something) loads all the same, and an entry that cannot
//! be read is left out rather than refusing the file.

use std::collections::BTreeMap;

use serde_json::Value;

use super::json::{as_count, count, object};

/// Everything calibrate measured, as the profile file keeps it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Measured {
    /// `"microcode"`: the CPU's microcode revision, where `/proc/cpuinfo`
    /// gives one (`null` otherwise).
    pub microcode: Option<String>,
    /// `"kernel"`: the kernel release calibrate ran on.
    pub kernel_release: Option<String>,
    /// `"elision_knee"`: per temporal kernel, the smallest extent from which it
    /// keeps within 20% of streaming stores on cold memory (`None`: at no
    /// extent measured).
    pub elision_knee: BTreeMap<String, Option<usize>>,
    /// `"bounded_min_chunk"`: per kernel, the smallest `clear_bounded` chunk
    /// that keeps within 10% of a clear of the whole extent (`None`: none did).
    pub bounded_min_chunk: BTreeMap<String, Option<usize>>,
    /// `"threads"`: cold clears of one large extent, by number of threads.
    pub threads: Vec<ThreadFigure>,
    /// `"scrubber"`: streaming against temporal stores on cold 2 MiB.
    pub scrubber: Option<Scrubber>,
    /// `"figures"`: every clear measured (kernels by size, chunks, threads).
    pub figures: Vec<Figure>,
    /// `"template"`'s `"figures"`: every template fill measured. They share
    /// the template choice's section, so they are written only with one.
    pub template_figures: Vec<Figure>,
}

/// One figure: the median of a measurement's repetitions.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// `"mode"`: `"hot"` or `"cold"`.
    pub mode: String,
    /// `"size"`: bytes cleared or filled.
    pub size: usize,
    /// What was measured, by the name calibrate gave it: `"method"` (a kernel,
    /// or a kernel in chunks, or a number of threads) among the clears,
    /// `"kernel"` among the template fills.
    pub method: String,
    /// `"gbps_median"`: GB/s.
    pub gbps_median: f64,
    /// `"stdev_pct"`: the repetitions' standard deviation, in percent of their mean.
    pub stdev_pct: f64,
}

/// One entry of `"threads"`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThreadFigure {
    /// `"threads"`
    pub threads: usize,
    /// `"gbps"`: GB/s, the median.
    pub gbps: f64,
}

/// `"scrubber"`: whether the pool's scrubber should stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scrubber {
    /// `"streaming_gbps"`: the best streaming kernel, GB/s.
    pub streaming_gbps: f64,
    /// `"temporal_gbps"`: the best temporal kernel, GB/s.
    pub temporal_gbps: f64,
    /// `"streaming_wins"`
    pub streaming_wins: bool,
}

/// The key naming what a clear's figure measured.
const CLEAR_FIGURE_BY: &str = "method";
/// The key naming what a template fill's figure measured.
pub(super) const TEMPLATE_FIGURE_BY: &str = "kernel";

impl Measured {
    /// Reads what it can from a whole profile file.
    pub(super) fn read(file: &Value) -> Measured {
        let text = |k: &str| file.get(k).and_then(Value::as_str).map(str::to_owned);
        let sizes = |k: &str| -> BTreeMap<String, Option<usize>> {
            let Some(members) = file.get(k).and_then(Value::as_object) else {
                return BTreeMap::new();
            };
            members
                .iter()
                .filter_map(|(name, v)| match v {
                    Value::Null => Some((name.clone(), None)),
                    v => as_count(v).map(|n| (name.clone(), Some(n))),
                })
                .collect()
        };
        let threads = list(file.get("threads"))
            .iter()
            .filter_map(|t| {
                Some(ThreadFigure {
                    threads: as_count(t.get("threads")?)?,
                    gbps: t.get("gbps")?.as_f64()?,
                })
            })
            .collect();
        let scrubber = file.get("scrubber").and_then(|s| {
            Some(Scrubber {
                streaming_gbps: s.get("streaming_gbps")?.as_f64()?,
                temporal_gbps: s.get("temporal_gbps")?.as_f64()?,
                streaming_wins: s.get("streaming_wins")?.as_bool()?,
            })
        });
        Measured {
            microcode: text("microcode"),
            kernel_release: text("kernel"),
            elision_knee: sizes("elision_knee"),
            bounded_min_chunk: sizes("bounded_min_chunk"),
            threads,
            scrubber,
            figures: read_figures(file.get("figures"), CLEAR_FIGURE_BY),
            template_figures: read_figures(
                file.get("template").and_then(|t| t.get("figures")),
                TEMPLATE_FIGURE_BY,
            ),
        }
    }

    /// The members of the file's top level this holds (the template figures
    /// go in the template section: [`figures_json`]).
    pub(super) fn members(&self) -> Vec<(&'static str, Value)> {
        let text = |t: &Option<String>| t.clone().map_or(Value::Null, Value::String);
        let sizes = |m: &BTreeMap<String, Option<usize>>| {
            let members = m
                .iter()
                .map(|(name, n)| (name.as_str(), n.map_or(Value::Null, count)));
            object(members.collect())
        };
        let threads = self
            .threads
            .iter()
            .map(|t| object(vec![("threads", count(t.threads)), ("gbps", t.gbps.into())]))
            .collect();
        let scrubber = self.scrubber.map_or(Value::Null, |s| {
            object(vec![
                ("streaming_gbps", s.streaming_gbps.into()),
                ("temporal_gbps", s.temporal_gbps.into()),
                ("streaming_wins", s.streaming_wins.into()),
            ])
        });
        vec![
            ("microcode", text(&self.microcode)),
            ("kernel", text(&self.kernel_release)),
            ("elision_knee", sizes(&self.elision_knee)),
            ("bounded_min_chunk", sizes(&self.bounded_min_chunk)),
            ("threads", Value::Array(threads)),
            ("scrubber", scrubber),
            ("figures", figures_json(&self.figures, CLEAR_FIGURE_BY)),
        ]
    }
}

fn list(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn read_figures(v: Option<&Value>, by: &str) -> Vec<Figure> {
    list(v)
        .iter()
        .filter_map(|f| {
            Some(Figure {
                mode: f.get("mode")?.as_str()?.to_owned(),
                size: as_count(f.get("size")?)?,
                method: f.get(by)?.as_str()?.to_owned(),
                gbps_median: f.get("gbps_median")?.as_f64()?,
                stdev_pct: f.get("stdev_pct")?.as_f64()?,
            })
        })
        .collect()
}

/// A list of figures, what each measured under the key `by`.
pub(super) fn figures_json(figures: &[Figure], by: &str) -> Value {
    let figure = |f: &Figure| {
        object(vec![
            ("mode", f.mode.as_str().into()),
            ("size", count(f.size)),
            (by, f.method.as_str().into()),
            ("gbps_median", f.gbps_median.into()),
            ("stdev_pct", f.stdev_pct.into()),
        ])
    };
    Value::Array(figures.iter().map(figure).collect())
}
