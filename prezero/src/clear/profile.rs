//! Which kernel `Auto` uses for which size and temperature, and the cached dispatch.
//!
//! The choice is made once per process (like the `memchr` crate's dispatch): the
//! profile is resolved against the CPU into a small table of checked kernels per
//! temperature, and every later clear is one table walk of at most a few entries.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::kernel::{Kernel, KernelFn};
use crate::cpu::{cpu, Cpu};
use crate::error::{Error, Result};
use crate::json::Json;
use crate::template::TemplateProfile;

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
    pub fn builtin(cpu: &Cpu) -> Profile {
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
        Profile {
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

/// At most this many size classes per temperature: the dispatch tables are
/// fixed arrays, so a pick reads one cache line and chases no pointer.
pub const MAX_CLASSES: usize = 8;

type Table = [(usize, KernelFn); MAX_CLASSES];

/// The process-wide choice, made once.
pub(crate) struct Dispatch {
    profile: Profile,
    /// Where the profile came from, for `prezero info`.
    source: String,
    forced: Option<KernelFn>,
    /// Per temperature, classes resolved to checked kernels; unused slots repeat
    /// the last class, so the walk always ends by `usize::MAX`.
    tables: [Table; 3],
    /// The profile's template choice, if it has one.
    template: Option<TemplateProfile>,
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
            source: "built-in defaults".into(),
            forced,
            tables,
            template: None,
        }
    }

    fn from_env() -> Dispatch {
        let (profile, template, source) = profile_from_env();
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
        let mut d = Dispatch::new(profile, forced);
        d.source = source;
        d.template = template;
        d
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

/// Where the active profile came from, and why (e.g. "built-in defaults (no
/// profile at ~/.config/prezero/profile.json)").
pub fn profile_source() -> &'static str {
    &dispatch().source
}

/// The template choice of the active profile, if it has one (the template
/// functions use the built-in choice otherwise).
pub fn active_template_profile() -> Option<TemplateProfile> {
    dispatch().template
}

/// The kernel forced by `PREZERO_STRATEGY`, if any.
pub fn forced_kernel() -> Option<Kernel> {
    dispatch().forced.map(KernelFn::kernel)
}

/// The kernel `Auto` runs for `len` bytes at `temp` on this CPU.
pub fn auto_kernel(len: usize, temp: Temperature) -> Kernel {
    dispatch().pick(len, temp).kernel()
}

/// The profile file format this library reads (`"format"` in the file).
/// Format 2 added `"cpu_id"`: format 1 matched on the brand string alone, which
/// a VM often reduces to "AMD EPYC" for Zen 3 and Zen 4 alike.
pub const PROFILE_FORMAT: u32 = 2;

/// A calibration profile as stored by `prezero calibrate`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileFile {
    /// `"format"`: must equal [`PROFILE_FORMAT`].
    pub format: u32,
    /// `"cpu_model"`: the CPU's name, for people.
    pub cpu_model: String,
    /// `"cpu_id"`: [`Cpu::identity`] where it was measured (vendor, family,
    /// model, stepping or MIDR, and the features in force); any other CPU, or
    /// this one under another `PREZERO_CPU`, ignores the profile.
    pub cpu_id: String,
    /// `"date"`, as written.
    pub date: String,
    /// `"profile"`: the size classes.
    pub profile: Profile,
    /// `"template"`: the template fills' store choice; profiles written
    /// before calibrate measured it have none.
    pub template: Option<TemplateProfile>,
}

/// Where `prezero calibrate` writes and the library looks by default:
/// `$XDG_CONFIG_HOME/prezero/profile.json`, else `~/.config/prezero/profile.json`.
pub fn default_profile_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("prezero").join("profile.json"))
}

/// Reads and checks a profile file. The error says what is wrong, in words.
pub fn read_profile_file(path: &Path) -> Result<ProfileFile> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::invalid(format!("cannot read it: {e}")))?;
    parse_profile_file(&text)
}

fn parse_profile_file(text: &str) -> Result<ProfileFile> {
    let v = Json::parse(text).map_err(|e| Error::invalid(format!("not valid JSON: {e}")))?;
    let field = |k: &str| {
        v.get(k)
            .ok_or_else(|| Error::invalid(format!("missing field \"{k}\"")))
    };
    let format = field("format")?
        .as_f64()
        .filter(|f| f.fract() == 0.0 && *f >= 0.0)
        .ok_or_else(|| Error::invalid("\"format\" is not a whole number"))? as u32;
    let text_of = |k: &str| -> Result<String> {
        Ok(field(k)?
            .as_str()
            .ok_or_else(|| Error::invalid(format!("\"{k}\" is not a string")))?
            .to_owned())
    };
    let cpu_model = text_of("cpu_model")?;
    let date = text_of("date")?;
    if format != PROFILE_FORMAT {
        // The rest may be laid out differently: do not read it.
        return Err(Error::invalid(format!(
            "it has format {format}, this library reads format {PROFILE_FORMAT}"
        )));
    }
    let cpu_id = text_of("cpu_id")?;
    let p = field("profile")?;
    let classes = |t: Temperature| -> Result<Vec<SizeClass>> {
        let arr = p.get(t.name()).and_then(Json::as_array).ok_or_else(|| {
            Error::invalid(format!("\"profile.{}\" is missing or not a list", t.name()))
        })?;
        arr.iter()
            .map(|c| {
                let below = match c.get("below") {
                    Some(Json::Null) => usize::MAX,
                    Some(b) => b
                        .as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                        .ok_or_else(|| Error::invalid("a \"below\" is not a byte count"))?
                        as usize,
                    None => return Err(Error::invalid("a size class has no \"below\"")),
                };
                let kernel = c
                    .get("kernel")
                    .and_then(Json::as_str)
                    .ok_or_else(|| Error::invalid("a size class has no \"kernel\""))?
                    .parse()?;
                Ok(SizeClass { below, kernel })
            })
            .collect()
    };
    let profile = Profile {
        unknown: classes(Temperature::Unknown)?,
        hot: classes(Temperature::Hot)?,
        cold: classes(Temperature::Cold)?,
    };
    profile.validate()?;
    let template = v
        .get("template")
        .map(TemplateProfile::from_json)
        .transpose()?;
    Ok(ProfileFile {
        format,
        cpu_model,
        cpu_id,
        date,
        profile,
        template,
    })
}

/// The profile this process uses, its template choice, and a sentence saying
/// where they came from. Problems are reported once on stderr; the built-in
/// defaults are used then.
fn profile_from_env() -> (Profile, Option<TemplateProfile>, String) {
    let (p, source) = profile_file_from_env();
    match p {
        Some(f) => (f.profile, f.template, source),
        None => (Profile::builtin(cpu()), None, source),
    }
}

fn profile_file_from_env() -> (Option<ProfileFile>, String) {
    let (path, explicit) = match std::env::var_os("PREZERO_PROFILE") {
        Some(v) if v == "none" => return (None, "built-in defaults (PREZERO_PROFILE=none)".into()),
        Some(v) if !v.is_empty() => (PathBuf::from(v), true),
        _ => match default_profile_path() {
            Some(p) => (p, false),
            None => {
                return (
                    None,
                    "built-in defaults (no HOME or XDG_CONFIG_HOME)".into(),
                )
            }
        },
    };
    let shown = path.display();
    if !explicit && !path.exists() {
        return (
            None,
            format!("built-in defaults (no profile at {shown}; run `prezero calibrate`)"),
        );
    }
    let refuse = |why: String| {
        eprintln!("prezero: ignoring profile {shown}: {why}; using the built-in defaults");
        (None, format!("built-in defaults ({shown} ignored: {why})"))
    };
    match read_profile_file(&path) {
        Err(e) => refuse(e.to_string()),
        Ok(f) if f.cpu_id != cpu().identity() => refuse(format!(
            "it was measured on \"{}\" ({}), this CPU is \"{}\" ({})",
            f.cpu_model,
            f.cpu_id,
            cpu().model_name,
            cpu().identity()
        )),
        Ok(f) => {
            let date = f.date.clone();
            (Some(f), format!("{shown} (calibrated {date})"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_text(format: u32, model: &str, body: &str) -> String {
        format!(
            r#"{{"format": {format}, "cpu_model": "{model}", "cpu_id": "{}", "date": "2026-11-22", "profile": {body}}}"#,
            cpu().identity()
        )
    }

    const GOOD: &str = r#"{"unknown": [{"below": 4096, "kernel": "portable"}, {"below": null, "kernel": "portable"}],
        "hot": [{"below": null, "kernel": "portable"}], "cold": [{"below": null, "kernel": "movnti"}]}"#;

    #[test]
    fn profile_files_round_trip_and_refuse_what_is_wrong() {
        let model = cpu().model_name.replace('"', "");
        let f = parse_profile_file(&file_text(PROFILE_FORMAT, &model, GOOD)).unwrap();
        assert_eq!(
            f.profile.unknown[0],
            SizeClass {
                below: 4096,
                kernel: Kernel::Portable
            }
        );
        assert_eq!(f.profile.cold[0].below, usize::MAX);
        // Another format is reported as such, not parsed further.
        let e = parse_profile_file(&file_text(99, &model, "7")).unwrap_err();
        assert!(e.to_string().contains("format 99"), "{e}");
        let bad = [
            file_text(PROFILE_FORMAT, &model, GOOD)[..60].to_string(),
            r#"{"cpu_model": "x", "date": "d", "profile": {}}"#.to_string(),
            file_text(
                PROFILE_FORMAT,
                &model,
                r#"{"hot": [], "cold": [], "unknown": []}"#,
            ),
            file_text(
                PROFILE_FORMAT,
                &model,
                &GOOD.replace("movnti", "warp-drive"),
            ),
            file_text(
                PROFILE_FORMAT,
                &model,
                &GOOD.replace("null, \"kernel\": \"movnti", "5, \"kernel\": \"movnti"),
            ),
            "not json".to_string(),
        ];
        for b in bad {
            let e = parse_profile_file(&b).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{b}: {e:?}");
        }
    }

    #[test]
    fn unreadable_files_and_directories_are_errors_not_panics() {
        let dir = std::env::temp_dir();
        assert!(read_profile_file(&dir)
            .unwrap_err()
            .to_string()
            .contains("cannot read"));
        assert!(read_profile_file(Path::new("/proc/self/mem")).is_err());
        assert!(read_profile_file(Path::new("/nonexistent/profile.json")).is_err());
    }

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
