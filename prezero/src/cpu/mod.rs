//! What the CPU offers: features, caches, page sizes.
//!
//! [`cpu()`] is detected once and cached: it cannot change while the process runs.
//! `PREZERO_CPU` (see [`mask`]) narrows what it reports, and with it what every
//! kernel, template and Auto choice in the library may use. The kernel's
//! memory state, which may change at any time, is `mm`'s.

use std::sync::OnceLock;

use crate::sys;

// The crate's, for the fuzz target `cpu_mask` (`crate::fuzzing`).
pub(crate) mod mask;

// One file per architecture: its identity, features, caches and `dc zva`.
#[cfg_attr(target_arch = "x86_64", path = "x86_64.rs")]
#[cfg_attr(target_arch = "aarch64", path = "aarch64.rs")]
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    path = "other.rs"
)]
mod arch;

/// Instruction-set features that decide which clearing kernels can run.
///
/// Invariant: [`Cpu::features`] never claims a feature detection did not find
/// (a mask only removes), so a kernel compiled for a feature it lists may run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Features {
    /// Enhanced REP MOVSB/STOSB: `rep stosb` is the fast extent clear.
    pub erms: bool,
    /// Fast short REP MOV: `rep stos` is cheap to start even for small sizes.
    pub fsrm: bool,
    /// SSE2, which brings `movnti` 8-byte streaming stores.
    pub sse2: bool,
    /// 256-bit vector stores, temporal and streaming.
    pub avx2: bool,
    /// 512-bit vector stores, temporal and streaming.
    pub avx512f: bool,
    /// 512-bit byte/word operations (masked byte stores).
    pub avx512bw: bool,
    /// AMD `clzero`: zero a whole cache line without reading it.
    pub clzero: bool,
    /// aarch64 `dc zva` is permitted (DCZID_EL0.DZP clear).
    pub dc_zva: bool,
    /// aarch64 FEAT_MOPS (`SETP/SETM/SETE` memory-set instructions).
    pub mops: bool,
}

impl Features {
    /// Each feature of this architecture by name (`prezero info`, `PREZERO_CPU`,
    /// profiles), with whether it is present.
    pub fn list(&self) -> Vec<(&'static str, bool)> {
        mask::FEATURES
            .iter()
            .filter(|n| n.arch == mask::Arch::HOST)
            .map(|n| (n.name, (n.get)(self)))
            .collect()
    }

    /// The features named, as [`Features::list`] names them (`_` read as
    /// `-`): a CPU described by a recording rather than detected. An unknown
    /// name is an error, not a feature quietly dropped.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Features, String> {
        let mut f = Features::default();
        for name in names {
            let n = mask::FEATURES
                .iter()
                .find(|n| n.name == name.replace('_', "-"))
                .ok_or_else(|| format!("unknown CPU feature '{name}'"))?;
            (n.set)(&mut f, true);
        }
        Ok(f)
    }

    /// The names of the features present, space-separated ("erms fsrm sse2 avx2").
    pub fn names(&self) -> String {
        self.list()
            .into_iter()
            .filter_map(|(n, on)| on.then_some(n))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// One cache level as the kernel (or CPUID) describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    /// 1, 2, 3...
    pub level: u32,
    /// "Data", "Instruction" or "Unified".
    pub kind: String,
    /// Size in bytes of one instance.
    pub size: usize,
}

/// The CPU, detected once per process.
#[derive(Debug, Clone)]
pub struct Cpu {
    /// "GenuineIntel", "AuthenticAMD"; on aarch64 the implementer's name ("ARM",
    /// "Ampere", ...), or its MIDR code in hex when prezero does not know it.
    pub vendor: String,
    /// x86: CPUID's brand string. aarch64: the core's name where prezero knows
    /// the MIDR part ("Neoverse-N1"), else `part 0x...`.
    pub model_name: String,
    /// x86: display family (base + extended). aarch64: MIDR implementer code.
    pub family: u32,
    /// x86: display model. aarch64: MIDR part number.
    pub model: u32,
    /// x86: stepping. aarch64: MIDR variant << 4 | revision (`r{variant}p{revision}`).
    pub stepping: u32,
    /// Clearing-relevant features, after `PREZERO_CPU`: what the library uses.
    pub features: Features,
    /// The features detection found, before any mask.
    pub detected: Features,
    /// `PREZERO_CPU` as given, if set and not empty.
    pub mask: Option<String>,
    /// Why `PREZERO_CPU` could not be honoured; the library then runs with no
    /// optional feature at all (see [`cpu()`]).
    pub mask_error: Option<String>,
    /// Every data/unified cache level of CPU 0, smallest level first.
    pub caches: Vec<Cache>,
    /// Where the cache sizes came from: "sysfs", "cpuid" or "none".
    pub cache_source: &'static str,
    /// `dc zva` block size in bytes (aarch64), 0 elsewhere.
    pub dc_zva_block: usize,
    /// Logical CPUs this process may use.
    pub logical_cpus: usize,
    /// Base page size in bytes.
    pub page_size: usize,
}

impl Cpu {
    /// Size of the first level-1 data cache, or 32 KiB if unknown.
    pub fn l1d(&self) -> usize {
        self.cache_size(1).unwrap_or(32 << 10)
    }

    /// Size of the level-2 cache, or 1 MiB if unknown.
    pub fn l2(&self) -> usize {
        self.cache_size(2).unwrap_or(1 << 20)
    }

    /// Size of the last-level cache, or 32 MiB if unknown.
    pub fn llc(&self) -> usize {
        self.caches.last().map_or(32 << 20, |c| c.size)
    }

    /// How many bytes of recently written memory can be expected to still be
    /// in cache: where a "hot" extent stops being hot. AMD Zen elides the
    /// read-for-ownership of `rep stos` above ~LLC size (Linux's huge-page
    /// clearing measured it), so it keeps pace with streaming there;
    /// elsewhere the LLC is shared with other cores (and, in a VM, other
    /// tenants): measured on a 260 MiB-LLC Xeon VM, temporal stores fell to
    /// DRAM speed from ~64 MiB, a quarter of the LLC.
    pub fn hot_capacity(&self) -> usize {
        let llc = self.llc();
        if self.vendor == "AuthenticAMD" {
            llc
        } else {
            llc / 4
        }
    }

    /// What identifies this CPU for a calibration profile: vendor, family,
    /// model and stepping (MIDR fields on aarch64), and the features in force,
    /// so that a profile measured on another core, or under another mask, is
    /// not applied here.
    pub fn identity(&self) -> String {
        format!(
            "{} family {} model {} stepping {}; {}",
            self.vendor,
            self.family,
            self.model,
            self.stepping,
            self.features.names()
        )
    }

    fn cache_size(&self, level: u32) -> Option<usize> {
        self.caches
            .iter()
            .find(|c| c.level == level)
            .map(|c| c.size)
    }
}

/// Whether an impossible `PREZERO_CPU` is the caller's to report ([`strict_mask`]).
static STRICT_MASK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// For a program that stops rather than run without the features
/// `PREZERO_CPU` asked for (the CLI: its figures would be a pretence): an
/// impossible mask is then left to it to report, from
/// [`Cpu::mask_error`], instead of said here to be run without. Call it
/// before the first [`cpu`].
pub fn strict_mask() {
    STRICT_MASK.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The CPU this process runs on, detected on first call.
///
/// A `PREZERO_CPU` that cannot be honoured (a level this CPU does not reach, a
/// name prezero does not know) is reported once on stderr and in
/// [`Cpu::mask_error`], and the library then uses no optional feature: slower,
/// never wrong, and never a pretence of the machine that was asked for.
pub fn cpu() -> &'static Cpu {
    static CPU: OnceLock<Cpu> = OnceLock::new();
    CPU.get_or_init(detect)
}

fn detect() -> Cpu {
    let (vendor, family, model, stepping, mut model_name) = arch::identity();
    if model_name.is_empty() {
        model_name = sys::cpuinfo_field("model name").unwrap_or_default();
    }
    let (caches, cache_source) = match sysfs_caches() {
        Some(c) if !c.is_empty() => (c, "sysfs"),
        _ => match arch::cpuid_caches() {
            c if !c.is_empty() => (c, "cpuid"),
            _ => (Vec::new(), "none"),
        },
    };
    let detected = arch::features();
    // Not UTF-8 is not ignorable: it would quietly run with every feature.
    let (mask, unreadable) = match std::env::var_os("PREZERO_CPU") {
        Some(v) if !v.to_string_lossy().trim().is_empty() => match v.into_string() {
            Ok(m) => (Some(m), false),
            Err(v) => (Some(v.to_string_lossy().into_owned()), true),
        },
        _ => (None, false),
    };
    let (features, mask_error) = match &mask {
        None => (detected, None),
        Some(m) => match if unreadable {
            Err("it is not UTF-8".to_string())
        } else {
            mask::apply(m, detected, mask::Arch::HOST, mask::host_has)
        } {
            Ok(f) => (f, None),
            Err(e) => {
                if !STRICT_MASK.load(std::sync::atomic::Ordering::Relaxed) {
                    eprintln!("prezero: PREZERO_CPU={m}: {e}; using no optional CPU feature");
                }
                let baseline = Features {
                    sse2: detected.sse2,
                    ..Features::default()
                };
                (baseline, Some(e))
            }
        },
    };
    Cpu {
        vendor,
        model_name,
        family,
        model,
        stepping,
        features,
        detected,
        mask,
        mask_error,
        caches,
        cache_source,
        dc_zva_block: arch::dc_zva_block(),
        logical_cpus: sys::online_cpus(),
        page_size: sys::page_size(),
    }
}

/// Caches of CPU 0 from /sys/devices/system/cpu/cpu0/cache/index*, instruction caches left out.
fn sysfs_caches() -> Option<Vec<Cache>> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    let mut caches: Vec<Cache> = dir
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .filter_map(|e| {
            let p = e.path();
            let kind = sys::read_text(p.join("type"))?;
            if kind == "Instruction" {
                return None;
            }
            Some(Cache {
                level: sys::read_usize(p.join("level"))? as u32,
                size: crate::parse_size(&sys::read_text(p.join("size"))?).ok()?,
                kind,
            })
        })
        .collect();
    caches.sort_by_key(|c| c.level);
    Some(caches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_plausible() {
        let c = cpu();
        assert!(c.page_size >= 4096 && c.page_size.is_power_of_two());
        assert!(c.logical_cpus >= 1);
        assert!(c.llc() >= c.l1d());
        #[cfg(target_arch = "x86_64")]
        assert!(c.features.sse2);
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn midr_names_the_core() {
        let (vendor, implementer, part, stepping, name) = arch::decode_midr(0x413f_d0c1);
        assert_eq!((vendor.as_str(), implementer, part), ("ARM", 0x41, 0xd0c));
        assert_eq!((stepping, name.as_str()), (0x31, "Neoverse-N1"));
        let (vendor, _, _, _, name) = arch::decode_midr(0xee00_1230);
        assert_eq!((vendor.as_str(), name.as_str()), ("0xee", "part 0x123"));
        let c = cpu();
        eprintln!(
            "this core: {} {} ({})",
            c.vendor,
            c.model_name,
            c.identity()
        );
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn cpuid_caches_agree_with_sysfs_roughly() {
        let from_cpuid = arch::cpuid_caches();
        if from_cpuid.is_empty() {
            prezero_testkit::skip("cpu", "this CPU reports no deterministic cache parameters");
            return;
        }
        assert!(from_cpuid.iter().any(|c| c.level == 1 && c.kind == "Data"));
    }
}
