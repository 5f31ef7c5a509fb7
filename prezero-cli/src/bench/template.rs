//! `prezero bench template`: seed 004's memmap initialisation. 64-byte records
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

use std::time::Instant;

use prezero::{CopyKernel, PageKind, Region, Streamer};

use super::progress::Progress;
use super::rows;
use crate::stats::{gbps, round2, Stats};
use crate::table::Table;
use crate::units::{fmt_size, parse_sizes};

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

/// The sizes of the store study: from well inside L2 to far past any LLC.
pub(crate) const STORE_SIZES: &str = "16K,64K,256K,1M,4M,16M,64M,256M";

/// A `struct page` stand-in: 8 words, 64 bytes.
#[repr(C, align(64))]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Page {
    /// Section, node and zone bits; PG_head on compound heads.
    flags: u64,
    /// `lru.next`, or on tails `compound_head` (head address | 1).
    lru_next: u64,
    /// `lru.prev`, or on tails the folio order word.
    lru_prev: u64,
    /// The pgmap pointer (or TAIL_MAPPING on tails).
    mapping: u64,
    /// The pfn.
    index: u64,
    /// `zone_device_data`.
    private: u64,
    /// `_mapcount` (-1) and `_refcount` (0), two 32-bit halves.
    counts: u64,
    /// `memcg_data`.
    memcg: u64,
}

// SAFETY: eight u64s, no padding, any bit pattern valid.
unsafe impl prezero::Record for Page {}

const FLAGS: u64 = (3 << 62) | (1 << 56) | (4 << 52); // section | node | zone (ZONE_DEVICE)
const PG_HEAD: u64 = 1 << 6;
const PGMAP: u64 = 0xffff_8880_1234_5000;
const TAIL_MAPPING: u64 = 0xdead_0000_0000_0400;
const ORDER_WORD: u64 = 9; // order of a 2 MiB folio
const COUNTS: u64 = 0xffff_ffff; // _mapcount = -1, _refcount = 0
const START_PFN: u64 = 0x10_0000;
const GROUP: usize = 512;
/// Offsets of the varying words: lru_next, lru_prev, index.
const WORDS: [usize; 3] = [8, 16, 32];

#[derive(Clone, Copy, PartialEq)]
enum Layout {
    Pages4k,
    Groups2m,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::Pages4k => "4k",
            Layout::Groups2m => "2m-groups",
        }
    }
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

fn addr_of(base: usize, i: usize) -> u64 {
    (base + i * 64) as u64
}

fn is_head(layout: Layout, i: usize) -> bool {
    layout == Layout::Groups2m && i.is_multiple_of(GROUP)
}

fn is_tail(layout: Layout, i: usize) -> bool {
    layout == Layout::Groups2m && !i.is_multiple_of(GROUP)
}

/// What the slow path produces for record `i` of an array at `base`.
fn expected(layout: Layout, base: usize, i: usize) -> Page {
    let me = addr_of(base, i);
    let (t, w) = templates(layout);
    let mut p = if is_tail(layout, i) { w } else { t };
    let v = varying(layout, base, i);
    p.lru_next = v[0];
    p.lru_prev = v[1];
    p.index = v[2];
    debug_assert!(is_tail(layout, i) || v[0] == me + 8);
    p
}

/// The head (or only) template and the tail template.
fn templates(layout: Layout) -> (Page, Page) {
    let head = Page {
        flags: FLAGS
            | if layout == Layout::Groups2m {
                PG_HEAD
            } else {
                0
            },
        lru_next: 0,
        lru_prev: 0,
        mapping: PGMAP,
        index: 0,
        private: 0,
        counts: COUNTS,
        memcg: 0,
    };
    if layout == Layout::Pages4k {
        return (head, head);
    }
    let tail = Page {
        flags: FLAGS,
        lru_prev: ORDER_WORD,
        mapping: TAIL_MAPPING,
        ..head
    };
    (head, tail)
}

/// The three varying words of record `i`: lru.next, lru.prev, pfn.
#[inline(always)]
fn varying(layout: Layout, base: usize, i: usize) -> [u64; 3] {
    let pfn = START_PFN + i as u64;
    if is_tail(layout, i) {
        let head = addr_of(base, i - i % GROUP);
        [head | 1, ORDER_WORD, pfn]
    } else {
        let lru = addr_of(base, i) + 8;
        [lru, lru, pfn]
    }
}

// One non-inlined call per field, as __init_single_page and friends do.
#[inline(never)]
fn set_page_links(p: &mut Page, flags: u64) {
    p.flags = flags;
}
#[inline(never)]
fn init_page_count(p: &mut Page) {
    // _refcount (the upper half) = 0.
    p.counts &= 0xffff_ffff;
}
#[inline(never)]
fn page_mapcount_reset(p: &mut Page) {
    p.counts = (p.counts & !0xffff_ffff) | 0xffff_ffff;
}
#[inline(never)]
fn init_list_head(p: &mut Page, lru: u64) {
    p.lru_next = lru;
    p.lru_prev = lru;
}
#[inline(never)]
fn set_compound_head(p: &mut Page, head: u64) {
    p.lru_next = head | 1;
    p.lru_prev = ORDER_WORD;
}
#[inline(never)]
fn set_mapping(p: &mut Page, m: u64) {
    p.mapping = m;
}
#[inline(never)]
fn set_page_index(p: &mut Page, pfn: u64) {
    p.index = pfn;
}
#[inline(never)]
fn set_private(p: &mut Page, v: u64) {
    p.private = v;
}
#[inline(never)]
fn set_memcg(p: &mut Page, v: u64) {
    p.memcg = v;
}

fn per_field(layout: Layout, dst: &mut [Page]) {
    let base = dst.as_ptr() as usize;
    for (i, p) in dst.iter_mut().enumerate() {
        let v = varying(layout, base, i);
        let flags = FLAGS | if is_head(layout, i) { PG_HEAD } else { 0 };
        set_page_links(p, flags);
        init_page_count(p);
        page_mapcount_reset(p);
        if is_tail(layout, i) {
            set_compound_head(p, v[0] & !1);
            set_mapping(p, TAIL_MAPPING);
        } else {
            init_list_head(p, v[0]);
            set_mapping(p, PGMAP);
        }
        set_page_index(p, v[2]);
        set_private(p, 0);
        set_memcg(p, 0);
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

/// The shared C reference, adapted to this bench's record
/// (`src/bench/c/template_reference.c`, built by build.rs with gcc -O2).
mod c_reference {
    use super::{Layout, Page, ORDER_WORD, START_PFN};

    #[cfg(template_reference)]
    extern "C" {
        fn pz_ref_fill_avx2(
            dst: *mut Page,
            n: usize,
            head: *const Page,
            tail: *const Page,
            grouped: libc::c_int,
            start_pfn: u64,
            order_word: u64,
        );
        fn pz_ref_fill_sse2(
            dst: *mut Page,
            n: usize,
            head: *const Page,
            tail: *const Page,
            grouped: libc::c_int,
            start_pfn: u64,
            order_word: u64,
        );
    }

    /// The variant this CPU (as `PREZERO_CPU` leaves it) runs and how it was
    /// built, or why there is none.
    pub fn variant() -> Result<String, String> {
        let built = env!("PREZERO_TEMPLATE_REFERENCE");
        if !cfg!(template_reference) {
            return Err(built.to_string());
        }
        let f = &prezero::cpu().features;
        if f.avx2 {
            Ok(format!("avx2, {built}"))
        } else if f.sse2 {
            Ok(format!("sse2, {built}"))
        } else {
            Err("the CPU in use has neither AVX2 nor SSE2".into())
        }
    }

    /// Fills `dst` as template-words does. pre: `variant()` is Ok.
    #[cfg_attr(not(template_reference), allow(unused_variables))]
    pub fn fill(layout: Layout, dst: &mut [Page], head: &Page, tail: &Page) {
        #[cfg(template_reference)]
        {
            let grouped = libc::c_int::from(layout == Layout::Groups2m);
            let f = if prezero::cpu().features.avx2 {
                pz_ref_fill_avx2
            } else {
                pz_ref_fill_sse2
            };
            // SAFETY: dst holds dst.len() 64-byte records, 64-byte aligned (Page's
            // alignment), as the streaming stores need; head and tail are
            // 64 bytes each; the CPU runs the variant (checked by `variant`).
            unsafe {
                f(
                    dst.as_mut_ptr(),
                    dst.len(),
                    head,
                    tail,
                    grouped,
                    START_PFN,
                    ORDER_WORD,
                )
            };
        }
        #[cfg(not(template_reference))]
        unreachable!("the C reference is only measured where it was built");
    }
}

/// A record with every word `w`.
fn uniform(w: u64) -> Page {
    Page {
        flags: w,
        lru_next: w,
        lru_prev: w,
        mapping: w,
        index: w,
        private: w,
        counts: w,
        memcg: w,
    }
}

/// The ceiling's record: one fixed non-zero value (zeros store faster on some CPUs).
fn ceiling_record() -> Page {
    uniform(0x5a5a_5a5a_5a5a_5a5a)
}

/// Checks a sample of records field by field.
fn verify(m: Method, layout: Layout, dst: &[Page]) -> Result<(), String> {
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
            return Err(format!(
                "VERIFY FAILED: {} {} record {i}: got {:x?}, want {:x?}",
                layout.name(),
                m.name(),
                dst[i],
                want
            ));
        }
    }
    Ok(())
}

/// The records of `region` as `Page`s.
fn pages(region: &mut Region, records: usize) -> &mut [Page] {
    assert!(region.len() >= records * 64);
    // SAFETY: the region is page aligned and at least records * 64 bytes long;
    // Page is plain old data (any bit pattern is valid) of 64 bytes, align 64.
    unsafe { std::slice::from_raw_parts_mut(region.as_ptr().cast(), records) }
}

pub fn run(args: &Args) -> Result<(), String> {
    if args.reps == 0 || args.records == 0 {
        return Err("--reps and --records must be at least 1".into());
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
            return Err(format!("unknown layout or method \"{n}\""));
        }
    }
    let wanted = |m: &str| args.method.is_empty() || args.method.iter().any(|n| n == m);
    let mut methods: Vec<Method> = ALL_METHODS
        .into_iter()
        .filter(|m| !matches!(m, Method::Ceiling(_)) && wanted(m.name()))
        .collect();
    let c_variant = c_reference::variant();
    match &c_variant {
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
    let bytes = args.records * 64;
    let mut region = Region::new(bytes, PageKind::Thp).map_err(|e| e.to_string())?;
    // First touch (a VM pays a host fault here), not part of any figure.
    region.as_mut_slice().fill(0xcd);
    let dst = pages(&mut region, args.records);
    let mut progress = Progress::new((layouts.len() * args.reps) as u64);
    for &layout in &layouts {
        // Start from garbage, so each verified warm-up proves the method wrote every field.
        for &m in &methods {
            dst.fill(uniform(0xcdcd_cdcd_cdcd_cdcd));
            run_method(m, layout, dst);
            verify(m, layout, dst)?;
        }
        // Every repetition runs each method once, in a new order: every method
        // meets the same drift of this shared machine, and no method always
        // follows the same one (a run after the slow `movnti` ceiling was up
        // to 1.5x slower on Zen 4, whatever ran).
        let mut ms = vec![Vec::with_capacity(args.reps); methods.len()];
        let mut order: Vec<usize> = (0..methods.len()).collect();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..args.reps {
            progress.step(layout.name().to_string());
            shuffle(&mut order, &mut seed);
            for &i in &order {
                let t = Instant::now();
                run_method(methods[i], layout, dst);
                ms[i].push(t.elapsed().as_secs_f64() * 1e3);
                verify(methods[i], layout, dst)?;
            }
        }
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
            for r in &shown {
                let mut row = rows::Template {
                    layout: layout.name().to_string(),
                    method: r.method.name().to_string(),
                    records: args.records as u64,
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
        } else {
            print_table(layout, args.records, &shown, &candidates);
        }
    }
    progress.finish();
    Ok(())
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

/// One figure of the store study: `template_fill_words` with one kernel.
#[derive(Debug, Clone)]
pub(crate) struct StoreFigure {
    pub mode: &'static str,
    pub size: usize,
    pub kernel: CopyKernel,
    /// GB/s.
    pub stats: Stats,
}

/// The most bytes filled per timed repetition (small sizes are repeated).
const STORE_REP_BYTES: usize = 256 << 20;

/// `template_fill_words` (the bench's 4k records) with every template kernel
/// this CPU has, at every size, hot (one buffer filled again and again) and
/// cold (consecutive slices of a region of 8x LLC, as `bench clear` does).
pub(crate) fn store_study(sizes: &[usize], reps: usize) -> Result<Vec<StoreFigure>, String> {
    if reps == 0 || sizes.iter().any(|&s| s < 64 || !s.is_multiple_of(64)) {
        return Err(
            "--reps must be at least 1 and every size a multiple of 64 bytes (whole records)"
                .into(),
        );
    }
    let kernels: Vec<CopyKernel> = CopyKernel::ALL
        .into_iter()
        .filter(|k| k.is_available())
        .collect();
    let max = sizes.iter().copied().max().unwrap_or(64);
    let cold_len = (8 * prezero::cpu().llc()).max(4 * max);
    let mut cold = Region::new(cold_len, PageKind::Thp).map_err(|e| e.to_string())?;
    cold.as_mut_slice().fill(0xcd);
    let mut progress = Progress::new((2 * sizes.len() * reps) as u64);
    let mut figs = Vec::new();
    for mode in ["hot", "cold"] {
        let mut cursor = 0;
        for &size in sizes {
            let records = size / 64;
            let mut hot = Region::new(size, PageKind::Thp).map_err(|e| e.to_string())?;
            hot.as_mut_slice().fill(0xcd);
            let mut samples = vec![Vec::with_capacity(reps); kernels.len()];
            for rep in 0..reps {
                progress.step(format!("{mode} {}", fmt_size(size)));
                for j in 0..kernels.len() {
                    let i = (j + rep) % kernels.len();
                    let s = Streamer::new(kernels[i]).expect("available");
                    let inner = (STORE_REP_BYTES / size).max(1);
                    let g = if mode == "hot" {
                        let dst = pages(&mut hot, records);
                        fill_words(s, dst);
                        let t = Instant::now();
                        for _ in 0..inner {
                            fill_words(s, dst);
                        }
                        let g = gbps(records * 64 * inner, t.elapsed());
                        verify(Method::TemplateWords, Layout::Pages4k, dst)?;
                        g
                    } else {
                        let slices = cold_len / size;
                        let inner = inner.min(slices - 1);
                        let t = Instant::now();
                        for _ in 0..inner {
                            let at = cursor % slices * size;
                            // SAFETY: slice `at` lies inside the region (at + size <= cold_len).
                            let dst: &mut [Page] = unsafe {
                                std::slice::from_raw_parts_mut(
                                    cold.as_ptr().add(at).cast(),
                                    records,
                                )
                            };
                            fill_words(s, dst);
                            cursor += 1;
                        }
                        let g = gbps(records * 64 * inner, t.elapsed());
                        let at = (cursor - 1) % slices * size;
                        // SAFETY: as above.
                        let last: &[Page] = unsafe {
                            std::slice::from_raw_parts(cold.as_ptr().add(at).cast(), records)
                        };
                        verify(Method::TemplateWords, Layout::Pages4k, last)?;
                        g
                    };
                    samples[i].push(g);
                }
            }
            for (&kernel, g) in kernels.iter().zip(&samples) {
                figs.push(StoreFigure {
                    mode,
                    size,
                    kernel,
                    stats: Stats::of(g),
                });
            }
        }
    }
    progress.finish();
    Ok(figs)
}

fn fill_words(s: Streamer, dst: &mut [Page]) {
    let base = dst.as_ptr() as usize;
    let (head, _) = templates(Layout::Pages4k);
    s.fill_words(dst, &head, WORDS, |i| varying(Layout::Pages4k, base, i))
        .expect("offsets fit");
}

fn print_stores(figs: &[StoreFigure], json: bool) {
    if json {
        for f in figs {
            rows::Row::TemplateStores(rows::TemplateStores {
                mode: f.mode.to_string(),
                size: f.size as u64,
                kernel: f.kernel.name().to_string(),
                streaming: f.kernel.is_streaming(),
                gbps: round2(f.stats.median),
                stdev_pct: round2(f.stats.stdev_pct),
            })
            .print();
        }
        return;
    }
    let kernels: Vec<CopyKernel> = {
        let mut v: Vec<CopyKernel> = figs.iter().map(|f| f.kernel).collect();
        v.dedup();
        v.truncate(
            figs.iter()
                .position(|f| f.size != figs[0].size)
                .unwrap_or(v.len()),
        );
        v
    };
    // Size, a column per kernel, and the kernel Auto picks.
    let table = kernels
        .iter()
        .fold(Table::new(" ").right(6), |t, _| t.right(10))
        .right(10);
    for mode in ["hot", "cold"] {
        println!("\n# template_fill_words, {mode}, GB/s (median), by kernel");
        let head: Vec<&str> = std::iter::once("size")
            .chain(kernels.iter().map(|k| k.name()))
            .chain(["auto"])
            .collect();
        table.print(&head);
        let mut sizes: Vec<usize> = figs.iter().map(|f| f.size).collect();
        sizes.sort_unstable();
        sizes.dedup();
        for size in sizes {
            let medians = kernels.iter().map(|k| {
                let g = figs
                    .iter()
                    .find(|f| f.mode == mode && f.size == size && f.kernel == *k)
                    .map_or(f64::NAN, |f| f.stats.median);
                format!("{g:.1}")
            });
            let row: Vec<String> = std::iter::once(fmt_size(size))
                .chain(medians)
                .chain([Streamer::for_bytes(size).kernel().name().to_string()])
                .collect();
            table.print(&row);
        }
    }
    let from = prezero::template::stream_from();
    println!(
        "(auto streams from {}; `prezero calibrate` measures where and records it)",
        if from == usize::MAX {
            "no size".to_string()
        } else {
            fmt_size(from)
        }
    );
}
