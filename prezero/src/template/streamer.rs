//! [`Streamer`]: a template kernel this CPU runs, and every operation over it:
//! the copy, the closure form of the fill, and the register form's dispatch
//! to a store unit (`words.rs`).

use std::mem::size_of;

#[cfg(target_arch = "aarch64")]
use super::aarch64;
use super::kernel::{CopyFn, CopyKernel, UnitKind};
#[cfg(target_arch = "x86_64")]
use super::x86_64;
use super::{drain, portable, words, Record};
use crate::cpu::cpu;
use crate::error::{Error, Result};

/// A template kernel this CPU supports (the only way to get one is
/// [`Streamer::new`] or one of the `auto` constructors, which check). All
/// template operations hang off it.
#[derive(Clone, Copy)]
pub struct Streamer {
    kernel: CopyKernel,
    copy: CopyFn,
    /// The register form's units, widest first; the CPU runs each one.
    units: &'static [UnitKind],
}

impl std::fmt::Debug for Streamer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Streamer").field(&self.kernel).finish()
    }
}

impl Streamer {
    /// A named kernel; an error if the CPU lacks it.
    pub fn new(kernel: CopyKernel) -> Result<Streamer> {
        // `cpu().features` honours PREZERO_CPU and never claims a feature the
        // CPU lacks: what makes a streamer's copy and units callable.
        let (copy, units) = kernel
            .parts_with(&cpu().features)
            .ok_or(Error::Unsupported {
                kernel: kernel.name(),
                needs: kernel.needs(),
            })?;
        Ok(Streamer {
            kernel,
            copy,
            units,
        })
    }

    /// The kernel behind this streamer.
    pub fn kernel(&self) -> CopyKernel {
        self.kernel
    }

    /// Whether the stores bypass the caches (and so need a [`drain`]).
    fn streams(&self) -> bool {
        self.kernel.is_streaming()
    }

    /// Copies `src` into `dst` (same length, else an error) with streaming
    /// stores, then drains.
    pub fn copy(&self, dst: &mut [u8], src: &[u8]) -> Result<()> {
        self.copy_nodrain(dst, src)?;
        drain();
        Ok(())
    }

    /// As [`Streamer::copy`] without the final drain; call [`drain`] before
    /// publishing the data.
    pub fn copy_nodrain(&self, dst: &mut [u8], src: &[u8]) -> Result<()> {
        if dst.len() != src.len() {
            return Err(Error::invalid(format!(
                "stream_copy: destination has {} bytes, source {}",
                dst.len(),
                src.len()
            )));
        }
        // SAFETY: both slices are valid for their (equal) lengths, and a `&mut`
        // cannot overlap a `&`; the CPU supports the kernel (type invariant).
        unsafe { (self.copy)(dst.as_mut_ptr(), src.as_ptr(), dst.len()) };
        Ok(())
    }

    /// Streams one record: the bytes of `rec` into `dst`.
    #[inline(always)]
    fn put<T: Record>(&self, dst: &mut T, rec: &T) {
        // SAFETY: `dst` and `rec` are valid for size_of::<T>() bytes and distinct.
        unsafe {
            (self.copy)(
                (dst as *mut T).cast(),
                (rec as *const T).cast(),
                size_of::<T>(),
            )
        }
    }

    /// See [`template_fill`](super::template_fill).
    pub fn fill<T: Record>(
        &self,
        dst: &mut [T],
        template: &T,
        mut update: impl FnMut(usize, &mut T),
    ) {
        let _drain = DrainOnExit(self.streams());
        let mut w = *template;
        for (i, d) in dst.iter_mut().enumerate() {
            update(i, &mut w);
            self.put(d, &w);
        }
    }

    /// See [`template_fill_grouped`](super::template_fill_grouped).
    pub fn fill_grouped<T: Record>(
        &self,
        dst: &mut [T],
        group_len: usize,
        head: &T,
        tail: &T,
        mut update: impl FnMut(usize, bool, &mut T),
    ) -> Result<()> {
        if group_len == 0 {
            return Err(Error::invalid(
                "template_fill_grouped: group_len must be at least 1",
            ));
        }
        let _drain = DrainOnExit(self.streams());
        let (mut h, mut t) = (*head, *tail);
        for (i, d) in dst.iter_mut().enumerate() {
            let is_head = i % group_len == 0;
            let w = if is_head { &mut h } else { &mut t };
            update(i, is_head, w);
            self.put(d, w);
        }
        Ok(())
    }

    /// [`Streamer::fill_grouped`] for records whose size is known only at run
    /// time (the C ABI): `dst` holds `dst.len() / head.len()` records of
    /// `head.len()` bytes. Errors if the templates are empty, differ in length,
    /// or `dst` is not a whole number of records, or `group_len == 0`.
    pub fn fill_grouped_bytes(
        &self,
        dst: &mut [u8],
        group_len: usize,
        head: &[u8],
        tail: &[u8],
        mut update: impl FnMut(usize, bool, &mut [u8]),
    ) -> Result<()> {
        let size = head.len();
        if size == 0 || tail.len() != size || !dst.len().is_multiple_of(size) || group_len == 0 {
            return Err(Error::invalid(format!(
                "template fill: records of {size} and {} bytes into {} bytes in groups of {group_len}",
                tail.len(),
                dst.len()
            )));
        }
        let _drain = DrainOnExit(self.streams());
        let (mut h, mut t) = (head.to_vec(), tail.to_vec());
        for (i, d) in dst.chunks_exact_mut(size).enumerate() {
            let is_head = i % group_len == 0;
            let w = if is_head { &mut h } else { &mut t };
            update(i, is_head, w);
            // SAFETY: `d` and `w` are distinct buffers of `size` bytes.
            unsafe { (self.copy)(d.as_mut_ptr(), w.as_ptr(), size) };
        }
        Ok(())
    }

    /// See [`template_fill_words`](super::template_fill_words).
    pub fn fill_words<T: Record, const K: usize>(
        &self,
        dst: &mut [T],
        template: &T,
        offsets: [usize; K],
        mut produce: impl FnMut(usize) -> [u64; K],
    ) -> Result<()> {
        self.fill_words_grouped(dst, usize::MAX, template, template, offsets, |i, _| {
            produce(i)
        })
    }

    /// See [`template_fill_words_grouped`](super::template_fill_words_grouped).
    pub fn fill_words_grouped<T: Record, const K: usize>(
        &self,
        dst: &mut [T],
        group_len: usize,
        head: &T,
        tail: &T,
        offsets: [usize; K],
        mut produce: impl FnMut(usize, bool) -> [u64; K],
    ) -> Result<()> {
        let size = size_of::<T>();
        check_words(size, group_len, &offsets)?;
        let job = words::Job {
            dst: dst.as_mut_ptr().cast(),
            n: dst.len(),
            size,
            head: (head as *const T).cast(),
            tail: (tail as *const T).cast(),
            group_len,
            offsets: &offsets,
        };
        let _drain = DrainOnExit(self.streams());
        // SAFETY: dst holds n records of `size` bytes, the templates are
        // `size` bytes, and check_words passed.
        if unsafe { self.try_units(&job, &mut produce) } {
            return Ok(());
        }
        // Unaligned words or records: a working copy per template, streamed
        // (as bytes of T, padding included, never as a &[u8]).
        let (mut h, mut t) = (*head, *tail);
        for (i, d) in dst.iter_mut().enumerate() {
            let is_head = i % group_len == 0;
            let w = if is_head { &mut h } else { &mut t };
            for (&o, v) in offsets.iter().zip(produce(i, is_head)) {
                // SAFETY: o + 8 <= size_of::<T>() was checked.
                let at = unsafe { (w as *mut T).cast::<u8>().add(o) };
                // SAFETY: 8 bytes of `w` (as above); an unaligned write.
                unsafe { at.cast::<u64>().write_unaligned(v) };
            }
            self.put(d, w);
        }
        Ok(())
    }

    /// [`Streamer::fill_words_grouped`] for records whose size is known only at
    /// run time (the C ABI): `dst` holds `dst.len() / head.len()` records of
    /// `head.len()` bytes. Errors if the templates are empty or differ in
    /// length, `dst` is not a whole number of records, `group_len == 0`, or a
    /// word does not fit in a record.
    pub fn fill_words_grouped_bytes<const K: usize>(
        &self,
        dst: &mut [u8],
        group_len: usize,
        head: &[u8],
        tail: &[u8],
        offsets: [usize; K],
        mut produce: impl FnMut(usize, bool) -> [u64; K],
    ) -> Result<()> {
        let size = head.len();
        if size == 0 || tail.len() != size || !dst.len().is_multiple_of(size) {
            return Err(Error::invalid(format!(
                "template_fill_words: records of {size} and {} bytes into {} bytes",
                tail.len(),
                dst.len()
            )));
        }
        check_words(size, group_len, &offsets)?;
        let job = words::Job {
            dst: dst.as_mut_ptr(),
            n: dst.len() / size,
            size,
            head: head.as_ptr(),
            tail: tail.as_ptr(),
            group_len,
            offsets: &offsets,
        };
        let _drain = DrainOnExit(self.streams());
        // SAFETY: dst holds n records of `size` bytes, the templates are
        // `size` bytes, and check_words passed.
        if unsafe { self.try_units(&job, &mut produce) } {
            return Ok(());
        }
        // Unaligned words or records: a working copy per template, streamed.
        let (mut h, mut t) = (head.to_vec(), tail.to_vec());
        for (i, d) in dst.chunks_exact_mut(size).enumerate() {
            let is_head = i % group_len == 0;
            let w = if is_head { &mut h } else { &mut t };
            for (&o, v) in offsets.iter().zip(produce(i, is_head)) {
                w[o..o + 8].copy_from_slice(&v.to_ne_bytes());
            }
            // SAFETY: `d` and `w` are distinct buffers of `size` bytes.
            unsafe { (self.copy)(d.as_mut_ptr(), w.as_ptr(), size) };
        }
        Ok(())
    }
}

/// A words fill's arguments make sense: `group_len >= 1` and every word fits.
fn check_words(size: usize, group_len: usize, offsets: &[usize]) -> Result<()> {
    if group_len == 0 {
        return Err(Error::invalid(
            "template_fill_words: group_len must be at least 1",
        ));
    }
    if let Some(&bad) = offsets
        .iter()
        .find(|&&o| o.checked_add(8).is_none_or(|end| end > size))
    {
        return Err(Error::invalid(format!(
            "template_fill_words: a u64 at offset {bad} does not fit in a {size}-byte record"
        )));
    }
    Ok(())
}

impl Streamer {
    /// Runs `job` in the register form if one of this streamer's units fits
    /// it; false (nothing written) if none does.
    ///
    /// # Safety
    /// `dst` is writable for `n * size` bytes, `head` and `tail` readable for
    /// `size`, and `check_words(size, group_len, offsets)` passed.
    unsafe fn try_units<const K: usize>(
        &self,
        job: &words::Job<'_, K>,
        produce: &mut impl FnMut(usize, bool) -> [u64; K],
    ) -> bool {
        let stream = self.streams();
        let Some(&unit) = self
            .units
            .iter()
            .find(|u| words::fits(job, u.bytes(), stream))
        else {
            return false;
        };
        // SAFETY: the unit fits the job and is one of this streamer's, whose
        // construction checked the CPU runs it; the rest is the caller's.
        unsafe { self.fill_units(unit, job, produce) };
        true
    }

    /// Runs `job` in the register form with `unit`.
    ///
    /// # Safety
    /// As [`words::fill`], with `unit` one of `self.units`.
    // One call per arm, all under the one contract the comment below states: a
    // block and a comment per arm would say it a dozen times over.
    #[allow(clippy::multiple_unsafe_ops_per_block)]
    unsafe fn fill_units<const K: usize>(
        &self,
        unit: UnitKind,
        job: &words::Job<'_, K>,
        produce: &mut impl FnMut(usize, bool) -> [u64; K],
    ) {
        macro_rules! run {
            ($($f:ident)::+) => {
                if self.streams() {
                    $($f)::+::<true, K>(job, produce)
                } else {
                    $($f)::+::<false, K>(job, produce)
                }
            };
        }
        // SAFETY: forwarded from the caller; the unit's instruction set was
        // checked when the streamer was built.
        unsafe {
            match unit {
                #[cfg(target_arch = "x86_64")]
                UnitKind::Zmm => run!(x86_64::fill_zmm),
                #[cfg(target_arch = "x86_64")]
                UnitKind::Ymm => run!(x86_64::fill_ymm),
                #[cfg(target_arch = "x86_64")]
                UnitKind::Xmm => run!(x86_64::fill_xmm),
                #[cfg(target_arch = "aarch64")]
                UnitKind::QPair => run!(aarch64::fill_qpair),
                #[cfg(target_arch = "aarch64")]
                UnitKind::XPair => run!(aarch64::fill_xpair),
                // On x86_64 `movnti` streams words; elsewhere only temporal
                // kernels list this unit.
                UnitKind::Word if self.streams() => {
                    words::fill::<portable::Word, true, K>(job, produce)
                }
                UnitKind::Word => words::fill::<portable::Word, false, K>(job, produce),
            }
        }
    }
}

/// Drains on every exit, unwinding included, so a panicking `update` leaves the
/// records already written complete and ordered.
struct DrainOnExit(bool);

impl Drop for DrainOnExit {
    fn drop(&mut self) {
        if self.0 {
            drain();
        }
    }
}
