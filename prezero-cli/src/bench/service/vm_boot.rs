//! The VM boot: N GiB of zeroed, populated 2 MiB memory from the service
//! against the kernel paths a VMM uses today, host-warm and host-cold.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use prezero::{PageKind, Region, Temperature};
use prezero_service::Client;

use super::{memory_budget, Args};
use crate::bench::daemon::{alloc, wait_ready, Daemon};
use crate::bench::hugetlb::hugetlb_for_run;
use crate::bench::memory::{touch_pages, verify_zero};
use crate::rows::{self, Row, ServiceTable};
use crate::stats::{round2, Stats};
use crate::table::Table;
use crate::units::fmt_size;

#[derive(Clone, Copy, PartialEq)]
enum BootPath {
    Service,
    Populate,
    PopulateParallel,
    Demand,
}

impl BootPath {
    fn name(self) -> &'static str {
        match self {
            BootPath::Service => "prezero serve",
            BootPath::Populate => "mmap + MADV_POPULATE_WRITE (1 thread)",
            BootPath::PopulateParallel => "mmap + prefault (all threads, like -mem-prealloc)",
            BootPath::Demand => "mmap + first touch per page (no prealloc)",
        }
    }
}

/// Gives `pages` free hugetlb pages back to the buddy allocator for `secs`
/// (so a VM's host can reclaim them), then takes them back: the next kernel
/// run meets host-cold memory, as a VM booting on an idle host does.
fn cool_hugetlb(kind: PageKind, pages: usize, secs: u64) -> Result<()> {
    let page = kind.page_size();
    let path = prezero::mm::HugetlbPool::nr_path(page);
    let total = prezero::mm::hugetlb_pool(page).map_or(0, |p| p.total);
    let write = |n: usize| {
        std::fs::write(&path, n.to_string()).with_context(|| format!("cannot write {n} to {path}"))
    };
    write(total.saturating_sub(pages))?;
    std::thread::sleep(Duration::from_secs(secs));
    write(total)?;
    let now = prezero::mm::hugetlb_pool(page).map_or(0, |p| p.total);
    if now < total {
        bail!(
            "could not take back {} hugetlb pages after cooling",
            total - now
        );
    }
    Ok(())
}

pub(super) fn vm_boot(args: &Args, size: usize, host: Temperature) -> Result<()> {
    let kind = PageKind::Huge2M;
    let size = size
        .next_multiple_of(256 << 20)
        .min(memory_budget().next_multiple_of(256 << 20));
    let daemon = Daemon::open(args.socket.as_deref(), kind, size, args.reserve)?;
    let c = &daemon.client;
    wait_ready(c, kind, size)?;
    // The kernel rows' pages, reserved once the daemon holds its own (dropped
    // first: reservations are given back in the reverse order).
    let _pages = hugetlb_for_run(kind, size, args.reserve)?;
    let host_name = if host == Temperature::Cold {
        "cold"
    } else {
        "warm"
    };
    let table = Table::new(" ").left(52).right(10).right(9).right(8);
    if !args.json {
        println!(
            "# VM boot: {} of zeroed, populated 2 MiB memory, host-{host_name} ({} runs, median)",
            fmt_size(size),
            args.boot_runs
        );
        table.print(&["path", "ms", "GB/s", "x kernel"]);
    }
    let paths = [
        BootPath::Service,
        BootPath::PopulateParallel,
        BootPath::Populate,
        BootPath::Demand,
    ];
    let threads = prezero::cpu().logical_cpus;
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); paths.len()];
    // Host-warm: back every page once before timing anything.
    if host == Temperature::Hot {
        let r = Region::new(size, kind)?;
        prezero::prefault(&r, threads)?;
    }
    for _ in 0..args.boot_runs {
        for (i, &p) in paths.iter().enumerate() {
            if let (Some(secs), true) = (
                args.host_cold,
                host == Temperature::Cold && p != BootPath::Service,
            ) {
                cool_hugetlb(kind, size / kind.page_size(), secs)?;
            }
            let d = boot_once(p, c, kind, size, threads)?;
            samples[i].push(d.as_secs_f64());
        }
    }
    let best_kernel = samples[1..]
        .iter()
        .map(|s| Stats::of(s).median)
        .fold(f64::INFINITY, f64::min);
    for (i, &p) in paths.iter().enumerate() {
        let s = Stats::of(&samples[i]);
        let rate = size as f64 / s.median / 1e9;
        let x = best_kernel / s.median;
        if args.json {
            Row::Service(ServiceTable::VmBoot(rows::VmBoot {
                host: host_name.to_string(),
                path: p.name().to_string(),
                size: size as u64,
                ms: round2(s.median * 1e3),
                stdev_pct: round2(s.stdev_pct),
                gbps: round2(rate),
                x_best_kernel: round2(x),
            }))
            .print();
        } else {
            table.print(&[
                p.name().to_string(),
                format!("{:.2}", s.median * 1e3),
                format!("{rate:.1}"),
                format!("{x:.1}x"),
            ]);
        }
    }
    Ok(())
}

/// One boot's memory by `p`, verified zero: the time it took.
fn boot_once(
    p: BootPath,
    c: &Client,
    kind: PageKind,
    size: usize,
    threads: usize,
) -> Result<Duration> {
    let t = Instant::now();
    let d = match p {
        BootPath::Service => {
            if wait_ready(c, kind, size)? < size {
                bail!("the service has less than {} ready", fmt_size(size));
            }
            let t = Instant::now();
            let m = alloc(c, size, kind)?;
            let d = t.elapsed();
            verify_zero(&m.as_slice()[..1 << 20], "service boot memory")?;
            d
        }
        _ => {
            let mut r = Region::new(size, kind)?;
            match p {
                BootPath::PopulateParallel => {
                    prezero::prefault(&r, threads)?;
                }
                BootPath::Populate => {
                    prezero::prefault(&r, 1)?;
                }
                // Zeros: the check below reads these pages too.
                _ => touch_pages(r.as_mut_slice(), kind.page_size(), 0),
            }
            let d = t.elapsed();
            verify_zero(&r.as_slice()[..1 << 20], "kernel boot memory")?;
            d
        }
    };
    Ok(d)
}
