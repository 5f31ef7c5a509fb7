//! The size classes `Auto` follows per temperature: [`SizeClasses`], what its
//! classes mean, and the built-in one with the figures behind it. A profile
//! file's `"profile"` section is read and written as rows in
//! `profile/file.rs`; [`tuning`] is where clearing takes them, checked, and
//! `dispatch.rs` makes the process's choice from that.

use std::sync::OnceLock;

use super::kernel::Kernel;
use crate::cpu::Cpu;
use crate::error::{Error, Result};
use crate::profile::{self, ClassRow, ClassRows};

/// What the caller knows about the memory it is about to clear (the rule of the
/// Linux prezeroing work: memory about to be touched is best zeroed hot, memory not in cache is best
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

    pub(super) const fn index(self) -> usize {
        self as usize
    }
}

/// Sizes below `below` bytes use `kernel`. A temperature's classes ascend and the last
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
pub struct SizeClasses {
    /// Classes for [`Temperature::Unknown`].
    pub unknown: Vec<SizeClass>,
    /// Classes for [`Temperature::Hot`].
    pub hot: Vec<SizeClass>,
    /// Classes for [`Temperature::Cold`].
    pub cold: Vec<SizeClass>,
}

impl SizeClasses {
    /// The built-in defaults for `cpu`, good without calibration: checked
    /// against every machine recorded in `machines/` (see the `defaults` test).
    ///
    /// Why these, with the figures behind them (GB/s, medians of one run each,
    /// Zen 3 / Zen 4 under KVM, from `machines/*/`):
    /// - Below a page, libc's `memset`: its overlapping vector stores beat our
    ///   kernels and `rep stosb` there (hot 2 KiB: 92 / 105 against `rep stosb`
    ///   45 / 86 and AVX 76 / 94; hot 512 B: 58 / 72 against AVX 39 / 54).
    /// - From a page to where a hot extent stops fitting in cache, `rep stosb`
    ///   (hot 64 KiB to 8 MiB: within 5% of the best everywhere).
    /// - Past that, and for cold memory from `COLD_STREAM_FROM`, streaming
    ///   stores: no read-for-ownership, no eviction of the caller's working set
    ///   (cold 2 MiB: 48 / 76 against `rep stosb` 14 / 27). Cold single pages
    ///   are the exception: streaming stores pay their fence on every call
    ///   (cold 4 KiB on Zen 4: 16 against 23-25 for `rep stosb`).
    /// - An x86 CPU without ERMS has no fast temporal extent kernel, so cold
    ///   memory streams from `COLD_STREAM_FROM_NO_ERMS` (Zen 1, where KVM hides
    ///   ERMS). aarch64 keeps the three classes: no arm64 machine is recorded.
    pub fn builtin(cpu: &Cpu) -> SizeClasses {
        let f = &cpu.features;
        let small = Kernel::Portable;
        let extent = if f.erms {
            Kernel::RepStosb
        } else {
            Kernel::Portable
        };
        let stream = STREAMING_PREFERENCE
            .into_iter()
            .filter(|&k| !(k == Kernel::Avx512Stream && splits_512_bit_stores(cpu)))
            .find(|k| k.is_available_with(f))
            .unwrap_or(Kernel::Portable);
        let page = 4096;
        let l2 = cpu.l2();
        let hot_fits = cpu.hot_capacity();
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
        SizeClasses {
            // Not knowing, a buffer larger than L2 is more likely cold than hot,
            // and the loss from guessing wrong is lopsided: streaming a hot buffer
            // costs 10-45%, storing through the caches into a cold one 2-3x.
            unknown: ascending(vec![
                class(page, small),
                class(l2, extent),
                class(usize::MAX, stream),
            ]),
            hot: ascending(vec![
                class(page, small),
                class(hot_fits, extent),
                class(usize::MAX, stream),
            ]),
            cold: if f.erms || cfg!(not(target_arch = "x86_64")) {
                ascending(vec![
                    class(page, small),
                    class(COLD_STREAM_FROM, extent),
                    class(usize::MAX, stream),
                ])
            } else {
                ascending(vec![
                    class(COLD_STREAM_FROM_NO_ERMS, small),
                    class(usize::MAX, stream),
                ])
            },
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

    /// The kernel these classes name for `len` bytes at `temp` (before the CPU has
    /// had its say; see [`auto_kernel`](super::auto_kernel) for what actually runs).
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

impl SizeClasses {
    /// The classes a profile file's `"profile"` rows name, checked: every
    /// kernel known, every temperature's classes as [`validate`](Self::validate)
    /// requires.
    pub fn from_rows(rows: &ClassRows) -> Result<SizeClasses> {
        let classes = |rows: &[ClassRow]| -> Result<Vec<SizeClass>> {
            rows.iter()
                .map(|r| {
                    Ok(SizeClass {
                        below: r.below.unwrap_or(usize::MAX),
                        kernel: r.kernel.parse()?,
                    })
                })
                .collect()
        };
        let p = SizeClasses {
            unknown: classes(&rows.unknown)?,
            hot: classes(&rows.hot)?,
            cold: classes(&rows.cold)?,
        };
        p.validate()?;
        Ok(p)
    }

    /// The rows a profile file keeps for these classes (the last class's
    /// `usize::MAX` as `null`).
    pub fn to_rows(&self) -> ClassRows {
        let rows = |classes: &[SizeClass]| {
            classes
                .iter()
                .map(|c| ClassRow {
                    below: Some(c.below).filter(|&b| b != usize::MAX),
                    kernel: c.kernel.name().into(),
                })
                .collect()
        };
        ClassRows {
            unknown: rows(&self.unknown),
            hot: rows(&self.hot),
            cold: rows(&self.cold),
        }
    }
}

/// The size classes of the profile file this process follows, checked once:
/// the one point where clearing takes its tuning from the file. `None`: no
/// file is followed, or its classes cannot be used (said once on stderr).
pub(crate) fn tuning() -> Option<&'static SizeClasses> {
    static TUNING: OnceLock<Option<SizeClasses>> = OnceLock::new();
    TUNING
        .get_or_init(|| {
            let rows = profile::loaded().classes.as_ref()?;
            SizeClasses::from_rows(rows)
                .map_err(|e| profile::refuse_section("profile", e))
                .ok()
        })
        .as_ref()
}

/// The streaming kernels in the order the defaults prefer them, by what they
/// reached on cold 1 MiB-1 GiB extents: the widest vector stores first (Zen 4:
/// `avx512-nt` 71-82, `avx2-nt` 67-79, `clzero` 61-77, `movnti` 37-39; Zen 3:
/// `avx2-nt` 40-51, `clzero` 40-50, `movnti` 25). `clzero` ties `avx2-nt` on
/// Zen 3 and trails on Zen 4, but doubles `movnti`, so it is what a CPU
/// without AVX (or run as `x86-64-v2`) streams with. AMD family 19h skips
/// `avx512-nt` (see `splits_512_bit_stores`).
const STREAMING_PREFERENCE: [Kernel; 5] = [
    Kernel::Avx512Stream,
    Kernel::Avx2Stream,
    Kernel::Clzero,
    Kernel::Movnti,
    Kernel::DcZva,
];

/// AMD family 19h (Zen 3, Zen 4) executes a 512-bit store as two 256-bit
/// halves, so `avx512-nt` gains nothing over `avx2-nt`, and in the Zen 4
/// recordings it lost more often than it won: cold 2 MiB 69 against 81 GB/s
/// (calibrate: 0.71 of `avx2-nt`), cold 64 KiB 0.85-0.94, 1 GiB 0.85; the other
/// way at most 0.88. Zen 5 (family 1Ah) has full-width stores, and Intel's
/// AVX-512 CPUs were not recorded: both keep `avx512-nt` first.
fn splits_512_bit_stores(cpu: &Cpu) -> bool {
    cpu.vendor == "AuthenticAMD" && cpu.family == 0x19
}

/// From this size cold memory is cleared with streaming stores. Below it, the
/// fence a streaming kernel ends with is not paid back. Cold, Zen 4, streaming
/// against `rep stosb` (GB/s): 4 KiB 16 / 23-25, 8 KiB 24 / 24, 16 KiB 35 / 21,
/// 64 KiB 64 / 23. Zen 3 ties at 4 KiB (14 / 14) and streams 3x faster at 64 KiB.
const COLD_STREAM_FROM: usize = 8 << 10;

/// Without ERMS no temporal kernel is fast on cold memory past a few lines, so
/// streaming pays its fence back from here. Zen 1 under KVM, which hides ERMS
/// (cold, GB/s, clzero / avx2-nt / portable / `rep stosb`): 512 B 2.7 / 2.7 /
/// 6.5 / 6.6; 2 KiB 9.4 / 8.6 / 8.1 / 8.2; 4 KiB 14.1 / 13.6 / 8.3 / 8.7.
const COLD_STREAM_FROM_NO_ERMS: usize = 2 << 10;

/// At most this many size classes per temperature: the dispatch tables are
/// fixed arrays, so a pick reads one cache line and chases no pointer.
pub const MAX_CLASSES: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{test_file_text, ProfileFile, PROFILE_FORMAT, TEST_CLASSES};

    /// A profile file's classes as the process takes them: the file read,
    /// then its rows converted.
    fn read_classes(text: &str) -> Result<SizeClasses> {
        ProfileFile::parse(text).and_then(|f| SizeClasses::from_rows(&f.classes))
    }

    #[test]
    fn profile_files_round_trip_and_refuse_what_is_wrong() {
        let good = || test_file_text(PROFILE_FORMAT, TEST_CLASSES);
        let p = read_classes(&good()).unwrap();
        assert_eq!(
            p.unknown[0],
            SizeClass {
                below: 4096,
                kernel: Kernel::Portable
            }
        );
        assert_eq!(p.cold[0].below, usize::MAX);
        let f = ProfileFile::parse(&good()).unwrap();
        assert_eq!(p.to_rows(), f.classes, "written back as read");
        // Another format is reported as such, not parsed further.
        let e = read_classes(&test_file_text(99, "7")).unwrap_err();
        assert!(e.to_string().contains("format 99"), "{e}");
        let bad = [
            good()[..60].to_string(),
            r#"{"cpu_model": "x", "date": "d", "profile": {}}"#.to_string(),
            test_file_text(PROFILE_FORMAT, r#"{"hot": [], "cold": [], "unknown": []}"#),
            test_file_text(
                PROFILE_FORMAT,
                &TEST_CLASSES.replace("movnti", "warp-drive"),
            ),
            test_file_text(
                PROFILE_FORMAT,
                &TEST_CLASSES.replace("null, \"kernel\": \"movnti", "5, \"kernel\": \"movnti"),
            ),
            "not json".to_string(),
        ];
        for b in bad {
            let e = read_classes(&b).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{b}: {e:?}");
        }
    }

    #[test]
    fn malformed_profiles_are_rejected() {
        let class = |below, kernel| SizeClass { below, kernel };
        let ok = vec![class(usize::MAX, Kernel::Portable)];
        let mut p = SizeClasses {
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
}
