//! `prezero bench template`: seed 004's memmap initialisation. 64-byte records
//! laid out like `struct page`, for 100 GiB of 4 KiB pages (26,214,400 records)
//! and in 2 MiB compound groups (1 head + 511 tails), initialised per field (as
//! `__init_single_page` does), from a template with plain copies, with
//! `template_fill` (closure form) and `template_fill_words` (declared words),
//! against the raw streaming-store ceiling: one fixed non-zero 64-byte value
//! streamed over the same bytes.

use std::time::Instant;

use serde_json::json;

use prezero::{PageKind, Region};

use super::Stats;

#[derive(clap::Args)]
pub struct Args {
    /// Records (64 bytes each); the default is 100 GiB of 4 KiB pages.
    #[arg(long, default_value_t = 26_214_400)]
    records: usize,
    /// Timed repetitions per method (after one verified warm-up).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// One JSON object per figure.
    #[arg(long)]
    json: bool,
}

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

#[derive(Clone, Copy, PartialEq)]
enum Method {
    PerField,
    TemplateCopy,
    TemplateStream,
    TemplateWords,
    Ceiling,
}

impl Method {
    const ALL: [Method; 5] = [
        Method::PerField,
        Method::TemplateCopy,
        Method::TemplateStream,
        Method::TemplateWords,
        Method::Ceiling,
    ];

    fn name(self) -> &'static str {
        match self {
            Method::PerField => "per-field",
            Method::TemplateCopy => "template-copy",
            Method::TemplateStream => "template-stream",
            Method::TemplateWords => "template-words",
            Method::Ceiling => "ceiling",
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
        Method::Ceiling => {
            prezero::template_fill_words(dst, &ceiling_record(), [], |_| []).expect("no offsets")
        }
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
        let want = if m == Method::Ceiling {
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

pub fn run(args: &Args) -> Result<(), String> {
    if args.reps == 0 || args.records == 0 {
        return Err("--reps and --records must be at least 1".into());
    }
    let bytes = args.records * 64;
    let mut region = Region::new(bytes, PageKind::Thp).map_err(|e| e.to_string())?;
    // First touch (a VM pays a host fault here), not part of any figure.
    region.as_mut_slice().fill(0xcd);
    // SAFETY: the region is 2 MiB aligned and at least `bytes` long; Page is
    // plain old data (any bit pattern is valid) of 64 bytes, align 64.
    let dst: &mut [Page] =
        unsafe { std::slice::from_raw_parts_mut(region.as_ptr().cast(), args.records) };
    for layout in [Layout::Pages4k, Layout::Groups2m] {
        let mut rows = Vec::new();
        for m in Method::ALL {
            // Start from garbage, so the verified warm-up proves the method wrote every field.
            dst.fill(uniform(0xcdcd_cdcd_cdcd_cdcd));
            run_method(m, layout, dst);
            verify(m, layout, dst)?;
            let mut ms = Vec::with_capacity(args.reps);
            for _ in 0..args.reps {
                let t = Instant::now();
                run_method(m, layout, dst);
                ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
            verify(m, layout, dst)?;
            let st = Stats::of(&ms);
            let gbps = bytes as f64 / (st.mean / 1e3) / 1e9;
            if args.json {
                println!(
                    "{}",
                    json!({"bench": "template", "layout": layout.name(), "method": m.name(), "records": args.records,
                           "ms": (st.mean * 100.0).round() / 100.0, "gbps": (gbps * 100.0).round() / 100.0,
                           "stdev_pct": (st.stdev_pct * 100.0).round() / 100.0, "median_ms": (st.median * 100.0).round() / 100.0})
                );
            }
            rows.push((m, st, gbps));
        }
        if !args.json {
            print_table(layout, args.records, &rows);
        }
    }
    Ok(())
}

fn print_table(layout: Layout, records: usize, rows: &[(Method, Stats, f64)]) {
    println!(
        "\n# bench template, layout {} ({} records of 64 bytes)",
        layout.name(),
        records
    );
    println!(
        "{:<16} {:>9} {:>8} {:>8} {:>12} {:>12}",
        "method", "ms", "+-%", "GB/s", "vs per-field", "vs ceiling"
    );
    let med = |m: Method| {
        rows.iter()
            .find(|r| r.0 == m)
            .map_or(f64::NAN, |r| r.1.median)
    };
    for (m, st, gbps) in rows {
        println!(
            "{:<16} {:>9.1} {:>7.1}% {:>8.1} {:>11.2}x {:>11.2}x",
            m.name(),
            st.mean,
            st.stdev_pct,
            gbps,
            med(Method::PerField) / st.median,
            st.median / med(Method::Ceiling)
        );
    }
    println!("(ratios compare medians: speed-up over per-field, time over the ceiling)");
}
