//! `pz_template_fill`, `pz_template_fill_grouped` and
//! `pz_template_fill_words`: records written exactly as a model of each call
//! writes them (working copies that keep their changes; words at their
//! offsets, the later of two at one offset winning), or the call refused
//! with nothing written: a record size of 0, a count whose product with it
//! overflows, a group of 0, NULL or overlapping templates, offsets or words
//! out of their record or too many of them.

use std::ffi::{c_int, c_void};

use arbitrary::Arbitrary;
use prezero_capi as ffi;
use prezero_testkit::Guarded;

use super::{assert_bytes, succeeded, Buffers};

/// One fill into the destination buffer.
#[derive(Arbitrary, Debug)]
pub struct Fill {
    /// Where the records start in the destination buffer (modulo its length).
    dst: u32,
    count: Count,
    elem: Elem,
    head: At,
    tail: At,
    form: Form,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Count {
    /// As many records as fit after `dst`, modulo one more.
    Fits(u32),
    /// So many that the bytes overflow (or, for 1-byte records, pass `isize::MAX`).
    Overflow(u32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Elem {
    Small(u8),
    /// Modulo the template buffers' size plus one.
    Large(u16),
    /// Past `isize::MAX`: refused.
    Huge(u8),
}

/// Where a template (or the offsets) is.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum At {
    /// Its own buffer, ending at the guard page.
    Own,
    /// In the destination's buffer at this offset (overlapping the records or not).
    InDst(u32),
    Null,
}

#[derive(Arbitrary, Debug)]
enum Form {
    /// `pz_template_fill` from the head template, updated or not.
    Plain {
        update: bool,
    },
    Grouped {
        group_len: usize,
        update: bool,
    },
    Words {
        group_len: usize,
        nwords: u8,
        offsets: Vec<Offset>,
        offsets_at: At,
        produce: bool,
    },
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Offset {
    Near(u16),
    Far(usize),
}

impl Offset {
    fn value(self) -> usize {
        match self {
            Offset::Near(o) => o.into(),
            Offset::Far(o) => o,
        }
    }
}

/// What the callbacks are told: the record size, and the next index due.
struct Ctx {
    elem: usize,
    group_len: usize,
    next: usize,
}

impl Ctx {
    fn step(&mut self, i: usize, is_head: bool) {
        assert_eq!(i, self.next, "records out of order");
        assert_eq!(
            is_head,
            i.is_multiple_of(self.group_len),
            "record {i}: head or tail?"
        );
        self.next += 1;
    }
}

/// The model's change to a working copy before record `i`.
fn touch(i: usize, w: &mut [u8]) {
    let at = i % w.len();
    w[at] = w[at].wrapping_mul(3).wrapping_add(i as u8);
}

/// The model's word `k` of record `i`.
fn word(i: usize, k: usize, is_head: bool) -> u64 {
    let x = (i as u64) << 8 | (k as u64) << 1 | u64::from(is_head);
    x.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5A5A_5A5A_5A5A_5A5A
}

unsafe extern "C" fn update(i: usize, work: *mut c_void, ctx: *mut c_void) {
    // SAFETY: ctx is the call's Ctx, work its working copy of `elem` bytes.
    unsafe {
        let c = &mut *ctx.cast::<Ctx>();
        c.step(i, true);
        touch(i, std::slice::from_raw_parts_mut(work.cast(), c.elem));
    }
}

unsafe extern "C" fn update_grouped(i: usize, is_head: c_int, work: *mut c_void, ctx: *mut c_void) {
    // SAFETY: as update.
    unsafe {
        let c = &mut *ctx.cast::<Ctx>();
        c.step(i, is_head != 0);
        touch(i, std::slice::from_raw_parts_mut(work.cast(), c.elem));
    }
}

unsafe extern "C" fn produce(i: usize, is_head: c_int, words: *mut u64, ctx: *mut c_void) {
    // SAFETY: ctx is the call's Ctx; `words` holds the call's nwords words,
    // which Ctx::elem carries here.
    unsafe {
        let c = &mut *ctx.cast::<Ctx>();
        c.step(i, is_head != 0);
        for k in 0..c.elem {
            words.add(k).write(word(i, k, is_head != 0));
        }
    }
}

/// `(ptr, len)` of a template of `elem` bytes at `at`: in its own buffer it
/// ends at the guard page.
fn place(at: At, own: &Guarded, dst: &Guarded, elem: usize) -> (*const u8, Option<usize>) {
    match at {
        At::InDst(o) if elem <= dst.usable() => {
            let o = o as usize % (dst.usable() - elem + 1);
            // SAFETY: o + elem <= dst.usable().
            (unsafe { dst.ptr().add(o) }, Some(o))
        }
        At::Null => (std::ptr::null(), None),
        // SAFETY: own.usable() - elem.min(own.usable()) <= own.usable().
        _ => (
            unsafe { own.ptr().add(own.usable() - elem.min(own.usable())) },
            None,
        ),
    }
}

fn overlaps(a: usize, a_len: usize, b: usize, b_len: usize) -> bool {
    a_len > 0 && b_len > 0 && a < b + b_len && b < a + a_len
}

impl Fill {
    pub fn run(self, b: &mut Buffers) {
        let elem = match self.elem {
            Elem::Small(n) => n.into(),
            Elem::Large(n) => n as usize % (b.head.usable() + 1),
            Elem::Huge(n) => 1 << 63 | usize::from(n),
        };
        let off = self.dst as usize % (b.dst.usable() + 1);
        let room = b.dst.usable() - off;
        let count = match self.count {
            Count::Fits(n) if elem > 0 && elem <= room => n as usize % (room / elem + 1),
            Count::Fits(_) => 0,
            Count::Overflow(n) => (usize::MAX / elem.max(1)).saturating_add(1 + n as usize),
        };
        let total = count.checked_mul(elem);
        // SAFETY: off <= the buffer's length.
        let dst = unsafe { b.dst.ptr().add(off) };
        let (head, head_in) = place(self.head, &b.head, &b.dst, elem);
        let (tail, tail_in) = place(self.tail, &b.tail, &b.dst, elem);
        // Offsets are size_t: aligned, also in the destination's buffer.
        let offsets: Vec<usize> = match &self.form {
            Form::Words {
                nwords, offsets, ..
            } => (0..usize::from(*nwords).min(8))
                .map(|k| offsets.get(k).map_or(0, |o| o.value()))
                .collect(),
            _ => Vec::new(),
        };
        let offsets_len = offsets.len() * 8;
        let (offs, offs_in) = match &self.form {
            Form::Words { offsets_at, .. } => {
                let (p, o) = place(*offsets_at, &b.words, &b.dst, offsets_len);
                let o = o.map(|o| o / 8 * 8);
                // SAFETY: aligned down inside the buffer, or the words buffer.
                let p = o.map_or(p, |o| unsafe { b.dst.ptr().add(o) });
                if !p.is_null() {
                    // SAFETY: p holds offsets_len bytes, aligned for usize.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            offsets.as_ptr(),
                            p.cast_mut().cast(),
                            offsets.len(),
                        )
                    };
                }
                (p.cast::<usize>(), o)
            }
            _ => (std::ptr::null(), None),
        };
        let before = b.dst.bytes().to_vec();
        let read = |p: *const u8, inside: Option<usize>, own: &Guarded| -> Vec<u8> {
            if p.is_null() || elem > own.usable().max(b.dst.usable()) {
                return Vec::new();
            }
            match inside {
                Some(o) => before[o..o + elem].to_vec(),
                None => own.bytes()[own.usable() - elem.min(own.usable())..].to_vec(),
            }
        };
        let head_bytes = read(head, head_in, &b.head);
        let tail_bytes = read(tail, tail_in, &b.tail);

        // What the header says is refused.
        let records = total.filter(|&t| t <= isize::MAX as usize);
        let clash = |inside: Option<usize>, len: usize| {
            inside.is_some_and(|o| overlaps(off, records.unwrap_or(0), o, len))
        };
        let mut refused = elem == 0 || records.is_none() || elem > isize::MAX as usize;
        refused |= head.is_null() || clash(head_in, elem);
        // The callbacks' context: the working copy's bytes (the words' count
        // for produce) and the group, set before any pointer to it is made.
        let (ctx_elem, group) = match &self.form {
            Form::Plain { .. } => (elem, 1),
            Form::Grouped { group_len, .. } => (elem, *group_len),
            Form::Words {
                group_len, nwords, ..
            } => (usize::from(*nwords), *group_len),
        };
        let mut ctx = Ctx {
            elem: ctx_elem,
            group_len: group.max(1),
            next: 0,
        };
        // Whether each record calls back.
        let calls_back = match &self.form {
            Form::Plain { update } | Form::Grouped { update, .. } => *update,
            Form::Words {
                nwords, produce, ..
            } => *produce && *nwords > 0,
        };
        let ctx_ptr = std::ptr::from_mut(&mut ctx).cast::<c_void>();
        let (rc, model): (c_int, Box<dyn Fn(usize) -> Vec<u8>>);
        // SAFETY (every call): each pointer is readable or writable for what
        // the call reads or writes of it, or is one the call must refuse.
        match self.form {
            Form::Plain { update: u } => {
                rc = unsafe {
                    ffi::pz_template_fill(
                        dst.cast(),
                        count,
                        elem,
                        head.cast(),
                        u.then_some(update as _),
                        ctx_ptr,
                    )
                };
                let h = head_bytes.clone();
                model = Box::new(move |n| working(&h, &h, 1, u, n));
            }
            Form::Grouped {
                group_len,
                update: u,
            } => {
                refused |= tail.is_null() || clash(tail_in, elem) || group_len == 0;
                rc = unsafe {
                    ffi::pz_template_fill_grouped(
                        dst.cast(),
                        count,
                        elem,
                        group_len,
                        head.cast(),
                        tail.cast(),
                        u.then_some(update_grouped as _),
                        ctx_ptr,
                    )
                };
                let (h, t) = (head_bytes.clone(), tail_bytes.clone());
                model = Box::new(move |n| working(&h, &t, group_len, u, n));
            }
            Form::Words {
                group_len,
                nwords,
                produce: p,
                ..
            } => {
                let nwords = usize::from(nwords);
                // A NULL tail: the head serves both.
                let (tail_in, tail_bytes) = if tail.is_null() {
                    (head_in, head_bytes.clone())
                } else {
                    (tail_in, tail_bytes)
                };
                refused |= clash(tail_in, elem) || group_len == 0;
                refused |= nwords > 8 || nwords > 0 && (offs.is_null() || !p);
                refused |= clash(offs_in, offsets_len);
                refused |= offsets
                    .iter()
                    .any(|&o| o.checked_add(8).is_none_or(|e| e > elem));
                rc = unsafe {
                    ffi::pz_template_fill_words(
                        dst.cast(),
                        count,
                        elem,
                        group_len,
                        head.cast(),
                        tail.cast(),
                        offs,
                        nwords,
                        p.then_some(produce as _),
                        ctx_ptr,
                    )
                };
                let (h, t) = (head_bytes.clone(), tail_bytes.clone());
                model = Box::new(move |n| worded(&h, &t, group_len, &offsets, n));
            }
        }
        let what = (&self, elem, count, off);
        let mut want = before;
        if succeeded(rc, &what) {
            assert!(
                !refused,
                "{what:?}: taken, but the header says it is refused"
            );
            let n = records.expect("taken, so its bytes fit");
            want[off..off + n].copy_from_slice(&model(count));
            if calls_back {
                assert_eq!(ctx.next, count, "{what:?}: callbacks");
            }
        } else {
            assert!(
                refused,
                "{what:?}: refused ({rc}), but the header says it is fine"
            );
        }
        assert_bytes(b.dst.bytes(), &want, &what);
    }
}

/// `n` records of `pz_template_fill(_grouped)`: working copies of the head
/// and the tail, each changed by `touch` before its record if `update`.
fn working(head: &[u8], tail: &[u8], group_len: usize, update: bool, n: usize) -> Vec<u8> {
    let (mut h, mut t) = (head.to_vec(), tail.to_vec());
    let mut out = Vec::with_capacity(n * head.len());
    for i in 0..n {
        let w = if i.is_multiple_of(group_len) {
            &mut h
        } else {
            &mut t
        };
        if update {
            touch(i, w);
        }
        out.extend_from_slice(w);
    }
    out
}

/// `n` records of `pz_template_fill_words`: the template with each word
/// written at its offset in order.
fn worded(head: &[u8], tail: &[u8], group_len: usize, offsets: &[usize], n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * head.len());
    for i in 0..n {
        let is_head = i.is_multiple_of(group_len);
        let mut r = if is_head {
            head.to_vec()
        } else {
            tail.to_vec()
        };
        for (k, &o) in offsets.iter().enumerate() {
            r[o..o + 8].copy_from_slice(&word(i, k, is_head).to_ne_bytes());
        }
        out.extend_from_slice(&r);
    }
    out
}
