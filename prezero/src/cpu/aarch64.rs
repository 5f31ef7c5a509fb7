//! aarch64: MIDR_EL1 names the core, the ID registers its features, DCZID_EL0
//! the `dc zva` block.

use super::{Cache, Features};

/// MIDR_EL1 names the core exactly (implementer, part, variant, revision):
/// what a calibration profile must match, since arm64 servers of one
/// vendor differ core by core.
pub(super) fn identity() -> (String, u32, u32, u32, String) {
    decode_midr(midr())
}

/// (vendor, implementer, part, variant << 4 | revision, core name).
pub(super) fn decode_midr(midr: u32) -> (String, u32, u32, u32, String) {
    let implementer = (midr >> 24) & 0xff;
    let variant = (midr >> 20) & 0xf;
    let part = (midr >> 4) & 0xfff;
    let revision = midr & 0xf;
    let vendor =
        implementer_name(implementer).map_or_else(|| format!("0x{implementer:02x}"), str::to_owned);
    let name =
        core_name(implementer, part).map_or_else(|| format!("part 0x{part:03x}"), str::to_owned);
    (vendor, implementer, part, variant << 4 | revision, name)
}

/// From sysfs (CPU 0's), else the register itself (Linux emulates the read
/// where it sets HWCAP_CPUID; on a big.LITTLE machine that is whichever core
/// this thread is on), else /proc/cpuinfo's fields; 0 if none answers.
fn midr() -> u32 {
    let sysfs = crate::sys::read_text("/sys/devices/system/cpu/cpu0/regs/identification/midr_el1")
        .and_then(|t| u64::from_str_radix(t.trim_start_matches("0x"), 16).ok());
    if let Some(v) = sysfs {
        return v as u32;
    }
    const HWCAP_CPUID: u64 = 1 << 11;
    if crate::sys::auxval(libc::AT_HWCAP) & HWCAP_CPUID != 0 {
        let v: u64;
        // SAFETY: HWCAP_CPUID says the kernel emulates EL0 reads of MIDR_EL1;
        // the read has no side effects.
        unsafe { core::arch::asm!("mrs {}, midr_el1", out(reg) v, options(nomem, nostack)) };
        return v as u32;
    }
    // Linux prints the revision in decimal and the other fields in hex.
    let field = |name: &str, radix| {
        crate::sys::cpuinfo_field(name)
            .and_then(|p| u32::from_str_radix(p.trim_start_matches("0x"), radix).ok())
            .unwrap_or(0)
    };
    field("CPU implementer", 16) << 24
        | (field("CPU variant", 16) & 0xf) << 20
        | (field("CPU part", 16) & 0xfff) << 4
        | field("CPU revision", 10) & 0xf
}

fn implementer_name(code: u32) -> Option<&'static str> {
    Some(match code {
        0x41 => "ARM",
        0x42 => "Broadcom",
        0x43 => "Cavium",
        0x46 => "Fujitsu",
        0x48 => "HiSilicon",
        0x4e => "NVIDIA",
        0x50 => "APM",
        0x51 => "Qualcomm",
        0x61 => "Apple",
        0x6d => "Microsoft",
        0xc0 => "Ampere",
        _ => return None,
    })
}

/// The cores arm64 servers and CI runners are built from.
fn core_name(implementer: u32, part: u32) -> Option<&'static str> {
    Some(match (implementer, part) {
        (0x41, 0xd03) => "Cortex-A53",
        (0x41, 0xd05) => "Cortex-A55",
        (0x41, 0xd07) => "Cortex-A57",
        (0x41, 0xd08) => "Cortex-A72",
        (0x41, 0xd0b) => "Cortex-A76",
        (0x41, 0xd0c) => "Neoverse-N1",
        (0x41, 0xd40) => "Neoverse-V1",
        (0x41, 0xd49) => "Neoverse-N2",
        (0x41, 0xd4f) => "Neoverse-V2",
        (0x41, 0xd84) => "Neoverse-V3",
        (0x41, 0xd8e) => "Neoverse-N3",
        (0x48, 0xd01) => "Kunpeng-920",
        (0xc0, 0xac3) => "Ampere-1",
        (0xc0, 0xac4) => "Ampere-1A",
        (0xc0, 0xac5) => "Ampere-1B",
        _ => return None,
    })
}

fn dczid() -> u64 {
    let v: u64;
    // SAFETY: DCZID_EL0 is readable from EL0 on every ARMv8 CPU; no side effects.
    unsafe { core::arch::asm!("mrs {}, dczid_el0", out(reg) v, options(nomem, nostack)) };
    v
}

pub(super) fn features() -> Features {
    // HWCAP2_MOPS is bit 43 of AT_HWCAP2 (Linux 6.5+); libc does not name it yet.
    const HWCAP2_MOPS: u64 = 1 << 43;
    let hwcap2 = crate::sys::auxval(libc::AT_HWCAP2);
    Features {
        dc_zva: dczid() & (1 << 4) == 0,
        mops: hwcap2 & HWCAP2_MOPS != 0,
        ..Features::default()
    }
}

pub(super) fn cpuid_caches() -> Vec<Cache> {
    Vec::new()
}

/// DCZID_EL0.BS is log2 of the block size in 4-byte words.
pub(super) fn dc_zva_block() -> usize {
    4usize << (dczid() & 0xf)
}
