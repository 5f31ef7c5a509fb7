//! The `struct page` model the bench fills: the 64-byte record, its head and
//! tail templates, the words that vary per record, what each record must
//! hold (for the checks), and the kernel's way of initialising one, a call
//! per field.

use prezero::Region;

/// A `struct page` stand-in: 8 words, 64 bytes.
#[repr(C, align(64))]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Page {
    /// Section, node and zone bits; PG_head on compound heads.
    flags: u64,
    /// `lru.next`, or on tails `compound_head` (head address | 1).
    pub(super) lru_next: u64,
    /// `lru.prev`, or on tails the folio order word.
    pub(super) lru_prev: u64,
    /// The pgmap pointer (or TAIL_MAPPING on tails).
    mapping: u64,
    /// The pfn.
    pub(super) index: u64,
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
pub(super) const ORDER_WORD: u64 = 9; // order of a 2 MiB folio
const COUNTS: u64 = 0xffff_ffff; // _mapcount = -1, _refcount = 0
pub(super) const START_PFN: u64 = 0x10_0000;
pub(super) const GROUP: usize = 512;
/// Offsets of the varying words: lru_next, lru_prev, index.
pub(super) const WORDS: [usize; 3] = [8, 16, 32];

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Layout {
    Pages4k,
    Groups2m,
}

impl Layout {
    pub(super) fn name(self) -> &'static str {
        match self {
            Layout::Pages4k => "4k",
            Layout::Groups2m => "2m-groups",
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
pub(super) fn expected(layout: Layout, base: usize, i: usize) -> Page {
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
pub(super) fn templates(layout: Layout) -> (Page, Page) {
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
pub(super) fn varying(layout: Layout, base: usize, i: usize) -> [u64; 3] {
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

/// Every record initialised as the kernel does it: a call per field.
pub(super) fn per_field(layout: Layout, dst: &mut [Page]) {
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

/// A record with every word `w`.
pub(super) fn uniform(w: u64) -> Page {
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
pub(super) fn ceiling_record() -> Page {
    uniform(0x5a5a_5a5a_5a5a_5a5a)
}

/// The records of `region` as `Page`s.
pub(super) fn pages(region: &mut Region, records: usize) -> &mut [Page] {
    assert!(region.len() >= records * 64);
    // SAFETY: the region is page aligned and at least records * 64 bytes long;
    // Page is plain old data (any bit pattern is valid) of 64 bytes, align 64.
    unsafe { std::slice::from_raw_parts_mut(region.as_ptr().cast(), records) }
}
