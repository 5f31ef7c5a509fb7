//! x86_64: CPUID names the CPU, lists its features and, where sysfs does
//! not, its caches.

use super::{Cache, Features};
use core::arch::x86_64::{__cpuid_count, CpuidResult};

fn cpuid(leaf: u32, sub: u32) -> CpuidResult {
    __cpuid_count(leaf, sub)
}

fn max_leaf() -> u32 {
    cpuid(0, 0).eax
}

fn max_ext_leaf() -> u32 {
    cpuid(0x8000_0000, 0).eax
}

pub(super) fn identity() -> (String, u32, u32, u32, String) {
    let r = cpuid(0, 0);
    let mut v = Vec::with_capacity(12);
    for reg in [r.ebx, r.edx, r.ecx] {
        v.extend_from_slice(&reg.to_le_bytes());
    }
    let vendor = String::from_utf8_lossy(&v).into_owned();
    let sig = cpuid(1, 0).eax;
    let base_family = (sig >> 8) & 0xf;
    let base_model = (sig >> 4) & 0xf;
    let family = if base_family == 0xf {
        base_family + ((sig >> 20) & 0xff)
    } else {
        base_family
    };
    let model = if base_family == 0x6 || base_family == 0xf {
        base_model | (((sig >> 16) & 0xf) << 4)
    } else {
        base_model
    };
    let mut name = Vec::with_capacity(48);
    if max_ext_leaf() >= 0x8000_0004 {
        for leaf in 0x8000_0002..=0x8000_0004 {
            let r = cpuid(leaf, 0);
            for reg in [r.eax, r.ebx, r.ecx, r.edx] {
                name.extend_from_slice(&reg.to_le_bytes());
            }
        }
    }
    let name = String::from_utf8_lossy(&name)
        .trim_matches(char::from(0))
        .trim()
        .to_owned();
    (vendor, family, model, sig & 0xf, name)
}

pub(super) fn features() -> Features {
    // CLZERO is AMD-only and not a Rust target feature: CPUID 0x80000008 EBX bit 0.
    let clzero = max_ext_leaf() >= 0x8000_0008 && cpuid(0x8000_0008, 0).ebx & 1 != 0;
    // FSRM: CPUID 7.0 EDX bit 4 (std does not detect it).
    let fsrm = max_leaf() >= 7 && cpuid(7, 0).edx & (1 << 4) != 0;
    Features {
        erms: std::arch::is_x86_feature_detected!("ermsb"),
        fsrm,
        sse2: std::arch::is_x86_feature_detected!("sse2"),
        avx2: std::arch::is_x86_feature_detected!("avx2"),
        avx512f: std::arch::is_x86_feature_detected!("avx512f"),
        avx512bw: std::arch::is_x86_feature_detected!("avx512bw"),
        clzero,
        dc_zva: false,
        mops: false,
    }
}

/// Deterministic cache parameters: leaf 4 on Intel, 0x8000001D on AMD.
pub(super) fn cpuid_caches() -> Vec<Cache> {
    let leaf = if max_leaf() >= 4 && cpuid(4, 0).eax & 0x1f != 0 {
        4
    } else if max_ext_leaf() >= 0x8000_001d {
        0x8000_001d
    } else {
        return Vec::new();
    };
    let mut caches = Vec::new();
    for sub in 0..16 {
        let r = cpuid(leaf, sub);
        let kind = match r.eax & 0x1f {
            0 => break,
            1 => "Data",
            2 => continue,
            _ => "Unified",
        };
        let ways = ((r.ebx >> 22) & 0x3ff) as usize + 1;
        let parts = ((r.ebx >> 12) & 0x3ff) as usize + 1;
        let line = (r.ebx & 0xfff) as usize + 1;
        let sets = r.ecx as usize + 1;
        caches.push(Cache {
            level: (r.eax >> 5) & 0x7,
            kind: kind.into(),
            size: ways * parts * line * sets,
        });
    }
    caches.sort_by_key(|c| c.level);
    caches
}

pub(super) fn dc_zva_block() -> usize {
    0
}
