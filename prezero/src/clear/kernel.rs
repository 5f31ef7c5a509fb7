//! The list of clearing kernels, and the checked handle that makes one callable.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use crate::cpu::Features;
use crate::error::Error;

#[cfg(target_arch = "aarch64")]
use super::aarch64;
use super::portable;
#[cfg(target_arch = "x86_64")]
use super::x86_64;

/// One clearing kernel. Every kernel has the same contract,
/// `unsafe fn(ptr: *mut u8, len: usize)`: any alignment, any length including 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// `rep stosb` over the whole extent (x86_64).
    RepStosb,
    /// AVX-512 non-temporal 64-byte stores, then `sfence`.
    Avx512Stream,
    /// AVX2 non-temporal 32-byte stores, then `sfence`.
    Avx2Stream,
    /// SSE2 `movnti` 8-byte non-temporal stores, then `sfence`.
    Movnti,
    /// AMD `clzero` per 64-byte line, then `sfence`.
    Clzero,
    /// Temporal AVX-512 stores (lines stay in cache).
    Avx512,
    /// Temporal AVX2 stores (lines stay in cache).
    Avx2,
    /// aarch64 `dc zva` per block.
    DcZva,
    /// `ptr::write_bytes` (libc `memset`): available everywhere.
    Portable,
}

impl Kernel {
    /// Every kernel prezero knows, available here or not.
    pub const ALL: [Kernel; 9] = [
        Kernel::RepStosb,
        Kernel::Avx512Stream,
        Kernel::Avx2Stream,
        Kernel::Movnti,
        Kernel::Clzero,
        Kernel::Avx512,
        Kernel::Avx2,
        Kernel::DcZva,
        Kernel::Portable,
    ];

    /// The name used by `PREZERO_STRATEGY`, the CLI and the JSON output.
    pub const fn name(self) -> &'static str {
        match self {
            Kernel::RepStosb => "rep-stosb",
            Kernel::Avx512Stream => "avx512-nt",
            Kernel::Avx2Stream => "avx2-nt",
            Kernel::Movnti => "movnti",
            Kernel::Clzero => "clzero",
            Kernel::Avx512 => "avx512",
            Kernel::Avx2 => "avx2",
            Kernel::DcZva => "dc-zva",
            Kernel::Portable => "portable",
        }
    }

    /// What the CPU must have for this kernel to run.
    pub const fn needs(self) -> &'static str {
        match self {
            Kernel::RepStosb => "x86_64",
            Kernel::Avx512Stream | Kernel::Avx512 => "x86_64 avx512f",
            Kernel::Avx2Stream | Kernel::Avx2 => "x86_64 avx2",
            Kernel::Movnti => "x86_64 sse2",
            Kernel::Clzero => "x86_64 clzero (AMD)",
            Kernel::DcZva => "aarch64 dc zva (DCZID_EL0.DZP clear)",
            Kernel::Portable => "nothing",
        }
    }

    /// Whether the kernel writes around the caches (streaming / non-temporal):
    /// the right choice for memory that is cold and not about to be used.
    pub const fn is_streaming(self) -> bool {
        matches!(
            self,
            Kernel::Avx512Stream | Kernel::Avx2Stream | Kernel::Movnti | Kernel::Clzero
        )
    }

    /// Whether this CPU can run the kernel (under `PREZERO_CPU`, if set).
    pub fn is_available(self) -> bool {
        self.checked().is_some()
    }

    /// Whether a CPU of this architecture with features `f` could run the
    /// kernel: what [`SizeClasses::builtin`](super::SizeClasses::builtin) asks of a CPU
    /// that is not necessarily this one.
    pub fn is_available_with(self, f: &Features) -> bool {
        let x86 = cfg!(target_arch = "x86_64");
        match self {
            Kernel::RepStosb => x86,
            Kernel::Avx512Stream | Kernel::Avx512 => x86 && f.avx512f,
            Kernel::Avx2Stream | Kernel::Avx2 => x86 && f.avx2,
            Kernel::Movnti => x86 && f.sse2,
            Kernel::Clzero => x86 && f.clzero,
            Kernel::DcZva => cfg!(target_arch = "aarch64") && f.dc_zva,
            Kernel::Portable => true,
        }
    }

    /// What Linux's own `clear_page` and `clear_huge_page` use on this
    /// architecture, if this CPU can run it (`rep stos` on x86_64, `dc zva` on
    /// arm64), else `portable`: the kernel the benchmarks' page-at-a-time and
    /// resched-batch baselines model.
    pub fn os_baseline() -> Kernel {
        [Kernel::RepStosb, Kernel::DcZva]
            .into_iter()
            .find(|k| k.is_available())
            .unwrap_or(Kernel::Portable)
    }

    /// Every kernel this CPU can run.
    pub fn available() -> impl Iterator<Item = Kernel> {
        Kernel::ALL.into_iter().filter(|k| k.is_available())
    }

    /// The callable kernel, if this CPU has what it needs. This is the only way to
    /// obtain a [`KernelFn`], so holding one proves the CPU supports it. Detected
    /// once per process; later calls are an array load.
    #[inline]
    pub(crate) fn checked(self) -> Option<KernelFn> {
        static CHECKED: OnceLock<[Option<KernelFn>; Kernel::ALL.len()]> = OnceLock::new();
        CHECKED.get_or_init(|| Kernel::ALL.map(Kernel::detect))[self as usize]
    }

    fn detect(self) -> Option<KernelFn> {
        // `cpu().features` honours PREZERO_CPU and never claims a feature the
        // CPU lacks: the obligation each kernel's `# Safety` names.
        if !self.is_available_with(&crate::cpu::cpu().features) {
            return None;
        }
        let f: unsafe fn(*mut u8, usize) = match self {
            #[cfg(target_arch = "x86_64")]
            Kernel::RepStosb => x86_64::rep_stosb::clear,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Stream => x86_64::avx512_stream::clear,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2Stream => x86_64::avx2_stream::clear,
            #[cfg(target_arch = "x86_64")]
            Kernel::Movnti => x86_64::movnti::clear,
            #[cfg(target_arch = "x86_64")]
            Kernel::Clzero => x86_64::clzero::clear,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => x86_64::avx512::clear,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => x86_64::avx2::clear,
            #[cfg(target_arch = "aarch64")]
            Kernel::DcZva if aarch64::dc_zva::block_size_ok() => aarch64::dc_zva::clear,
            Kernel::Portable => portable::clear,
            _ => return None,
        };
        Some(KernelFn { kernel: self, f })
    }

    /// Like [`Kernel::checked`], with the error a caller should see.
    #[inline]
    pub(crate) fn require(self) -> Result<KernelFn, Error> {
        self.checked().ok_or(Error::Unsupported {
            kernel: self.name(),
            needs: self.needs(),
        })
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kernel {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Kernel::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Kernel::ALL.iter().map(|k| k.name()).collect();
                Error::invalid(format!(
                    "unknown kernel '{s}' (known: {})",
                    names.join(", ")
                ))
            })
    }
}

/// A kernel this CPU is known to support (see [`Kernel::checked`]).
#[derive(Clone, Copy)]
pub(crate) struct KernelFn {
    kernel: Kernel,
    f: unsafe fn(*mut u8, usize),
}

impl KernelFn {
    pub(crate) fn kernel(self) -> Kernel {
        self.kernel
    }

    /// # Safety
    /// `ptr` is valid for writes of `len` bytes. (The CPU-feature obligation was
    /// discharged when this value was built.)
    #[inline]
    pub(crate) unsafe fn run(self, ptr: *mut u8, len: usize) {
        // SAFETY: the CPU supports the kernel (type invariant); the caller vouches for the range.
        unsafe { (self.f)(ptr, len) }
    }

    /// Clears a slice: the safe form of [`KernelFn::run`].
    #[inline]
    pub(crate) fn clear(self, buf: &mut [u8]) {
        // SAFETY: a `&mut [u8]` is valid for writes of its whole length.
        unsafe { self.run(buf.as_mut_ptr(), buf.len()) }
    }
}

#[cfg(test)]
impl KernelFn {
    /// The portable kernel, which needs nothing of the CPU, without
    /// [`Kernel::checked`]'s detection: for tests under Miri, which cannot run CPUID.
    pub(crate) const PORTABLE: KernelFn = KernelFn {
        kernel: Kernel::Portable,
        f: portable::clear,
    };
}

impl fmt::Debug for KernelFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("KernelFn").field(&self.kernel).finish()
    }
}
