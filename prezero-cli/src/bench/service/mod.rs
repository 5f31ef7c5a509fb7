//! `prezero bench service`: what `prezero serve` costs a client and what it
//! saves one. Hand-out latency (p50/p99) per request size, the background
//! scrubber's GB/s beside the clearing engine's cold-memory rate, and a "VM
//! boot": N GiB of zeroed, populated 2 MiB memory from the service against
//! the kernel paths a VMM uses today, host-warm and host-cold; and "vmm": an
//! unmodified QEMU ready on service memory (`prezero client exec`) against
//! QEMU's own preallocation.
//!
//! Here: the arguments and the order of the tables; `handout.rs`: hand-out
//! latency and the scrub rate; `vm_boot.rs`: the VM boot; `vmm.rs`: QEMU.

mod charging;
mod handout;
mod vm_boot;
mod vmm;

use std::path::PathBuf;

use anyhow::{bail, Result};
use prezero::{PageKind, Temperature};

use crate::units::{parse_size_or_zero, parse_sizes};
use handout::latency_and_scrub;
use vm_boot::vm_boot;
use vmm::vmm;

#[derive(clap::Args)]
pub struct Args {
    /// Request sizes for the hand-out latency table.
    #[arg(long, value_delimiter = ',', default_value = "2M,64M,1G,4G,16G")]
    sizes: Vec<String>,
    /// Page sizes: 2MB, 1GB.
    #[arg(
        short = 'p',
        long = "page",
        value_delimiter = ',',
        default_value = "2MB"
    )]
    pages: Vec<String>,
    /// Hand-outs per size (fewer above 1 GiB: each waits for its scrub).
    #[arg(long, default_value_t = 100)]
    reps: usize,
    /// Bytes of the VM-boot scenario (2 MiB pages); 0 skips it.
    #[arg(long, default_value = "8G")]
    boot: String,
    /// Runs per VM-boot row.
    #[arg(long, default_value_t = 3)]
    boot_runs: usize,
    /// Also run the VM boot host-cold: before each kernel run the hugetlb pages
    /// go back to the buddy allocator and this long passes, so the host reclaims
    /// them (VMs only).
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "5")]
    host_cold: Option<u64>,
    /// Guest RAM of the `vmm` row: QEMU ready on service memory (through
    /// `prezero client exec`) against QEMU's own preallocation; 0 skips it.
    #[arg(long, default_value = "4G")]
    vmm_size: String,
    /// Runs per vmm row (after one untimed run of each).
    #[arg(long, default_value_t = 5)]
    vmm_runs: usize,
    /// Only the charging rows (root, a cgroup hierarchy): hand-outs of the
    /// first --sizes size and QEMU of --vmm-size charged to a tenant cgroup
    /// against the shared pool, and where the CPU of its scrubs lands.
    #[arg(long, conflicts_with = "socket")]
    charging: bool,
    /// Use the daemon at this socket instead of starting a private one.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Reserve the hugetlb pages the run needs (restored afterwards; root).
    #[arg(long)]
    reserve: bool,
    /// One JSON object per figure.
    #[arg(long)]
    json: bool,
}

/// Most bytes of memory this run may take, leaving 4 GiB to everything else.
fn memory_budget() -> usize {
    let avail = prezero::memory().available;
    // Free hugetlb pages are not in MemAvailable but are usable here.
    let avail = avail
        + [PageKind::Huge2M, PageKind::Huge1G]
            .iter()
            .filter_map(|k| prezero::mm::hugetlb_pool(k.page_size()))
            .map(|p| p.free * p.page_size)
            .sum::<usize>();
    avail.saturating_sub(4 << 30)
}

pub fn run(args: &Args) -> Result<()> {
    let kinds = args
        .pages
        .iter()
        .map(|p| p.parse::<PageKind>())
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(k) = kinds.iter().find(|k| !k.is_hugetlb()) {
        bail!("page {k}: the service serves 2MB or 1GB pages");
    }
    let mut sizes = parse_sizes(&args.sizes)?;
    sizes.sort_unstable();
    let boot = parse_size_or_zero(&args.boot)?;
    let vmm_size = parse_size_or_zero(&args.vmm_size)?;
    if args.reps == 0 || args.boot_runs == 0 || args.vmm_runs == 0 {
        bail!("--reps, --boot-runs and --vmm-runs must be at least 1");
    }
    if args.charging {
        return charging::charging(args, sizes.first().copied().unwrap_or(64 << 20), vmm_size);
    }
    for kind in kinds {
        latency_and_scrub(args, kind, &sizes)?;
    }
    if boot > 0 {
        vm_boot(args, boot, Temperature::Hot)?;
        if args.host_cold.is_some() {
            vm_boot(args, boot, Temperature::Cold)?;
        }
    }
    if vmm_size > 0 {
        vmm(args, vmm_size)?;
    }
    Ok(())
}
