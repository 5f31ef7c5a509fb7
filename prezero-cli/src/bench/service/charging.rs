//! `prezero bench service --charging`: what charging each tenant's cgroup
//! costs (issue 45). Hand-outs from memory prepared inside a tenant's cgroup
//! (charged to it) against the shared pool (charged to the daemon), the
//! same for QEMU made ready through `prezero client exec` (both tenants in
//! cgroups of their own: only what was prepared differs), and where the
//! CPU of scrubbing the tenant's released memory lands: the daemon's count
//! of it inside the cgroup and in its own, and the kernel's count of the
//! cgroup (`cpu.stat`, or v1's `cpuacct.usage`) while only the scrub runs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use prezero::PageKind;
use prezero_service::Client;

use super::vmm::{accel, on_path, vmm_once, VmmPath};
use super::Args;
use crate::bench::daemon::{alloc, Daemon};
use crate::rows::{self, Row, ServiceTable};
use crate::stats::{round2, Sorted};
use crate::units::fmt_size;

/// A tenant cgroup of the bench's own: the same path in every hierarchy that
/// charges (cgroup2 with controllers; v1's memory, cpu, cpuacct, hugetlb),
/// removed when dropped.
struct TenantCg {
    name: String,
    /// Each hierarchy's mount.
    roots: Vec<PathBuf>,
}

impl TenantCg {
    /// Made under every charging hierarchy, named after `what`; `None`
    /// where there is none.
    fn make(what: &str) -> Result<Option<TenantCg>> {
        let roots = prezero_service::charging_hierarchies();
        if roots.is_empty() {
            return Ok(None);
        }
        let cg = TenantCg {
            name: format!("prezero-bench-{what}-{}", std::process::id()),
            roots,
        };
        for r in &cg.roots {
            std::fs::create_dir(r.join(&cg.name))
                .with_context(|| format!("cannot make a cgroup under {}", r.display()))?;
        }
        Ok(Some(cg))
    }

    fn path(&self) -> String {
        format!("/{}", self.name)
    }

    /// Moves this process into it (`true`) or back to each root.
    fn enter(&self, into: bool) -> Result<()> {
        let me = std::process::id().to_string();
        for r in &self.roots {
            let procs = if into { r.join(&self.name) } else { r.clone() }.join("cgroup.procs");
            std::fs::write(&procs, &me)
                .with_context(|| format!("cannot write {}", procs.display()))?;
        }
        Ok(())
    }

    /// The CPU its processes used, in ns, as the kernel counts it.
    fn cpu_ns(&self) -> u64 {
        for r in &self.roots {
            let dir = r.join(&self.name);
            if let Ok(t) = std::fs::read_to_string(dir.join("cpu.stat")) {
                if let Some(us) = t
                    .lines()
                    .find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse::<u64>().ok())
                {
                    return us * 1000;
                }
            }
            if let Ok(t) = std::fs::read_to_string(dir.join("cpuacct.usage")) {
                return t.trim().parse().unwrap_or(0);
            }
        }
        0
    }
}

impl Drop for TenantCg {
    fn drop(&mut self) {
        let _ = self.enter(false);
        for r in &self.roots {
            for _ in 0..100 {
                if std::fs::remove_dir(r.join(&self.name)).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// A private daemon whose pool (segments of `size`, 2 MiB pages) keeps
/// `size` ready in the shared pool and `size` prepared for `cg`; and `size`
/// in whole pages.
fn daemon_for(cg: &TenantCg, size: usize) -> Result<(Daemon, usize)> {
    let kind = PageKind::Huge2M;
    let size = size.next_multiple_of(kind.page_size());
    let prepare = vec![
        "--prepare".to_owned(),
        format!("{}={}", cg.path(), fmt_size(size)),
    ];
    Ok((Daemon::open_with(kind, size, size, size, &prepare)?, size))
}

/// Waits until nothing is held, quarantined or being scrubbed.
fn quiet(c: &Client) -> Result<()> {
    let t = Instant::now();
    while c
        .stats()?
        .pools
        .iter()
        .any(|p| p.leased + p.quarantined + p.scrubbing > 0)
    {
        if t.elapsed() > Duration::from_secs(300) {
            bail!("the service's memory did not come back within 300 s");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// The latency (us) of one hand-out of `size` to a tenant of `cg`,
/// released and cleaned before it returns. The bench leaves the cgroup
/// before it releases, so that what the cgroup runs then is the scrub alone:
/// the kernel's count of that is returned too.
fn handout(d: &Daemon, cg: &TenantCg, size: usize) -> Result<(f64, u64)> {
    quiet(&d.client)?;
    cg.enter(true)?;
    // A connection made inside is the cgroup's tenant.
    let c = Client::connect(&d.socket)?;
    let t = Instant::now();
    let m = alloc(&c, size, PageKind::Huge2M);
    let took = t.elapsed();
    cg.enter(false)?;
    let m = m?;
    let before = cg.cpu_ns();
    drop(m);
    drop(c);
    quiet(&d.client)?;
    Ok((took.as_secs_f64() * 1e6, cg.cpu_ns().saturating_sub(before)))
}

/// One row of a charged/shared pair.
fn print_pair(args: &Args, what: &str, size: usize, unit: &str, shared: &[f64], charged: &[f64]) {
    let (s, c) = (Sorted::new(shared.to_vec()), Sorted::new(charged.to_vec()));
    let (s50, c50) = (s.percentile(0.5), c.percentile(0.5));
    for (arm, n, p50, p99) in [
        ("shared pool", shared.len(), s50, s.percentile(0.99)),
        (
            "charged to the tenant",
            charged.len(),
            c50,
            c.percentile(0.99),
        ),
    ] {
        if args.json {
            Row::Service(ServiceTable::Charging(rows::Charging {
                what: what.into(),
                arm: arm.into(),
                size: size as u64,
                reps: n as u64,
                unit: unit.into(),
                p50: round2(p50),
                p99: round2(p99),
                x_shared: round2(p50 / s50),
            }))
            .print();
        } else {
            println!(
                "{what:<10} {:>8} {arm:<22} {:>5} p50 {p50:>10.1} {unit}  p99 {p99:>10.1} {unit}  x shared {:.2}",
                fmt_size(size),
                n,
                p50 / s50
            );
        }
    }
}

/// The charging rows: hand-outs, QEMU, and where the clearing CPU lands.
pub(super) fn charging(args: &Args, size: usize, vmm_size: usize) -> Result<()> {
    let (Some(cg), Some(other)) = (TenantCg::make("charged")?, TenantCg::make("shared")?) else {
        super::super::not_measured("the charging rows", "no cgroup hierarchy charges here");
        return Ok(());
    };
    let (d, size) = daemon_for(&cg, size)?;
    if !args.json {
        println!("# prezero serve: charging each tenant's cgroup against the shared pool (medians; the shared pool is charged to the daemon)");
    }
    let reps = args.reps.min(30);
    quiet(&d.client)?;
    // Both tenants are in cgroups of their own; only `cg` had memory
    // prepared. Their hand-outs alternate, the one that goes first turning
    // round: a hand-out right after another's cleaning was ~100 us slower
    // here whichever arm it was.
    let (mut shared, mut charged, mut kernel_ns) = (Vec::new(), Vec::new(), 0);
    for rep in 0..reps {
        for first in [rep % 2 == 0, rep % 2 == 1] {
            if first {
                shared.push(handout(&d, &other, size)?.0);
            } else {
                let (us, ns) = handout(&d, &cg, size)?;
                charged.push(us);
                kernel_ns += ns;
            }
        }
    }
    print_pair(args, "hand-out", size, "us", &shared, &charged);
    let row = d
        .client
        .stats()?
        .cgroups
        .into_iter()
        .find(|c| c.name == cg.path().as_bytes())
        .unwrap_or_default();
    let (in_cg, in_daemon) = (row.cpu_in_ns as f64, row.cpu_daemon_ns as f64);
    let share = in_cg / (in_cg + in_daemon).max(1.0);
    let seen = kernel_ns as f64 / in_cg.max(1.0);
    if args.json {
        Row::Service(ServiceTable::ClearingShare(rows::ClearingShare {
            bytes: row.cleaned_bytes,
            cpu_in_cgroup_ms: round2(in_cg / 1e6),
            cpu_in_daemon_ms: round2(in_daemon / 1e6),
            kernel_ms: round2(kernel_ns as f64 / 1e6),
            share_in_cgroup: round2(share),
            kernel_over_daemon: round2(seen),
        }))
        .print();
    } else {
        println!(
            "clearing {} for the tenant: {:.1} ms of CPU in its cgroup, {:.1} ms in the daemon's: share in the right cgroup {:.2} (goal 1); the cgroup's own counter saw {:.1} ms ({:.2}x the daemon's count)",
            fmt_size(row.cleaned_bytes as usize),
            in_cg / 1e6,
            in_daemon / 1e6,
            share,
            kernel_ns as f64 / 1e6,
            seen
        );
    }
    drop(d);
    if vmm_size > 0 {
        qemu(args, [&other, &cg], vmm_size)?;
    }
    Ok(())
}

/// QEMU made ready through `prezero client exec` by a tenant of the cgroup
/// memory was prepared for (`cgs[1]`, its own memory) and of one nobody
/// announced (`cgs[0]`, the shared pool).
fn qemu(args: &Args, cgs: [&TenantCg; 2], size: usize) -> Result<()> {
    let Some(exe) = on_path("qemu-system-x86_64") else {
        super::super::not_measured(
            "the charging vmm rows",
            "qemu-system-x86_64 is not installed",
        );
        return Ok(());
    };
    let (d, size) = daemon_for(cgs[1], size)?;
    let dir = std::env::temp_dir().join(format!("prezero-bench-charging-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let runs = args.vmm_runs;
    let mut times = [Vec::new(), Vec::new()];
    for i in 0..=runs {
        for (arm, cg) in cgs.into_iter().enumerate() {
            quiet(&d.client)?;
            cg.enter(true)?;
            let took = vmm_once(
                VmmPath::Service,
                &exe,
                accel(),
                size,
                &d.socket,
                Path::new(&dir),
            );
            cg.enter(false)?;
            let took = took?;
            // The first of each is untimed (warm-up).
            if i > 0 {
                times[arm].push(took.as_secs_f64() * 1e3);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    print_pair(args, "qemu ready", size, "ms", &times[0], &times[1]);
    Ok(())
}
