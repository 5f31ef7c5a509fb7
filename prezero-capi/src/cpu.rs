//! What the machine offers: `pz_cpu_info` and `pz_cpu_features` (`PZ_FEATURE_*`
//! bits).

use std::ffi::{c_char, c_int};

use super::clear::kernel_bit;
use super::helpers::{guard, versioned, write_opt};
use prezero::clear::Kernel;
use prezero::Error;

/// What the library detected about this machine.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PzCpuInfo {
    /// Set by the caller to `sizeof(pz_cpu_info)`.
    pub struct_size: usize,
    /// NUL-terminated vendor, e.g. "GenuineIntel".
    pub vendor: [c_char; 16],
    /// NUL-terminated model name (truncated to 63 bytes).
    pub model_name: [c_char; 64],
    /// Display family and model.
    pub family: u32,
    /// Display model.
    pub model: u32,
    /// Bit `n - 3` set: the kernel of `PZ_STRATEGY_*` number `n` is available
    /// (`1u << (PZ_STRATEGY_AVX2 - 3)`: AVX2 stores).
    pub kernels: u32,
    /// Logical CPUs usable.
    pub logical_cpus: usize,
    /// Base page size.
    pub page_size: usize,
    /// L1 data, L2 and last-level cache sizes in bytes.
    pub l1d: usize,
    /// L2 size.
    pub l2: usize,
    /// Last-level cache size.
    pub llc: usize,
}

/// Fills `*out`, whose `struct_size` the caller sets to `sizeof(pz_cpu_info)`.
///
/// # Safety
/// `out` is NULL (refused) or writable for its `struct_size`.
#[no_mangle]
pub unsafe extern "C" fn pz_cpu_info(out: *mut PzCpuInfo) -> c_int {
    guard(|| {
        // SAFETY: the caller passes an info struct (or NULL, refused).
        unsafe { versioned(out.cast_const(), "pz_cpu_info")? };
        let c = prezero::cpu();
        let mut info = PzCpuInfo {
            struct_size: std::mem::size_of::<PzCpuInfo>(),
            vendor: [0; 16],
            model_name: [0; 64],
            family: c.family,
            model: c.model,
            kernels: Kernel::available().fold(0, |m, k| m | kernel_bit(k)),
            logical_cpus: c.logical_cpus,
            page_size: c.page_size,
            l1d: c.l1d(),
            l2: c.l2(),
            llc: c.llc(),
        };
        for (d, s) in info.vendor[..15].iter_mut().zip(c.vendor.bytes()) {
            *d = s as c_char;
        }
        for (d, s) in info.model_name[..63].iter_mut().zip(c.model_name.bytes()) {
            *d = s as c_char;
        }
        // SAFETY: checked non-NULL, size agreed.
        unsafe { out.write(info) };
        Ok(())
    })
}

/// `pz_cpu_features` bit: enhanced `rep stosb` (x86_64).
pub const PZ_FEATURE_ERMS: u32 = 1 << 0;
/// `pz_cpu_features` bit: fast short `rep mov` (x86_64).
pub const PZ_FEATURE_FSRM: u32 = 1 << 1;
/// `pz_cpu_features` bit: SSE2 (x86_64).
pub const PZ_FEATURE_SSE2: u32 = 1 << 2;
/// `pz_cpu_features` bit: AVX2 (x86_64).
pub const PZ_FEATURE_AVX2: u32 = 1 << 3;
/// `pz_cpu_features` bit: AVX-512F (x86_64).
pub const PZ_FEATURE_AVX512F: u32 = 1 << 4;
/// `pz_cpu_features` bit: AVX-512BW (x86_64).
pub const PZ_FEATURE_AVX512BW: u32 = 1 << 5;
/// `pz_cpu_features` bit: AMD `clzero` (x86_64).
pub const PZ_FEATURE_CLZERO: u32 = 1 << 6;
/// `pz_cpu_features` bit: `dc zva` permitted (aarch64).
pub const PZ_FEATURE_DC_ZVA: u32 = 1 << 7;
/// `pz_cpu_features` bit: FEAT_MOPS (aarch64).
pub const PZ_FEATURE_MOPS: u32 = 1 << 8;

fn feature_bits(f: &prezero::cpu::Features) -> u32 {
    [
        (f.erms, PZ_FEATURE_ERMS),
        (f.fsrm, PZ_FEATURE_FSRM),
        (f.sse2, PZ_FEATURE_SSE2),
        (f.avx2, PZ_FEATURE_AVX2),
        (f.avx512f, PZ_FEATURE_AVX512F),
        (f.avx512bw, PZ_FEATURE_AVX512BW),
        (f.clzero, PZ_FEATURE_CLZERO),
        (f.dc_zva, PZ_FEATURE_DC_ZVA),
        (f.mops, PZ_FEATURE_MOPS),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .fold(0, |m, (_, bit)| m | bit)
}

/// The CPU features the library uses (`PZ_FEATURE_*` bits), after
/// `PREZERO_CPU`, into `*features`, and those detection found into `*detected`;
/// either pointer may be NULL. Returns 0, or `-EINVAL` when `PREZERO_CPU` could
/// not be honoured (it names a level this CPU does not reach, or something
/// unknown): the library then uses no optional feature, and said why on stderr.
///
/// # Safety
/// Each pointer is NULL or writable for a `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn pz_cpu_features(features: *mut u32, detected: *mut u32) -> c_int {
    guard(|| {
        let c = prezero::cpu();
        // SAFETY: NULL (skipped) or, as documented, writable.
        unsafe { write_opt(features, feature_bits(&c.features)) };
        // SAFETY: as for features.
        unsafe { write_opt(detected, feature_bits(&c.detected)) };
        match &c.mask_error {
            Some(e) => Err(Error::invalid(format!("PREZERO_CPU: {e}"))),
            None => Ok(()),
        }
    })
}
