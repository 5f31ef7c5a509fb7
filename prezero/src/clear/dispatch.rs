//! Which kernel `Auto` runs for which size and temperature: the cached dispatch.
//!
//! The choice is made once per process (like the `memchr` crate's dispatch): the
//! size classes (the profile file's, else the built-in ones) are resolved
//! against the CPU into a small table of checked kernels per temperature, and
//! every later clear is one table walk of at most a few entries.

use std::sync::OnceLock;

use super::classes::{tuning, SizeClasses, Temperature, MAX_CLASSES};
use super::kernel::{Kernel, KernelFn};
use crate::cpu::cpu;

/// The kernel to use instead of `k` on a CPU that lacks it: the same kind
/// (streaming or temporal), ending at `Portable`, which every CPU has.
fn fallback_chain(k: Kernel) -> &'static [Kernel] {
    // `dc zva` allocates lines without reading them: arm64's nearest thing to
    // a streaming store, and its fastest temporal clear too.
    if k.is_streaming() {
        &[
            Kernel::Avx512Stream,
            Kernel::Avx2Stream,
            Kernel::Clzero,
            Kernel::Movnti,
            Kernel::DcZva,
            Kernel::Portable,
        ]
    } else {
        &[
            Kernel::Avx512,
            Kernel::Avx2,
            Kernel::RepStosb,
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

type Table = [(usize, KernelFn); MAX_CLASSES];

/// The process-wide choice, made once.
pub(crate) struct Dispatch {
    size_classes: SizeClasses,
    forced: Option<KernelFn>,
    /// Per temperature, classes resolved to checked kernels; unused slots repeat
    /// the last class, so the walk always ends by `usize::MAX`.
    tables: [Table; 3],
}

impl Dispatch {
    /// pre: `size_classes.validate()` passed.
    fn new(size_classes: SizeClasses, forced: Option<KernelFn>) -> Dispatch {
        debug_assert!(size_classes.validate().is_ok());
        let table = |temp| {
            let classes = size_classes.classes(temp);
            let last = classes.len() - 1;
            std::array::from_fn(|i| {
                let c = classes[i.min(last)];
                let below = if i >= last { usize::MAX } else { c.below };
                (below, forced.unwrap_or_else(|| resolve(c.kernel)))
            })
        };
        let tables = Temperature::ALL.map(table);
        Dispatch {
            size_classes,
            forced,
            tables,
        }
    }

    fn from_env() -> Dispatch {
        let size_classes = tuning()
            .cloned()
            .unwrap_or_else(|| SizeClasses::builtin(cpu()));
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
        Dispatch::new(size_classes, forced)
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

/// The size classes `Auto` follows in this process.
pub fn active_size_classes() -> &'static SizeClasses {
    &dispatch().size_classes
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
    use crate::clear::SizeClass;

    #[test]
    fn builtin_profile_is_valid_and_resolves() {
        let p = SizeClasses::builtin(cpu());
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
        let p = SizeClasses {
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
    fn forced_kernel_overrides_every_class() {
        let k = Kernel::Portable.checked().unwrap();
        let d = Dispatch::new(SizeClasses::builtin(cpu()), Some(k));
        for temp in Temperature::ALL {
            assert_eq!(d.pick(1 << 30, temp).kernel(), Kernel::Portable);
        }
    }
}
