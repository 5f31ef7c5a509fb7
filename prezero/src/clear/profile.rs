//! Which kernel `Auto` uses for which size and temperature, and the cached dispatch.
//!
//! The choice is made once per process (like the `memchr` crate's dispatch): the
//! profile is resolved against the CPU into a small table of checked kernels per
//! temperature, and every later clear is one table walk of at most a few entries.

use std::sync::OnceLock;

use super::kernel::{Kernel, KernelFn};
use crate::cpu::{cpu, Cpu};
use crate::error::{Error, Result};

/// What the caller knows about the memory it is about to clear (seed 003's rule:
/// memory about to be touched is best zeroed hot, memory not in cache is best
/// zeroed with streaming stores).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Temperature {
    /// Nothing known: the choice assumes small buffers are cached and large ones not.
    #[default]
    Unknown,
    /// Recently touched and about to be used again: keep it in cache.
    Hot,
    /// Not in cache (e.g. freed long ago) or not needed soon: stream it.
    Cold,
}

impl Temperature {
    /// All three, in table order.
    pub const ALL: [Temperature; 3] = [Temperature::Unknown, Temperature::Hot, Temperature::Cold];

    /// "unknown", "hot" or "cold".
    pub const fn name(self) -> &'static str {
        match self {
            Temperature::Unknown => "unknown",
            Temperature::Hot => "hot",
            Temperature::Cold => "cold",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// Sizes below `below` bytes use `kernel`. A profile's classes ascend and the last
/// one has `below == usize::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeClass {
    /// Exclusive upper bound in bytes.
    pub below: usize,
    /// The kernel for this class.
    pub kernel: Kernel,
}

/// The size thresholds `Auto` follows, per temperature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Classes for [`Temperature::Unknown`].
    pub unknown: Vec<SizeClass>,
    /// Classes for [`Temperature::Hot`].
    pub hot: Vec<SizeClass>,
    /// Classes for [`Temperature::Cold`].
    pub cold: Vec<SizeClass>,
}

impl Profile {
    /// The built-in defaults for `cpu`, good without calibration.
    ///
    /// Why these: below ~2 KiB, temporal vector stores win (`rep stosb` has a
    /// start-up cost of tens of cycles); from there to where a hot extent stops
    /// fitting in cache, `rep stosb` wins (measured on a Xeon VM: 143 vs 123 GB/s
    /// at 4 KiB, equal from 16 KiB); past that, and for any cold memory of a page
    /// or more, streaming stores win: no read-for-ownership, no eviction of the
    /// caller's working set (same VM: 23.8 vs 9.8 GB/s at 128 MiB).
    pub fn builtin(cpu: &Cpu) -> Profile {
        let f = &cpu.features;
        let temporal = if f.avx512f {
            Kernel::Avx512
        } else if f.avx2 {
            Kernel::Avx2
        } else {
            Kernel::Portable
        };
        let extent = if f.erms { Kernel::RepStosb } else { temporal };
        let stream = if f.avx512f {
            Kernel::Avx512Stream
        } else if f.avx2 {
            Kernel::Avx2Stream
        } else if f.sse2 {
            Kernel::Movnti
        } else if f.dc_zva {
            Kernel::DcZva
        } else {
            Kernel::Portable
        };
        let l2 = cpu.l2();
        let hot_fits = hot_capacity_of(cpu);
        // glibc's `rep stosb` threshold, and ours for the same reason.
        let small = 2048;
        let class = |below, kernel| SizeClass { below, kernel };
        // On a CPU with odd cache sizes two thresholds could meet: keep the
        // classes strictly ascending, as `validate` requires.
        let ascending = |v: Vec<SizeClass>| {
            let mut out: Vec<SizeClass> = Vec::with_capacity(v.len());
            for c in v {
                if out.last().is_none_or(|l| l.below < c.below) {
                    out.push(c);
                }
            }
            out
        };
        Profile {
            // Not knowing, a buffer larger than L2 is more likely cold than hot,
            // and the loss from guessing wrong is lopsided: streaming a hot buffer
            // costs 10-45%, storing through the caches into a cold one 2-3x.
            unknown: ascending(vec![
                class(small, temporal),
                class(l2, extent),
                class(usize::MAX, stream),
            ]),
            hot: ascending(vec![
                class(small, temporal),
                class(hot_fits, extent),
                class(usize::MAX, stream),
            ]),
            cold: vec![class(4096, temporal), class(usize::MAX, stream)],
        }
    }

    /// The classes of one temperature.
    pub fn classes(&self, temp: Temperature) -> &[SizeClass] {
        match temp {
            Temperature::Unknown => &self.unknown,
            Temperature::Hot => &self.hot,
            Temperature::Cold => &self.cold,
        }
    }

    /// The kernel this profile names for `len` bytes at `temp` (before the CPU has
    /// had its say; see [`auto_kernel`] for what actually runs).
    pub fn kernel_for(&self, len: usize, temp: Temperature) -> Kernel {
        let classes = self.classes(temp);
        classes
            .iter()
            .find(|c| len < c.below)
            .or(classes.last())
            .map_or(Kernel::Portable, |c| c.kernel)
    }

    /// Checks the shape: every temperature has 1 to [`MAX_CLASSES`] classes,
    /// ascending, the last ending at `usize::MAX`.
    pub fn validate(&self) -> Result<()> {
        for temp in Temperature::ALL {
            let classes = self.classes(temp);
            if classes.len() > MAX_CLASSES {
                return Err(Error::invalid(format!(
                    "profile has {} '{}' classes; at most {MAX_CLASSES} are allowed",
                    classes.len(),
                    temp.name()
                )));
            }
            let Some(last) = classes.last() else {
                return Err(Error::invalid(format!(
                    "profile has no size classes for '{}'",
                    temp.name()
                )));
            };
            if last.below != usize::MAX {
                return Err(Error::invalid(format!(
                    "profile's last '{}' class must cover all sizes",
                    temp.name()
                )));
            }
            if classes.windows(2).any(|w| w[0].below >= w[1].below) {
                return Err(Error::invalid(format!(
                    "profile's '{}' classes do not ascend",
                    temp.name()
                )));
            }
        }
        Ok(())
    }
}

/// How many bytes of recently written memory can be expected to still be in
/// cache: where a "hot" extent stops being hot.
pub fn hot_capacity() -> usize {
    hot_capacity_of(cpu())
}

fn hot_capacity_of(cpu: &Cpu) -> usize {
    // Where a hot extent stops fitting in cache. AMD Zen elides the
    // read-for-ownership of `rep stos` above ~LLC size (seeds 001/002), so it
    // keeps pace with streaming there; elsewhere the LLC is shared with other
    // cores (and, in a VM, other tenants): measured on a 260 MiB-LLC Xeon VM,
    // temporal stores fell to DRAM speed from ~64 MiB, a quarter of the LLC.
    let llc = cpu.llc();
    if cpu.vendor == "AuthenticAMD" {
        llc
    } else {
        llc / 4
    }
}

/// The kernel to use instead of `k` on a CPU that lacks it: the same kind
/// (streaming or temporal), ending at `Portable`, which every CPU has.
fn fallback_chain(k: Kernel) -> &'static [Kernel] {
    if k.is_streaming() {
        &[
            Kernel::Avx512Stream,
            Kernel::Avx2Stream,
            Kernel::Movnti,
            Kernel::DcZva,
            Kernel::Portable,
        ]
    } else {
        &[
            Kernel::Avx512,
            Kernel::Avx2,
            Kernel::DcZva,
            Kernel::Portable,
        ]
    }
}

fn resolve(k: Kernel) -> KernelFn {
    k.checked()
        .or_else(|| fallback_chain(k).iter().find_map(|f| f.checked()))
        .expect("the portable kernel is always available")
}

/// At most this many size classes per temperature: the dispatch tables are
/// fixed arrays, so a pick reads one cache line and chases no pointer.
pub const MAX_CLASSES: usize = 8;

type Table = [(usize, KernelFn); MAX_CLASSES];

/// The process-wide choice, made once.
pub(crate) struct Dispatch {
    profile: Profile,
    forced: Option<KernelFn>,
    /// Per temperature, classes resolved to checked kernels; unused slots repeat
    /// the last class, so the walk always ends by `usize::MAX`.
    tables: [Table; 3],
}

impl Dispatch {
    /// pre: `profile.validate()` passed.
    fn new(profile: Profile, forced: Option<KernelFn>) -> Dispatch {
        debug_assert!(profile.validate().is_ok());
        let table = |temp| {
            let classes = profile.classes(temp);
            let last = classes.len() - 1;
            std::array::from_fn(|i| {
                let c = classes[i.min(last)];
                let below = if i >= last { usize::MAX } else { c.below };
                (below, forced.unwrap_or_else(|| resolve(c.kernel)))
            })
        };
        let tables = Temperature::ALL.map(table);
        Dispatch {
            profile,
            forced,
            tables,
        }
    }

    fn from_env() -> Dispatch {
        let forced = std::env::var("PREZERO_STRATEGY")
            .ok()
            .filter(|s| !s.is_empty() && s != "auto")
            .and_then(|s| match s.parse::<Kernel>().and_then(Kernel::require) {
                Ok(k) => Some(k),
                Err(e) => {
                    eprintln!("prezero: ignoring PREZERO_STRATEGY={s}: {e}");
                    None
                }
            });
        Dispatch::new(Profile::builtin(cpu()), forced)
    }

    /// The kernel for `len` bytes at `temp`.
    #[inline]
    pub(crate) fn pick(&self, len: usize, temp: Temperature) -> KernelFn {
        let table = &self.tables[temp.index()];
        for &(below, k) in &table[..MAX_CLASSES - 1] {
            if len < below {
                return k;
            }
        }
        table[MAX_CLASSES - 1].1
    }
}

#[inline]
pub(crate) fn dispatch() -> &'static Dispatch {
    static DISPATCH: OnceLock<Dispatch> = OnceLock::new();
    DISPATCH.get_or_init(Dispatch::from_env)
}

/// The profile `Auto` follows in this process.
pub fn active_profile() -> &'static Profile {
    &dispatch().profile
}

/// The kernel forced by `PREZERO_STRATEGY`, if any.
pub fn forced_kernel() -> Option<Kernel> {
    dispatch().forced.map(KernelFn::kernel)
}

/// The kernel `Auto` runs for `len` bytes at `temp` on this CPU.
pub fn auto_kernel(len: usize, temp: Temperature) -> Kernel {
    dispatch().pick(len, temp).kernel()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profile_is_valid_and_resolves() {
        let p = Profile::builtin(cpu());
        p.validate().unwrap();
        let d = Dispatch::new(p.clone(), None);
        for temp in Temperature::ALL {
            for len in [0, 1, 4096, 1 << 20, 1 << 30, usize::MAX] {
                assert!(d.pick(len, temp).kernel().is_available());
            }
        }
    }

    #[test]
    fn a_synthetic_profile_is_obeyed() {
        let class = |below, kernel| SizeClass { below, kernel };
        let table = vec![
            class(100, Kernel::Portable),
            class(10_000, Kernel::RepStosb),
            class(usize::MAX, Kernel::Movnti),
        ];
        let p = Profile {
            unknown: table.clone(),
            hot: table.clone(),
            cold: table,
        };
        p.validate().unwrap();
        let d = Dispatch::new(p, None);
        assert_eq!(d.pick(99, Temperature::Hot).kernel(), Kernel::Portable);
        let mid = d.pick(100, Temperature::Hot).kernel();
        let big = d.pick(10_000, Temperature::Cold).kernel();
        if cfg!(target_arch = "x86_64") {
            assert_eq!(mid, Kernel::RepStosb);
            assert_eq!(big, Kernel::Movnti);
        }
    }

    #[test]
    fn malformed_profiles_are_rejected() {
        let class = |below, kernel| SizeClass { below, kernel };
        let ok = vec![class(usize::MAX, Kernel::Portable)];
        let mut p = Profile {
            unknown: ok.clone(),
            hot: ok.clone(),
            cold: vec![],
        };
        assert!(p.validate().is_err());
        p.cold = vec![class(10, Kernel::Portable)];
        assert!(p.validate().is_err());
        p.cold = vec![
            class(10, Kernel::Portable),
            class(10, Kernel::Portable),
            class(usize::MAX, Kernel::Portable),
        ];
        assert!(p.validate().is_err());
    }

    #[test]
    fn forced_kernel_overrides_every_class() {
        let k = Kernel::Portable.checked().unwrap();
        let d = Dispatch::new(Profile::builtin(cpu()), Some(k));
        for temp in Temperature::ALL {
            assert_eq!(d.pick(1 << 30, temp).kernel(), Kernel::Portable);
        }
    }
}
