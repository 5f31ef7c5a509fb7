//! What `prezero calibrate` measured beside the choices it made: the figures a
//! profile file keeps for people and for `calibrate --check`. The library acts
//! on none of them, so a file without them (written by hand, or before
//! calibrate measured something) loads all the same, and an entry that cannot
//! be read is left out rather than refusing the file.

use std::collections::BTreeMap;

use crate::json::Json;

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
    pub(super) fn read(file: &Json) -> Measured {
        let text = |k: &str| file.get(k).and_then(Json::as_str).map(str::to_owned);
        let sizes = |k: &str| -> BTreeMap<String, Option<usize>> {
            let members = file.get(k).and_then(Json::as_object).unwrap_or_default();
            members
                .iter()
                .filter_map(|(name, v)| match v {
                    Json::Null => Some((name.clone(), None)),
                    v => v.as_count().map(|n| (name.clone(), Some(n))),
                })
                .collect()
        };
        let threads = list(file.get("threads"))
            .iter()
            .filter_map(|t| {
                Some(ThreadFigure {
                    threads: t.get("threads")?.as_count()?,
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
    pub(super) fn members(&self) -> Vec<(String, Json)> {
        let text = |t: &Option<String>| t.clone().map_or(Json::Null, Json::Str);
        let sizes = |m: &BTreeMap<String, Option<usize>>| {
            Json::Obj(
                m.iter()
                    .map(|(name, n)| (name.clone(), n.map_or(Json::Null, count)))
                    .collect(),
            )
        };
        let threads = self
            .threads
            .iter()
            .map(|t| {
                Json::Obj(vec![
                    ("threads".into(), count(t.threads)),
                    ("gbps".into(), Json::Num(t.gbps)),
                ])
            })
            .collect();
        let scrubber = self.scrubber.map_or(Json::Null, |s| {
            Json::Obj(vec![
                ("streaming_gbps".into(), Json::Num(s.streaming_gbps)),
                ("temporal_gbps".into(), Json::Num(s.temporal_gbps)),
                ("streaming_wins".into(), Json::Bool(s.streaming_wins)),
            ])
        });
        vec![
            ("microcode".into(), text(&self.microcode)),
            ("kernel".into(), text(&self.kernel_release)),
            ("elision_knee".into(), sizes(&self.elision_knee)),
            ("bounded_min_chunk".into(), sizes(&self.bounded_min_chunk)),
            ("threads".into(), Json::Arr(threads)),
            ("scrubber".into(), scrubber),
            (
                "figures".into(),
                figures_json(&self.figures, CLEAR_FIGURE_BY),
            ),
        ]
    }
}

/// A count or byte count to write.
pub(super) fn count(n: usize) -> Json {
    Json::Int(n as u64)
}

fn list(v: Option<&Json>) -> &[Json] {
    v.and_then(Json::as_array).unwrap_or_default()
}

fn read_figures(v: Option<&Json>, by: &str) -> Vec<Figure> {
    list(v)
        .iter()
        .filter_map(|f| {
            Some(Figure {
                mode: f.get("mode")?.as_str()?.to_owned(),
                size: f.get("size")?.as_count()?,
                method: f.get(by)?.as_str()?.to_owned(),
                gbps_median: f.get("gbps_median")?.as_f64()?,
                stdev_pct: f.get("stdev_pct")?.as_f64()?,
            })
        })
        .collect()
}

/// A list of figures, what each measured under the key `by`.
pub(super) fn figures_json(figures: &[Figure], by: &str) -> Json {
    Json::Arr(
        figures
            .iter()
            .map(|f| {
                Json::Obj(vec![
                    ("mode".into(), Json::Str(f.mode.clone())),
                    ("size".into(), count(f.size)),
                    (by.into(), Json::Str(f.method.clone())),
                    ("gbps_median".into(), Json::Num(f.gbps_median)),
                    ("stdev_pct".into(), Json::Num(f.stdev_pct)),
                ])
            })
            .collect(),
    )
}
