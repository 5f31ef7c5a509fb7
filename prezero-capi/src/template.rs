//! Streaming copies and template fills: `pz_stream_copy`, `pz_drain`,
//! `pz_template_fill*`.

use std::ffi::{c_int, c_void};

use super::helpers::{bytes, bytes_mut, guard, inval};
use prezero::template::Streamer;
use prezero::Result;

/// `count * elem_size`, checked: a record has at least one byte and the
/// total fits in the address space.
fn record_bytes(count: usize, elem_size: usize) -> Result<usize> {
    if elem_size == 0 {
        return Err(inval("elem_size is 0"));
    }
    count
        .checked_mul(elem_size)
        .ok_or_else(|| inval("count * elem_size overflows"))
}

/// `count` records of `elem_size` bytes at `dst`, as one slice.
///
/// # Safety
/// `dst` is writable for `count * elem_size` bytes, untouched by anything else
/// while the slice lives.
unsafe fn records<'a>(dst: *mut c_void, count: usize, elem_size: usize) -> Result<&'a mut [u8]> {
    let total = record_bytes(count, elem_size)?;
    // SAFETY: the caller promises the range.
    unsafe { bytes_mut(dst, total) }
}

/// Refuses `what` (`len` bytes at `p`) if it overlaps the destination: the
/// fill would read what it has just written, and Rust may not hold a `&mut`
/// and a `&` over the same bytes. Checked on the raw ranges, before any slice
/// exists.
fn apart(
    dst: *const c_void,
    dst_len: usize,
    p: *const c_void,
    len: usize,
    what: &str,
) -> Result<()> {
    let (d, q) = (dst as usize, p as usize);
    if dst_len > 0 && len > 0 && d < q.saturating_add(len) && q < d.saturating_add(dst_len) {
        return Err(inval(&format!("{what} overlaps the destination")));
    }
    Ok(())
}

/// The destination and the head and tail templates of a grouped fill as
/// slices, once neither template overlaps the destination.
///
/// # Safety
/// `dst` is writable for `count * elem_size` bytes, `head` and `tail` readable
/// for `elem_size` (NULL is an error), as the C caller promises.
unsafe fn head_and_tail<'a>(
    dst: *mut c_void,
    count: usize,
    elem_size: usize,
    head: *const c_void,
    tail: *const c_void,
) -> Result<(&'a mut [u8], &'a [u8], &'a [u8])> {
    let total = record_bytes(count, elem_size)?;
    apart(dst, total, head, elem_size, "the head template")?;
    apart(dst, total, tail, elem_size, "the tail template")?;
    // SAFETY: the caller's promise; no template overlaps the destination.
    let d = unsafe { records(dst, count, elem_size)? };
    // SAFETY: the caller's promise; nothing writes the template meanwhile.
    let h = unsafe { bytes(head, elem_size)? };
    // SAFETY: as for head.
    let t = unsafe { bytes(tail, elem_size)? };
    Ok((d, h, t))
}

/// Copies `len` bytes with streaming stores, then drains. No overlap allowed.
///
/// # Safety
/// `dst` is writable and `src` readable for `len` bytes, and nothing else
/// touches either during the call.
#[no_mangle]
pub unsafe extern "C" fn pz_stream_copy(dst: *mut c_void, src: *const c_void, len: usize) -> c_int {
    guard(|| {
        apart(dst, len, src, len, "the source")?;
        // SAFETY: the caller promises the range; the source does not overlap it.
        let d = unsafe { bytes_mut(dst, len)? };
        // SAFETY: the caller promises the range.
        let s = unsafe { bytes(src, len)? };
        prezero::stream_copy(d, s)
    })
}

/// Orders all streaming stores issued so far before later stores.
#[no_mangle]
pub extern "C" fn pz_drain() {
    prezero::template::drain();
}

/// Fills `count` records of `elem_size` bytes at `dst` from `tmpl`: for each index
/// in order `update(i, work, ctx)` may change the working copy `work` (it starts
/// as `tmpl` and keeps its changes), which is then streamed into record `i`. One
/// drain at the end. `update` may be NULL (plain replication).
///
/// # Safety
/// `dst` is writable for `count * elem_size` bytes and `tmpl` readable for
/// `elem_size`, untouched by anything else during the call; `update` may be
/// called with `ctx` and touches only `work` (`elem_size` bytes).
#[no_mangle]
pub unsafe extern "C" fn pz_template_fill(
    dst: *mut c_void,
    count: usize,
    elem_size: usize,
    tmpl: *const c_void,
    update: Option<unsafe extern "C" fn(i: usize, work: *mut c_void, ctx: *mut c_void)>,
    ctx: *mut c_void,
) -> c_int {
    guard(|| {
        apart(
            dst,
            record_bytes(count, elem_size)?,
            tmpl,
            elem_size,
            "the template",
        )?;
        // SAFETY: the caller promises the range; the template does not overlap it.
        let d = unsafe { records(dst, count, elem_size)? };
        // SAFETY: the caller promises the template.
        let t = unsafe { bytes(tmpl, elem_size)? };
        Streamer::for_bytes(d.len()).fill_grouped_bytes(d, 1, t, t, |i, _, w| {
            if let Some(f) = update {
                // SAFETY: a C callback with the caller's own context; `w` is elem_size bytes.
                unsafe { f(i, w.as_mut_ptr().cast(), ctx) }
            }
        })
    })
}

/// Groups, as the kernel initialises a compound page's `struct page`s: the
/// first record of every `group_len` from `head`,
/// the others from `tail`, each refreshed by `update(i, is_head, work, ctx)`.
///
/// # Safety
/// As `pz_template_fill`, with `head` and `tail` each readable for `elem_size`.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn pz_template_fill_grouped(
    dst: *mut c_void,
    count: usize,
    elem_size: usize,
    group_len: usize,
    head: *const c_void,
    tail: *const c_void,
    update: Option<
        unsafe extern "C" fn(i: usize, is_head: c_int, work: *mut c_void, ctx: *mut c_void),
    >,
    ctx: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: the caller promises the ranges.
        let (d, h, t) = unsafe { head_and_tail(dst, count, elem_size, head, tail)? };
        Streamer::for_bytes(d.len()).fill_grouped_bytes(d, group_len, h, t, |i, is_head, w| {
            if let Some(f) = update {
                // SAFETY: a C callback with the caller's own context.
                unsafe { f(i, c_int::from(is_head), w.as_mut_ptr().cast(), ctx) }
            }
        })
    })
}

/// The most varying words `pz_template_fill_words` takes per record.
pub const PZ_TEMPLATE_MAX_WORDS: usize = 8;

/// The register form of the template fill: `count` records of `elem_size`
/// bytes at `dst`, the first of every `group_len` from `head`, the others from
/// `tail` (NULL: `head` again), with `nwords` 64-bit words (at most
/// `PZ_TEMPLATE_MAX_WORDS`) at byte `offsets[k]` of each record set to what
/// `produce(i, is_head, words, ctx)` writes to `words[0..nwords]`. For one
/// template pass `group_len = SIZE_MAX` (or any) and `tail = NULL`. `produce`
/// may be NULL only when `nwords` is 0, and must not touch `dst`, `head`,
/// `tail` or `offsets`. A template or `offsets` overlapping `dst` is
/// `-EINVAL`. Streams (then drains) or stores through the caches by size, as
/// the profile or the built-in choice says.
///
/// # Safety
/// As `pz_template_fill_grouped` (`tail` may be NULL), with `offsets`
/// readable for `nwords` entries; `produce` may be called with `ctx` and
/// writes only `words[0..nwords]`.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn pz_template_fill_words(
    dst: *mut c_void,
    count: usize,
    elem_size: usize,
    group_len: usize,
    head: *const c_void,
    tail: *const c_void,
    offsets: *const usize,
    nwords: usize,
    produce: Option<
        unsafe extern "C" fn(i: usize, is_head: c_int, words: *mut u64, ctx: *mut c_void),
    >,
    ctx: *mut c_void,
) -> c_int {
    guard(|| {
        if nwords > PZ_TEMPLATE_MAX_WORDS {
            return Err(inval("more than PZ_TEMPLATE_MAX_WORDS words"));
        }
        if nwords > 0 && (offsets.is_null() || produce.is_none()) {
            return Err(inval("NULL offsets or produce with words to produce"));
        }
        let tail = if tail.is_null() { head } else { tail };
        let offsets_len = nwords * std::mem::size_of::<usize>();
        let total = record_bytes(count, elem_size)?;
        apart(dst, total, offsets.cast(), offsets_len, "the offsets")?;
        // SAFETY: the caller promises the ranges; `offsets` holds nwords
        // entries and does not overlap the destination (checked above).
        let (d, h, t) = unsafe { head_and_tail(dst, count, elem_size, head, tail)? };
        // SAFETY: as above.
        let offs = unsafe {
            if nwords == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(offsets, nwords)
            }
        };
        let s = Streamer::for_bytes(d.len());
        // One instantiation per word count: the register form needs K at compile time.
        macro_rules! with_k {
            ($($k:literal)*) => {
                match nwords {
                    $($k => {
                        let o: [usize; $k] = offs.try_into().expect("nwords entries");
                        s.fill_words_grouped_bytes(d, group_len, h, t, o, |i, is_head| {
                            let mut w = [0u64; $k];
                            if let Some(f) = produce {
                                // SAFETY: a C callback with the caller's own
                                // context; `w` holds nwords words.
                                unsafe { f(i, c_int::from(is_head), w.as_mut_ptr(), ctx) };
                            }
                            w
                        })
                    })*
                    _ => unreachable!("nwords was checked"),
                }
            };
        }
        with_k!(0 1 2 3 4 5 6 7 8)
    })
}
