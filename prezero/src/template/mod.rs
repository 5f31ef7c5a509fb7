//! Template initialisation of large record arrays with streaming stores, as Linux
//! initialises the ZONE_DEVICE memmap (a template `struct page`, MOVNTI, one SFENCE).
//!
//! Build one record through your slow path, then let prezero copy it into every
//! element with non-temporal stores, refreshing the per-record fields first, and
//! drain once at the end. The reviewers of that kernel patch asked for exactly this: a
//! generic streaming-copy primitive with a plain fallback, not open-coded stores.
//!
//! Two forms:
//! - [`template_fill`] / [`template_fill_grouped`]: a closure updates a working
//!   copy of the template before each record is streamed. General, but the
//!   streamed load of a just-updated record waits on its stores (store
//!   forwarding), which costs about 3x on 64-byte records.
//! - [`template_fill_words`] / [`template_fill_words_grouped`]: the varying
//!   fields are declared up front as `u64` word offsets and produced per index;
//!   the fixed part stays in registers and the words are inserted there
//!   (`words.rs`, over AVX-512, AVX2, SSE2, 8-byte words, NEON pairs), and
//!   every line is written whole, in order, so the fill runs at the speed of
//!   the streaming stores themselves.
//!
//! # Streaming or temporal
//! The free functions stream fills of at least [`stream_from`] bytes and store
//! smaller ones through the caches, with the kernels `prezero calibrate`
//! measured (the profile's `"template"` section) or the built-in choice
//! ([`TemplateChoice::builtin`]). A [`Streamer`] names one kernel instead.
//!
//! # Ordering
//! Functions without `_nodrain` end with [`drain`]: the records are globally
//! visible and ordered before any later store. Streaming stores are weakly
//! ordered until drained, so callers batching `_nodrain` copies must call
//! [`drain`] before publishing the data (e.g. before a release store).
//!
//! # Records
//! A record type implements [`Record`] (an `unsafe` promise: no padding, every
//! bit pattern valid), since its bytes are read as integers and vectors and
//! `template_fill_words` writes arbitrary `u64`s into it. For the widest
//! streaming stores, align the array to 64 bytes: a streaming unit must be
//! aligned to its size, so an array at 16 mod 64 streams 16 bytes at a time.

use std::mem::size_of_val;

use crate::error::Result;

#[cfg(target_arch = "aarch64")]
mod aarch64;
mod choice;
mod in_force;
mod kernel;
mod portable;
mod streamer;
mod words;
#[cfg(target_arch = "x86_64")]
mod x86_64;

pub use choice::TemplateChoice;
pub use in_force::{active_template_choice, stream_from};
pub use kernel::CopyKernel;
pub use streamer::Streamer;

/// A type the template functions may fill: plain old data.
///
/// # Safety
/// The type has no padding bytes and every bit pattern of its size is a valid
/// value (no references, `bool`, `char`, enums or `NonZero` fields): its bytes
/// are read as integers, and `template_fill_words` stores arbitrary `u64`s
/// into it. A `#[repr(C)]` struct of integers whose fields leave no gap (size
/// equals the sum of the fields' sizes) qualifies.
pub unsafe trait Record: Copy + 'static {}

macro_rules! records {
    ($($t:ty)*) => {$(
        // SAFETY: integers and floats have no padding and no invalid bit patterns.
        unsafe impl Record for $t {}
    )*};
}
records!(u8 u16 u32 u64 u128 usize i8 i16 i32 i64 i128 isize f32 f64);

// SAFETY: an array of padding-free, any-bit-pattern elements is one too.
unsafe impl<T: Record, const N: usize> Record for [T; N] {}

/// Orders every streaming store issued so far before any later store (`sfence`
/// on x86_64; elsewhere a release fence, `dmb ish` on aarch64, which orders
/// `stnp` like any store).
#[inline]
pub fn drain() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SFENCE has no preconditions and SSE is part of x86_64.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
}

/// Copies `src` into `dst` (equal lengths) with the best streaming stores, then
/// drains: the data is globally visible and ordered before later stores.
pub fn stream_copy(dst: &mut [u8], src: &[u8]) -> Result<()> {
    Streamer::auto().copy(dst, src)
}

/// As [`stream_copy`] without the drain: batch many, then call [`drain`].
pub fn stream_copy_nodrain(dst: &mut [u8], src: &[u8]) -> Result<()> {
    Streamer::auto().copy_nodrain(dst, src)
}

/// For each index `i` in order: `update(i, &mut working)` (the working copy
/// starts as `template` and keeps its changes), then `working` is streamed into
/// `dst[i]`; one drain at the end.
///
/// If `update` panics at index `i`, `dst[..i]` hold complete records (drained),
/// `dst[i..]` are untouched: no record is ever torn.
pub fn template_fill<T: Record>(dst: &mut [T], template: &T, update: impl FnMut(usize, &mut T)) {
    Streamer::for_bytes(size_of_val(dst)).fill(dst, template, update)
}

/// Groups, as the kernel initialises a compound page's `struct page`s (a head,
/// then tails): records come in groups of `group_len`; the first of
/// each group from (a working copy of) `head`, the others from `tail`, each
/// refreshed by `update(i, is_head, &mut working)`. A last group shorter than
/// `group_len` is fine. `group_len == 0` is an error.
pub fn template_fill_grouped<T: Record>(
    dst: &mut [T],
    group_len: usize,
    head: &T,
    tail: &T,
    update: impl FnMut(usize, bool, &mut T),
) -> Result<()> {
    Streamer::for_bytes(size_of_val(dst)).fill_grouped(dst, group_len, head, tail, update)
}

/// The fast form: the `K` varying `u64` fields at byte `offsets` of the record
/// are produced per index by `produce(i)`; everything else comes from
/// `template`. Errors if an offset does not fit in `T`. With 8-aligned offsets
/// and records a multiple of 8 bytes (16 on aarch64), at an 8-aligned `dst`,
/// the template stays in registers, in the widest unit that divides the record
/// and (streaming) the destination's alignment; otherwise it works like
/// [`template_fill`]. Of two words at one offset, the later wins.
pub fn template_fill_words<T: Record, const K: usize>(
    dst: &mut [T],
    template: &T,
    offsets: [usize; K],
    produce: impl FnMut(usize) -> [u64; K],
) -> Result<()> {
    Streamer::for_bytes(size_of_val(dst)).fill_words(dst, template, offsets, produce)
}

/// [`template_fill_words`] with head/tail templates, as [`template_fill_grouped`].
pub fn template_fill_words_grouped<T: Record, const K: usize>(
    dst: &mut [T],
    group_len: usize,
    head: &T,
    tail: &T,
    offsets: [usize; K],
    produce: impl FnMut(usize, bool) -> [u64; K],
) -> Result<()> {
    Streamer::for_bytes(size_of_val(dst))
        .fill_words_grouped(dst, group_len, head, tail, offsets, produce)
}
