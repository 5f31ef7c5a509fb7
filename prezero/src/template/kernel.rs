//! The list of template kernels and what each needs: the copy it runs and
//! the store units of its register form.

use crate::cpu::{cpu, Features};
use crate::error::{Error, Result};

#[cfg(target_arch = "aarch64")]
use super::aarch64;
use super::portable;
#[cfg(target_arch = "x86_64")]
use super::x86_64;

/// A template kernel: how records are stored. Streaming kernels bypass the
/// caches (and need a [`drain`](super::drain)); temporal ones store through them, which is
/// faster while the destination fits in cache and leaves it there. Each has a
/// copy with the contract `unsafe fn(dst: *mut u8, src: *const u8, len: usize)`
/// (no overlap, any alignment and length, no drain) and a register form for
/// [`template_fill_words`](super::template_fill_words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CopyKernel {
    /// AVX-512 non-temporal 64-byte stores (x86_64).
    Avx512Stream,
    /// AVX2 non-temporal 32-byte stores (x86_64).
    Avx2Stream,
    /// SSE2 `movntdq` non-temporal 16-byte stores (x86_64).
    Sse2Stream,
    /// SSE2 `movnti` 8-byte non-temporal stores (x86_64).
    Movnti,
    /// NEON `stnp` non-temporal register pairs (aarch64).
    NeonStream,
    /// AVX-512 64-byte ordinary stores (x86_64).
    Avx512,
    /// AVX2 32-byte ordinary stores (x86_64).
    Avx2,
    /// SSE2 16-byte ordinary stores (x86_64).
    Sse2,
    /// NEON `stp` register pairs (aarch64).
    Neon,
    /// Ordinary stores of 8-byte words and `ptr::copy_nonoverlapping`, everywhere.
    Portable,
}

impl CopyKernel {
    /// Every template kernel: the streaming ones widest first, then the
    /// temporal ones widest first.
    pub const ALL: [CopyKernel; 10] = [
        CopyKernel::Avx512Stream,
        CopyKernel::Avx2Stream,
        CopyKernel::Sse2Stream,
        CopyKernel::Movnti,
        CopyKernel::NeonStream,
        CopyKernel::Avx512,
        CopyKernel::Avx2,
        CopyKernel::Sse2,
        CopyKernel::Neon,
        CopyKernel::Portable,
    ];

    /// The name `calibrate`, profiles and the benchmarks use.
    pub const fn name(self) -> &'static str {
        match self {
            CopyKernel::Avx512Stream => "avx512-nt",
            CopyKernel::Avx2Stream => "avx2-nt",
            CopyKernel::Sse2Stream => "sse2-nt",
            CopyKernel::Movnti => "movnti",
            CopyKernel::NeonStream => "neon-nt",
            CopyKernel::Avx512 => "avx512",
            CopyKernel::Avx2 => "avx2",
            CopyKernel::Sse2 => "sse2",
            CopyKernel::Neon => "neon",
            CopyKernel::Portable => "portable",
        }
    }

    /// What the kernel needs, in words.
    pub const fn needs(self) -> &'static str {
        match self {
            CopyKernel::Avx512Stream | CopyKernel::Avx512 => "x86_64 avx512f",
            CopyKernel::Avx2Stream | CopyKernel::Avx2 => "x86_64 avx2",
            CopyKernel::Sse2Stream | CopyKernel::Sse2 | CopyKernel::Movnti => "x86_64 sse2",
            CopyKernel::NeonStream | CopyKernel::Neon => "aarch64",
            CopyKernel::Portable => "nothing",
        }
    }

    /// Whether its stores bypass the caches.
    pub const fn is_streaming(self) -> bool {
        matches!(
            self,
            CopyKernel::Avx512Stream
                | CopyKernel::Avx2Stream
                | CopyKernel::Sse2Stream
                | CopyKernel::Movnti
                | CopyKernel::NeonStream
        )
    }

    /// Whether this CPU (as `PREZERO_CPU` leaves it) can run it.
    pub fn is_available(self) -> bool {
        self.is_available_with(&cpu().features)
    }

    /// Whether a CPU of this architecture with features `f` could run it:
    /// what [`TemplateChoice::builtin`](super::TemplateChoice::builtin) asks
    /// of a CPU that is not necessarily this one.
    pub fn is_available_with(self, f: &Features) -> bool {
        self.parts_with(f).is_some()
    }

    /// The copy and the register form's units (widest first) this kernel runs
    /// with on a CPU with features `f`, if it has what the kernel needs. Only
    /// [`Streamer::new`](super::Streamer::new) makes them callable, with this
    /// CPU's features.
    pub(super) fn parts_with(self, f: &Features) -> Option<(CopyFn, &'static [UnitKind])> {
        #[cfg(target_arch = "aarch64")]
        use UnitKind::{QPair, XPair};
        #[cfg(target_arch = "x86_64")]
        use UnitKind::{Word, Xmm, Ymm, Zmm};
        let _ = f;
        match self {
            #[cfg(target_arch = "x86_64")]
            CopyKernel::Avx512Stream | CopyKernel::Avx512 if f.avx512f => {
                let copy: CopyFn = if self.is_streaming() {
                    x86_64::copy_avx512
                } else {
                    portable::copy
                };
                // The 32-byte unit needs AVX2 too, which a mask may hide.
                let units: &'static [UnitKind] = if f.avx2 {
                    &[Zmm, Ymm, Xmm, Word]
                } else {
                    &[Zmm, Xmm, Word]
                };
                Some((copy, units))
            }
            #[cfg(target_arch = "x86_64")]
            CopyKernel::Avx2Stream if f.avx2 => Some((x86_64::copy_avx2, &[Ymm, Xmm, Word])),
            #[cfg(target_arch = "x86_64")]
            CopyKernel::Avx2 if f.avx2 => Some((portable::copy, &[Ymm, Xmm, Word])),
            #[cfg(target_arch = "x86_64")]
            CopyKernel::Sse2Stream if f.sse2 => Some((x86_64::copy_sse2, &[Xmm, Word])),
            #[cfg(target_arch = "x86_64")]
            CopyKernel::Sse2 if f.sse2 => Some((portable::copy, &[Xmm, Word])),
            #[cfg(target_arch = "x86_64")]
            CopyKernel::Movnti if f.sse2 => Some((x86_64::copy_movnti, &[Word])),
            #[cfg(target_arch = "aarch64")]
            CopyKernel::NeonStream => Some((aarch64::copy_stnp, &[QPair, XPair])),
            #[cfg(target_arch = "aarch64")]
            CopyKernel::Neon => Some((portable::copy, &[QPair, XPair, UnitKind::Word])),
            CopyKernel::Portable => Some((portable::copy, &[UnitKind::Word])),
            _ => None,
        }
    }
}

impl std::str::FromStr for CopyKernel {
    type Err = Error;

    fn from_str(s: &str) -> Result<CopyKernel> {
        CopyKernel::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = CopyKernel::ALL.iter().map(|k| k.name()).collect();
                Error::invalid(format!(
                    "unknown template kernel \"{s}\" (known: {})",
                    names.join(", ")
                ))
            })
    }
}

/// The store units of the register form, widest first: a fill uses the first
/// that divides the record (and, streaming, the destination's alignment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum UnitKind {
    #[cfg(target_arch = "x86_64")]
    Zmm,
    #[cfg(target_arch = "x86_64")]
    Ymm,
    #[cfg(target_arch = "x86_64")]
    Xmm,
    #[cfg(target_arch = "aarch64")]
    QPair,
    #[cfg(target_arch = "aarch64")]
    XPair,
    Word,
}

impl UnitKind {
    pub(super) const fn bytes(self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            UnitKind::Zmm => 64,
            #[cfg(target_arch = "x86_64")]
            UnitKind::Ymm => 32,
            #[cfg(target_arch = "x86_64")]
            UnitKind::Xmm => 16,
            #[cfg(target_arch = "aarch64")]
            UnitKind::QPair => 32,
            #[cfg(target_arch = "aarch64")]
            UnitKind::XPair => 16,
            UnitKind::Word => 8,
        }
    }
}

/// A kernel's copy: `unsafe fn(dst, src, len)`, no overlap, any alignment and
/// length, no drain.
pub(super) type CopyFn = unsafe fn(*mut u8, *const u8, usize);
