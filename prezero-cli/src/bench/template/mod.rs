//! `prezero bench template`: Linux's ZONE_DEVICE memmap initialisation. 64-byte records
//! laid out like `struct page`, for 100 GiB of 4 KiB pages (26,214,400 records)
//! and in 2 MiB compound groups (1 head + 511 tails), initialised per field (as
//! `__init_single_page` does), from a template with plain copies, with
//! `template_fill` (closure form) and `template_fill_words` (declared words),
//! beside the shared C reference (template in registers, gcc -O2) and the
//! ceiling: the fastest whole-line streaming store of one fixed non-zero
//! record this CPU has, measured over every streaming kernel on the same bytes.
//!
//! `--stores` measures instead where streaming stores start to beat temporal
//! ones for `template_fill_words`, by size, hot and cold: what `calibrate`
//! records and the built-in choice is checked against.
//!
//! Here: the methods, their checks and the run; `model.rs`: the record, its
//! templates and what each record must hold; `c_reference.rs`: the C
//! reference; `stores.rs`: the store study.

mod c_reference;
mod model;
mod stores;

use std::time::Instant;

use anyhow::{bail, Result};
use prezero::{CopyKernel, PageKind, Region, Streamer};

use super::progress::Progress;
use crate::rows;
use crate::stats::{round2, Stats};
use crate::table::Table;
use crate::units::parse_sizes;
use model::{
    ceiling_record, expected, pages, per_field, templates, uniform, varying, Layout, Page, GROUP,
    WORDS,
};
use stores::print_stores;
pub(crate) use stores::{store_study, StoreFigure, STORE_SIZES};

#[derive(clap::Args)]
pub struct Args {
    /// Records (64 bytes each); the default is 100 GiB of 4 KiB pages.
    #[arg(long, default_value_t = 26_214_400)]
    records: usize,
    /// Timed repetitions per method (after one verified warm-up); medians
    /// are reported, and on a shared VM a run moves by 10-30%.
    #[arg(long, default_value_t = 9)]
    reps: usize,
    /// Only these layouts (4k, 2m-groups); default both.
    #[arg(long, value_delimiter = ',')]
    layout: Vec<String>,
    /// Only these methods (per-field, template-copy, template-stream,
    /// template-words, c-reference, ceiling); default all.
    #[arg(long, value_delimiter = ',')]
    method: Vec<String>,
    /// Measure streaming against temporal stores by size instead (hot and cold).
    #[arg(long)]
    stores: bool,
    /// Sizes for --stores.
    #[arg(long, value_delimiter = ',', default_value = STORE_SIZES)]
    sizes: Vec<String>,
    /// One JSON object per figure.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Method {
    PerField,
    TemplateCopy,
    TemplateStream,
    TemplateWords,
    CReference,
    /// One fixed non-zero record streamed by one streaming kernel.
    Ceiling(CopyKernel),
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::PerField => "per-field",
            Method::TemplateCopy => "template-copy",
            Method::TemplateStream => "template-stream",
            Method::TemplateWords => "template-words",
            Method::CReference => "c-reference",
            Method::Ceiling(_) => "ceiling",
        }
    }
}

fn run_method(m: Method, layout: Layout, dst: &mut [Page]) {
    let base = dst.as_ptr() as usize;
    let (head, tail) = templates(layout);
    let group = if layout == Layout::Groups2m {
        GROUP
    } else {
        usize::MAX
    };
    match m {
        Method::PerField => per_field(layout, dst),
        Method::TemplateCopy => {
            let (mut h, mut t) = (head, tail);
            for (i, p) in dst.iter_mut().enumerate() {
                let w = if i % group == 0 || layout == Layout::Pages4k {
                    &mut h
                } else {
                    &mut t
                };
                let v = varying(layout, base, i);
                w.lru_next = v[0];
                w.lru_prev = v[1];
                w.index = v[2];
                *p = *w;
            }
        }
        Method::TemplateStream => {
            prezero::template_fill_grouped(dst, group, &head, &tail, |i, _, w| {
                let v = varying(layout, base, i);
                w.lru_next = v[0];
                w.lru_prev = v[1];
                w.index = v[2];
            })
            .expect("group is non-zero")
        }
        Method::TemplateWords => {
            prezero::template_fill_words_grouped(dst, group, &head, &tail, WORDS, |i, _| {
                varying(layout, base, i)
            })
            .expect("offsets fit")
        }
        Method::CReference => c_reference::fill(layout, dst, &head, &tail),
        Method::Ceiling(k) => Streamer::new(k)
            .expect("only available kernels are measured")
            .fill_words(dst, &ceiling_record(), [], |_| [])
            .expect("no offsets"),
    }
}

/// Checks a sample of records field by field.
fn verify(m: Method, layout: Layout, dst: &[Page]) -> Result<()> {
    let base = dst.as_ptr() as usize;
    let n = dst.len();
    let samples = (0..n).step_by(9973).chain([
        n.saturating_sub(1),
        1.min(n.saturating_sub(1)),
        GROUP.min(n.saturating_sub(1)),
    ]);
    for i in samples.filter(|&i| i < n) {
        let want = if matches!(m, Method::Ceiling(_)) {
            ceiling_record()
        } else {
            expected(layout, base, i)
        };
        if dst[i] != want {
            bail!(
                "VERIFY FAILED: {} {} record {i}: got {:x?}, want {:x?}",
                layout.name(),
                m.name(),
                dst[i],
                want
            );
        }
    }
    Ok(())
}

pub fn run(args: &Args) -> Result<()> {
    if args.reps == 0 || args.records == 0 {
        bail!("--reps and --records must be at least 1");
    }
    if args.stores {
        let sizes = parse_sizes(&args.sizes)?;
        let figs = store_study(&sizes, args.reps)?;
        print_stores(&figs, args.json);
        return Ok(());
    }
    let layouts: Vec<Layout> = [Layout::Pages4k, Layout::Groups2m]
        .into_iter()
        .filter(|l| args.layout.is_empty() || args.layout.iter().any(|n| n == l.name()))
        .collect();
    for n in args.layout.iter().chain(&args.method) {
        let known = ["4k", "2m-groups"]
            .into_iter()
            .chain(ALL_METHODS.iter().map(|m| m.name()))
            .any(|k| k == n);
        if !known {
            bail!("unknown layout or method \"{n}\"");
        }
    }
    let c_variant = c_reference::variant();
    let methods = wanted_methods(args, &c_variant);
    let bytes = args.records * 64;
    let mut region = Region::new(bytes, PageKind::Thp)?;
    // First touch (a VM pays a host fault here), not part of any figure.
    region.as_mut_slice().fill(0xcd);
    let dst = pages(&mut region, args.records);
    let mut progress = Progress::new((layouts.len() * args.reps) as u64);
    for &layout in &layouts {
        let ms = measure(&methods, layout, dst, args.reps, &mut progress)?;
        let rows: Vec<Row> = methods
            .iter()
            .zip(&ms)
            .map(|(&m, s)| Row {
                method: m,
                stats: Stats::of(s),
            })
            .collect();
        let ceiling = rows
            .iter()
            .filter(|r| matches!(r.method, Method::Ceiling(_)))
            .min_by(|a, b| a.stats.median.total_cmp(&b.stats.median));
        let shown: Vec<&Row> = rows
            .iter()
            .filter(|r| !matches!(r.method, Method::Ceiling(_)))
            .chain(ceiling)
            .collect();
        let candidates: Vec<(&str, f64)> = rows
            .iter()
            .filter_map(|r| match r.method {
                Method::Ceiling(k) => Some((k.name(), r.stats.median)),
                _ => None,
            })
            .collect();
        if args.json {
            print_json(layout, args.records, &shown, &candidates, &c_variant);
        } else {
            print_table(layout, args.records, &shown, &candidates);
        }
    }
    progress.finish();
    Ok(())
}

/// The methods `--method` names (all by default), less the C reference where
/// it was not built (`c_variant` says why), with the ceilings this CPU has.
fn wanted_methods(args: &Args, c_variant: &Result<String, &'static str>) -> Vec<Method> {
    let wanted = |m: &str| args.method.is_empty() || args.method.iter().any(|n| n == m);
    let mut methods: Vec<Method> = ALL_METHODS
        .into_iter()
        .filter(|m| !matches!(m, Method::Ceiling(_)) && wanted(m.name()))
        .collect();
    match c_variant {
        Ok(v) if wanted("c-reference") => eprintln!("prezero: C reference: {v}"),
        Err(why) if wanted("c-reference") => {
            eprintln!("prezero: no c-reference row: {why}");
            methods.retain(|&m| m != Method::CReference);
        }
        _ => {}
    }
    if wanted("ceiling") {
        methods.extend(
            CopyKernel::ALL
                .into_iter()
                .filter(|k| k.is_streaming() && k.is_available())
                .map(Method::Ceiling),
        );
    }
    methods
}

/// Each method's times in ms on `layout`, `reps` of them, each run verified.
fn measure(
    methods: &[Method],
    layout: Layout,
    dst: &mut [Page],
    reps: usize,
    progress: &mut Progress,
) -> Result<Vec<Vec<f64>>> {
    // Start from garbage, so each verified warm-up proves the method wrote every field.
    for &m in methods {
        dst.fill(uniform(0xcdcd_cdcd_cdcd_cdcd));
        run_method(m, layout, dst);
        verify(m, layout, dst)?;
    }
    // Every repetition runs each method once, in a new order: every method
    // meets the same drift of this shared machine, and no method always
    // follows the same one (a run after the slow `movnti` ceiling was up
    // to 1.5x slower on Zen 4, whatever ran).
    let mut ms = vec![Vec::with_capacity(reps); methods.len()];
    let mut order: Vec<usize> = (0..methods.len()).collect();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..reps {
        progress.step(layout.name().to_string());
        shuffle(&mut order, &mut seed);
        for &i in &order {
            let t = Instant::now();
            run_method(methods[i], layout, dst);
            ms[i].push(t.elapsed().as_secs_f64() * 1e3);
            verify(methods[i], layout, dst)?;
        }
    }
    Ok(ms)
}

/// One JSON row per shown method on `layout`: the ceiling's with every
/// candidate's median, the C reference's with its variant.
fn print_json(
    layout: Layout,
    records: usize,
    shown: &[&Row],
    candidates: &[(&str, f64)],
    c_variant: &Result<String, &'static str>,
) {
    let bytes = records * 64;
    for r in shown {
        let mut row = rows::Template {
            layout: layout.name().to_string(),
            method: r.method.name().to_string(),
            records: records as u64,
            ms: round2(r.stats.mean),
            median_ms: round2(r.stats.median),
            gbps: round2(bytes as f64 / (r.stats.median / 1e3) / 1e9),
            stdev_pct: round2(r.stats.stdev_pct),
            kernel: None,
            candidates_median_ms: None,
            variant: None,
        };
        match r.method {
            Method::Ceiling(k) => {
                row.kernel = Some(k.name().to_string());
                row.candidates_median_ms = Some(
                    (candidates.iter())
                        .map(|(k, m)| (k.to_string(), round2(*m)))
                        .collect(),
                );
            }
            Method::CReference => {
                row.variant = Some(c_variant.clone().unwrap_or_default());
            }
            Method::TemplateWords => {
                row.kernel = Some(Streamer::for_bytes(bytes).kernel().name().to_string());
            }
            _ => {}
        }
        rows::Row::Template(row).print();
    }
}

/// A Fisher-Yates shuffle driven by xorshift: a fixed sequence of orders.
fn shuffle(v: &mut [usize], seed: &mut u64) {
    for i in (1..v.len()).rev() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        v.swap(i, (*seed % (i as u64 + 1)) as usize);
    }
}

const ALL_METHODS: [Method; 6] = [
    Method::PerField,
    Method::TemplateCopy,
    Method::TemplateStream,
    Method::TemplateWords,
    Method::CReference,
    // A placeholder for the name filter: the ceiling is measured per kernel.
    Method::Ceiling(CopyKernel::Portable),
];

struct Row {
    method: Method,
    stats: Stats,
}

fn print_table(layout: Layout, records: usize, rows: &[&Row], candidates: &[(&str, f64)]) {
    println!(
        "\n# bench template, layout {} ({} records of 64 bytes, {})",
        layout.name(),
        records,
        Streamer::for_bytes(records * 64).kernel().name()
    );
    let table = Table::new(" ")
        .left(22)
        .right(9)
        .right(7)
        .right(8)
        .right(12)
        .right(8)
        .right(11);
    table.print(&[
        "method",
        "median ms",
        "+-%",
        "GB/s",
        "vs per-field",
        "vs C",
        "vs ceiling",
    ]);
    let med = |f: &dyn Fn(Method) -> bool| {
        rows.iter()
            .find(|r| f(r.method))
            .map_or(f64::NAN, |r| r.stats.median)
    };
    let per_field = med(&|m| m == Method::PerField);
    let c = med(&|m| m == Method::CReference);
    let ceiling = med(&|m| matches!(m, Method::Ceiling(_)));
    let ratio = |x: f64| {
        if x.is_nan() {
            "-".to_string()
        } else {
            format!("{x:.2}x")
        }
    };
    for r in rows {
        let name = match r.method {
            Method::Ceiling(k) => format!("ceiling ({})", k.name()),
            m => m.name().to_string(),
        };
        let st = r.stats;
        table.print(&[
            name,
            format!("{:.1}", st.median),
            format!("{:.1}%", st.stdev_pct),
            format!("{:.1}", (records * 64) as f64 / (st.median / 1e3) / 1e9),
            ratio(per_field / st.median),
            ratio(st.median / c),
            ratio(st.median / ceiling),
        ]);
    }
    let cands: Vec<String> = candidates
        .iter()
        .map(|(k, m)| format!("{k} {m:.1}"))
        .collect();
    println!(
        "(medians; speed-up over per-field, time over the C reference and the ceiling; ceiling candidates, ms: {})",
        cands.join(", ")
    );
}
