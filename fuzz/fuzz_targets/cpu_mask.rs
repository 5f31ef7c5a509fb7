//! `PREZERO_CPU` masks (`cpu/mask.rs`), on x86_64 and aarch64 names alike,
//! over any detected features and any answers about the instructions a level
//! requires: an error or features, never a panic. A mask only takes away: the
//! result never claims a feature detection did not find (the kernels' safety
//! rests on it). Case does not matter, and removals alone, applied again,
//! change nothing more.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use prezero::cpu::Features;
use prezero::fuzzing::cpu_mask;

#[derive(Arbitrary, Debug)]
struct Input {
    /// One bit per field of `Features`, in its order.
    detected: u16,
    aarch64: bool,
    /// One bit per instruction of `INSNS`: whether the CPU has it.
    has: u32,
    text: String,
}

/// The instructions the x86-64 levels require beyond `Features`, and one
/// name no level uses.
const INSNS: [&str; 17] = [
    "sse3",
    "ssse3",
    "sse4.1",
    "sse4.2",
    "popcnt",
    "cmpxchg16b",
    "avx",
    "bmi1",
    "bmi2",
    "fma",
    "lzcnt",
    "movbe",
    "f16c",
    "avx512cd",
    "avx512dq",
    "avx512vl",
    "none",
];

fn features(bits: u16) -> Features {
    let on = |i: u32| bits & (1 << i) != 0;
    Features {
        erms: on(0),
        fsrm: on(1),
        sse2: on(2),
        avx2: on(3),
        avx512f: on(4),
        avx512bw: on(5),
        clzero: on(6),
        dc_zva: on(7),
        mops: on(8),
    }
}

fn fields(f: &Features) -> [bool; 9] {
    [
        f.erms, f.fsrm, f.sse2, f.avx2, f.avx512f, f.avx512bw, f.clzero, f.dc_zva, f.mops,
    ]
}

fuzz_target!(|input: Input| {
    let detected = features(input.detected);
    let has = |insn: &str| {
        INSNS
            .iter()
            .position(|&n| n == insn)
            .is_some_and(|i| input.has & (1 << i) != 0)
    };
    let got = cpu_mask(&input.text, detected, input.aarch64, has);
    let upper = input.text.to_ascii_uppercase();
    assert_eq!(
        cpu_mask(&upper, detected, input.aarch64, has),
        got,
        "case changed the answer"
    );
    let Ok(masked) = got else { return };
    for (i, (&m, &d)) in fields(&masked).iter().zip(&fields(&detected)).enumerate() {
        assert!(
            !m || d,
            "feature {i} claimed but not detected: {masked:?} from {detected:?}"
        );
    }
    let removals_only = input
        .text
        .split(',')
        .map(str::trim)
        .all(|item| item.is_empty() || item.starts_with('-'));
    if removals_only {
        assert_eq!(
            cpu_mask(&input.text, masked, input.aarch64, has),
            Ok(masked),
            "removals applied twice removed more"
        );
    }
});
