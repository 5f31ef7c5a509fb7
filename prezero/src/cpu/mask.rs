//! `PREZERO_CPU`: run as a smaller CPU than this one, to test and compare the
//! paths another machine would take, in the manner of glibc's
//! `GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F`.
//!
//! The text is a comma-separated list, in any case, of at most one ISA level
//! (`x86-64` or `x86-64-v1`, `x86-64-v2`, `x86-64-v3`, `x86-64-v4`; `armv8.0`
//! ... `armv9.5`) and any number of removals (`-avx512f`, `-clzero`). A mask
//! only ever takes away: a level whose instructions this CPU lacks is an error,
//! never a pretence, so the masked [`Features`] claim nothing detection did not
//! find. The kernels' safety rests on that. On arm64 a level is checked only
//! for what prezero uses (FEAT_MOPS, from Armv8.8 / Armv9.3): the kernel
//! reports no level, and the other features of a level change no kernel here.

use super::Features;

/// The instruction-set family whose names a mask may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arch {
    X86_64,
    Aarch64,
    Other,
}

impl Arch {
    pub(crate) const HOST: Arch = if cfg!(target_arch = "x86_64") {
        Arch::X86_64
    } else if cfg!(target_arch = "aarch64") {
        Arch::Aarch64
    } else {
        Arch::Other
    };

    fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
            Arch::Other => "this architecture",
        }
    }
}

/// One feature of [`Features`], by the name masks and `prezero info` use.
pub(crate) struct Named {
    pub(crate) name: &'static str,
    pub(crate) arch: Arch,
    pub(crate) get: fn(&Features) -> bool,
    pub(crate) set: fn(&mut Features, bool),
    /// Features that cannot exist without this one, removed with it (no CPU
    /// has AVX-512 without AVX2).
    implies: &'static [&'static str],
}

macro_rules! named {
    ($arch:ident, $name:literal, $field:ident, [$($imp:literal),*]) => {
        Named {
            name: $name,
            arch: Arch::$arch,
            get: |f| f.$field,
            set: |f, v| f.$field = v,
            implies: &[$($imp),*],
        }
    };
}

/// Every feature prezero's kernels depend on.
pub(crate) const FEATURES: [Named; 9] = [
    named!(X86_64, "erms", erms, []),
    named!(X86_64, "fsrm", fsrm, []),
    named!(X86_64, "sse2", sse2, ["avx2", "avx512f", "avx512bw"]),
    named!(X86_64, "avx2", avx2, ["avx512f", "avx512bw"]),
    named!(X86_64, "avx512f", avx512f, ["avx512bw"]),
    named!(X86_64, "avx512bw", avx512bw, []),
    named!(X86_64, "clzero", clzero, []),
    named!(Aarch64, "dc-zva", dc_zva, []),
    named!(Aarch64, "mops", mops, []),
];

fn feature(name: &str) -> Option<&'static Named> {
    FEATURES.iter().find(|f| f.name == name)
}

/// An ISA level: what it requires of the CPU, and the vector features above it
/// that it removes. Requirements name either a [`FEATURES`] entry or an
/// instruction the level check asks the CPU about.
struct Level {
    requires: Vec<&'static str>,
    removes: &'static [&'static str],
}

const NO_AVX: &[&str] = &["avx2", "avx512f", "avx512bw"];
const NO_AVX512: &[&str] = &["avx512f", "avx512bw"];

/// The x86-64 levels in order: (name, what it adds to the levels before it,
/// what it removes).
const X86_LEVELS: [(&str, &[&str], &[&str]); 5] = [
    ("x86-64", &["sse2"], NO_AVX),
    ("x86-64-v1", &[], NO_AVX),
    (
        "x86-64-v2",
        &["sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "cmpxchg16b"],
        NO_AVX,
    ),
    (
        "x86-64-v3",
        &[
            "avx", "avx2", "bmi1", "bmi2", "fma", "lzcnt", "movbe", "f16c",
        ],
        NO_AVX512,
    ),
    (
        "x86-64-v4",
        &["avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"],
        &[],
    ),
];

fn x86_level(name: &str) -> Option<Level> {
    let at = X86_LEVELS.iter().position(|(n, _, _)| *n == name)?;
    Some(Level {
        requires: X86_LEVELS[..=at]
            .iter()
            .flat_map(|(_, adds, _)| adds.iter().copied())
            .collect(),
        removes: X86_LEVELS[at].2,
    })
}

/// `armv8.N` / `armv9.N`: FEAT_MOPS is part of Armv8.8 and Armv9.3; the other
/// features prezero uses are in every level.
fn arm_level(name: &str) -> Option<Level> {
    let (major, minor) = name.strip_prefix("armv")?.split_once('.')?;
    if minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let minor: u32 = minor.parse().ok()?;
    let has_mops = match (major, minor) {
        ("8", 0..=9) => minor >= 8,
        ("9", 0..=5) => minor >= 3,
        _ => return None,
    };
    Some(if has_mops {
        Level {
            requires: vec!["mops"],
            removes: &[],
        }
    } else {
        Level {
            requires: Vec::new(),
            removes: &["mops"],
        }
    })
}

fn level(arch: Arch, name: &str) -> Option<Level> {
    match arch {
        Arch::X86_64 => x86_level(name),
        Arch::Aarch64 => arm_level(name),
        Arch::Other => None,
    }
}

fn is_level_name(name: &str) -> bool {
    name.starts_with("x86-64") || name.starts_with("armv")
}

fn remove(f: &mut Features, name: &str) {
    if let Some(n) = feature(name) {
        (n.set)(f, false);
        for &dep in n.implies {
            remove(f, dep);
        }
    }
}

/// The features left when `text` is applied to `detected` on `arch`.
/// `cpu_has(insn)` answers for instructions a level requires that [`Features`]
/// does not carry (`sse4.2`, `avx512vl`, ...). The error says what is wrong.
pub(crate) fn apply(
    text: &str,
    detected: Features,
    arch: Arch,
    cpu_has: impl Fn(&str) -> bool,
) -> Result<Features, String> {
    let mut out = detected;
    let mut seen_level = None;
    let text = text.to_ascii_lowercase();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if let Some(name) = item.strip_prefix('-') {
            let known = feature(name).filter(|n| n.arch == arch).ok_or_else(|| {
                let names: Vec<&str> = FEATURES
                    .iter()
                    .filter(|n| n.arch == arch)
                    .map(|n| n.name)
                    .collect();
                format!(
                    "unknown feature '{name}' on {} (known: {})",
                    arch.name(),
                    names.join(", ")
                )
            })?;
            remove(&mut out, known.name);
        } else if is_level_name(item) {
            if let Some(first) = seen_level.replace(item.to_string()) {
                return Err(format!("two ISA levels, '{first}' and '{item}'"));
            }
            let l = level(arch, item)
                .ok_or_else(|| format!("'{item}' is not an ISA level of {}", arch.name()))?;
            let missing: Vec<&str> = l
                .requires
                .iter()
                .copied()
                .filter(|&r| match feature(r) {
                    Some(n) => !(n.get)(&detected),
                    None => !cpu_has(r),
                })
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "this CPU is not {item}: it lacks {}",
                    missing.join(", ")
                ));
            }
            for &r in l.removes {
                remove(&mut out, r);
            }
        } else {
            return Err(format!(
                "'{item}' is neither an ISA level (e.g. x86-64-v3, armv8.0) nor a removal (e.g. -avx512f)"
            ));
        }
    }
    Ok(out)
}

/// Whether the CPU has an instruction-set extension a level requires, by the
/// name `std::arch::is_x86_feature_detected!` uses.
#[cfg(target_arch = "x86_64")]
pub(crate) fn host_has(insn: &str) -> bool {
    use std::arch::is_x86_feature_detected as has;
    match insn {
        "sse2" => has!("sse2"),
        "sse3" => has!("sse3"),
        "ssse3" => has!("ssse3"),
        "sse4.1" => has!("sse4.1"),
        "sse4.2" => has!("sse4.2"),
        "popcnt" => has!("popcnt"),
        "cmpxchg16b" => has!("cmpxchg16b"),
        "avx" => has!("avx"),
        "avx2" => has!("avx2"),
        "bmi1" => has!("bmi1"),
        "bmi2" => has!("bmi2"),
        "fma" => has!("fma"),
        "lzcnt" => has!("lzcnt"),
        "movbe" => has!("movbe"),
        "f16c" => has!("f16c"),
        "avx512f" => has!("avx512f"),
        "avx512bw" => has!("avx512bw"),
        "avx512cd" => has!("avx512cd"),
        "avx512dq" => has!("avx512dq"),
        "avx512vl" => has!("avx512vl"),
        _ => false,
    }
}

/// Levels on other architectures require only [`Features`] entries.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn host_has(_insn: &str) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zen4() -> Features {
        Features {
            erms: true,
            fsrm: true,
            sse2: true,
            avx2: true,
            avx512f: true,
            avx512bw: true,
            clzero: true,
            dc_zva: false,
            mops: false,
        }
    }

    fn zen3() -> Features {
        Features {
            avx512f: false,
            avx512bw: false,
            ..zen4()
        }
    }

    fn x86(text: &str, f: Features) -> Result<Features, String> {
        apply(text, f, Arch::X86_64, |_| true)
    }

    #[test]
    fn removals_take_their_dependents_with_them() {
        let f = x86("-avx2", zen4()).unwrap();
        assert!(!f.avx2 && !f.avx512f && !f.avx512bw && f.clzero && f.erms);
        let f = x86(" -CLZERO , -avx512f ", zen4()).unwrap();
        assert!(!f.clzero && !f.avx512f && !f.avx512bw && f.avx2);
        // Removing what the CPU does not have is harmless: one mask serves a fleet.
        assert_eq!(x86("-avx512f", zen3()).unwrap(), zen3());
        assert_eq!(x86("", zen4()).unwrap(), zen4());
    }

    #[test]
    fn levels_cut_the_vector_features_and_keep_the_rest() {
        let v3 = x86("x86-64-v3", zen4()).unwrap();
        assert_eq!(v3, zen3());
        let v2 = x86("x86-64-v2,-clzero", zen4()).unwrap();
        assert!(!v2.avx2 && !v2.avx512f && !v2.clzero && v2.erms && v2.sse2);
        assert_eq!(x86("x86-64-v4", zen4()).unwrap(), zen4());
    }

    #[test]
    fn asking_for_more_than_the_cpu_has_is_an_error() {
        let e = x86("x86-64-v4", zen3()).unwrap_err();
        assert!(e.contains("avx512f") && e.contains("avx512bw"), "{e}");
        let e = apply("x86-64-v3", zen4(), Arch::X86_64, |i| i != "movbe").unwrap_err();
        assert!(e.contains("lacks movbe"), "{e}");
        let e = apply("armv8.8", Features::default(), Arch::Aarch64, |_| true).unwrap_err();
        assert!(e.contains("mops"), "{e}");
    }

    #[test]
    fn nonsense_is_an_error_that_says_why() {
        for (text, says) in [
            ("-avx512", "unknown feature 'avx512'"),
            ("-mops", "unknown feature 'mops' on x86_64"),
            ("x86-64-v5", "not an ISA level of x86_64"),
            ("armv8.0", "not an ISA level of x86_64"),
            ("x86-64-v2,x86-64-v3", "two ISA levels"),
            ("+avx2", "neither an ISA level"),
            ("avx2", "neither an ISA level"),
        ] {
            let e = x86(text, zen4()).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn arm_levels_gate_mops() {
        let arm = Features {
            dc_zva: true,
            mops: true,
            ..Features::default()
        };
        let a = |t| apply(t, arm, Arch::Aarch64, |_| false);
        assert!(!a("armv8.0").unwrap().mops && a("armv8.0").unwrap().dc_zva);
        assert!(a("armv8.8").unwrap().mops && a("armv9.3").unwrap().mops);
        assert!(!a("armv9.2").unwrap().mops);
        assert!(a("armv8.10").is_err() && a("armv10.0").is_err() && a("armv8.+8").is_err());
        assert!(!a("-dc-zva").unwrap().dc_zva);
        assert!(a("x86-64-v2").is_err() && a("-avx2").is_err());
    }
}
