//! `prezero bench service`: what `prezero serve` costs a client and what it
//! saves one. Hand-out latency (p50/p99) per request size, the background
//! scrubber's GB/s beside the clearing engine's cold-memory rate, and a "VM
//! boot": N GiB of zeroed, populated 2 MiB memory from the service against
//! the kernel paths a VMM uses today, host-warm and host-cold; and "vmm": an
//! unmodified QEMU ready on service memory (`prezero client exec`) against
//! QEMU's own preallocation.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use prezero::service::Client;
use prezero::{PageKind, Region, Temperature};

use super::daemon::{alloc, ready, wait_ready, Daemon};
use super::hugetlb::hugetlb_for_run;
use super::memory::{touch_pages, verify_zero};
use super::rows::{self, Row, ServiceTable};
use crate::stats::{gbps, round2, Sorted, Stats};
use crate::table::Table;
use crate::units::{fmt_size, parse_size_or_zero, parse_sizes};

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
            .filter_map(|k| prezero::cpu::hugetlb_pool(k.page_size()))
            .map(|p| p.free * p.page_size)
            .sum::<usize>();
    avail.saturating_sub(4 << 30)
}

pub fn run(args: &Args) -> Result<(), String> {
    let kinds = args
        .pages
        .iter()
        .map(|p| p.parse::<PageKind>().map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(k) = kinds.iter().find(|k| !k.is_hugetlb()) {
        return Err(format!("page {k}: the service serves 2MB or 1GB pages"));
    }
    let mut sizes = parse_sizes(&args.sizes)?;
    sizes.sort_unstable();
    let boot = parse_size_or_zero(&args.boot)?;
    let vmm_size = parse_size_or_zero(&args.vmm_size)?;
    if args.reps == 0 || args.boot_runs == 0 || args.vmm_runs == 0 {
        return Err("--reps, --boot-runs and --vmm-runs must be at least 1".into());
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

/// The hand-out latency table and the scrub rate, for one page kind.
fn latency_and_scrub(args: &Args, kind: PageKind, sizes: &[usize]) -> Result<(), String> {
    let budget = memory_budget();
    let mut fitting: Vec<usize> = sizes
        .iter()
        .map(|s| s.next_multiple_of(kind.page_size()))
        .filter(|&s| args.socket.is_some() || s <= budget)
        .collect();
    fitting.dedup();
    for s in sizes
        .iter()
        .filter(|&&s| s.next_multiple_of(kind.page_size()) > budget)
    {
        if args.socket.is_none() {
            println!(
                "# page {kind}: {} skipped: more than the available memory less 4 GiB ({})",
                fmt_size(*s),
                fmt_size(budget)
            );
        }
    }
    let Some(&largest) = fitting.last() else {
        return Ok(());
    };
    let daemon = Daemon::open(args.socket.as_deref(), kind, largest, args.reserve)?;
    let c = &daemon.client;
    let have = wait_ready(c, kind, largest)?;
    let table = Table::new(" ")
        .right(8)
        .right(6)
        .right(10)
        .right(10)
        .right(10)
        .right(10);
    if !args.json {
        println!(
            "# prezero serve: hand-out latency, page {kind} (request -> mapped, populated, zero)"
        );
        table.print(&["size", "reps", "p50 us", "p99 us", "max us", "GB/s p50"]);
    }
    for &size in &fitting {
        if size > have {
            println!(
                "# {}: skipped: the service has {} ready (hugetlb shortage; see its log)",
                fmt_size(size),
                fmt_size(have)
            );
            continue;
        }
        let reps = if size > 1 << 30 {
            args.reps.min(10)
        } else {
            args.reps
        };
        let mut us = Vec::with_capacity(reps);
        for _ in 0..reps {
            wait_ready(c, kind, size)?;
            let t = Instant::now();
            let m = alloc(c, size, kind)?;
            us.push(t.elapsed().as_secs_f64() * 1e6);
            // Check a sample per page (a full check of 16 GiB x reps would
            // dominate the run; the tests check every byte).
            for off in (0..m.len()).step_by(kind.page_size()) {
                verify_zero(&m.as_slice()[off..off + 64], "service hand-out")?;
            }
            drop(m);
        }
        let us = Sorted::new(us);
        let (p50, p99, max) = (us.percentile(0.5), us.percentile(0.99), us.percentile(1.0));
        let rate = size as f64 / (p50 / 1e6) / 1e9;
        if args.json {
            Row::Service(ServiceTable::Handout(rows::ServiceHandout {
                page: kind.name().to_string(),
                size: size as u64,
                reps: reps as u64,
                p50_us: round2(p50),
                p99_us: round2(p99),
                max_us: round2(max),
                gbps_p50: round2(rate),
            }))
            .print();
        } else {
            table.print(&[
                fmt_size(size),
                reps.to_string(),
                format!("{p50:.1}"),
                format!("{p99:.1}"),
                format!("{max:.1}"),
                format!("{rate:.0}"),
            ]);
        }
    }
    wait_ready(c, kind, largest)?;
    scrub_rate(args, kind, c, largest.min(have).min(4 << 30))
}

/// Rounds of this scrub-rate phase.
const SCRUB_ROUNDS: usize = 3;

/// The scrubber against the clearing engine on cold memory (Auto, cold, one
/// thread, in this process), in alternating rounds so both meet the same
/// machine: each round clears two cold GiB here, then hands `bytes` of the
/// service's memory back and waits, polling gently, until it is scrubbed and
/// verified (in place: the segments go back to this process's uid). Rates are
/// the worker's own timings; medians over the rounds.
fn scrub_rate(args: &Args, kind: PageKind, c: &Client, bytes: usize) -> Result<(), String> {
    if bytes == 0 {
        return Ok(());
    }
    let half = 1 << 30;
    let mut cold = Region::new(2 * half, PageKind::Thp).map_err(|e| e.to_string())?;
    prezero::prefault(&cold, prezero::cpu().logical_cpus).map_err(|e| e.to_string())?;
    let (mut engine, mut scrub, mut verify, mut both) = (vec![], vec![], vec![], vec![]);
    let mut scrubbed = 0;
    for round in 0..SCRUB_ROUNDS {
        for i in 0..2 {
            let s = &mut cold.as_mut_slice()[((round + i) % 2) * half..][..half];
            let t = Instant::now();
            prezero::clear_with(s, Temperature::Cold).map_err(|e| e.to_string())?;
            engine.push(gbps(half, t.elapsed()));
        }
        wait_ready(c, kind, bytes)?;
        let m = alloc(c, bytes, kind)?;
        let before = c.stats().map_err(|e| e.to_string())?;
        drop(m);
        loop {
            std::thread::sleep(Duration::from_millis(20));
            let s = c.stats().map_err(|e| e.to_string())?;
            if s.scrubbed_bytes - before.scrubbed_bytes >= bytes as u64
                && s.pools.iter().all(|p| p.scrubbing + p.quarantined == 0)
            {
                let (b, ns) = (
                    s.scrubbed_bytes - before.scrubbed_bytes,
                    s.scrub_ns - before.scrub_ns,
                );
                let (vb, vns) = (
                    s.verified_bytes - before.verified_bytes,
                    s.verify_ns - before.verify_ns,
                );
                scrub.push(b as f64 / ns.max(1) as f64);
                verify.push(vb as f64 / vns.max(1) as f64);
                both.push(b as f64 / (ns + vns).max(1) as f64);
                scrubbed += b;
                break;
            }
        }
    }
    verify_zero(cold.as_slice(), "cold clear")?;
    let m = |v: &[f64]| Stats::of(v).median;
    let (scrub, verify, both, cold) = (m(&scrub), m(&verify), m(&both), m(&engine));
    if args.json {
        Row::Service(ServiceTable::Scrub(rows::Scrub {
            page: kind.name().to_string(),
            bytes: scrubbed,
            scrub_gbps: round2(scrub),
            verify_gbps: round2(verify),
            scrub_verify_gbps: round2(both),
            engine_cold_gbps: round2(cold),
            ratio: round2(scrub / cold),
        }))
        .print();
    } else {
        println!(
            "# scrubber, same uid ({SCRUB_ROUNDS} rounds of {}, medians): cleared at {scrub:.1} GB/s, \
             verified at {verify:.1} GB/s ({both:.1} GB/s both); clearing engine, cold memory, 1 thread: \
             {cold:.1} GB/s; scrub/engine = {:.2}",
            fmt_size(bytes),
            scrub / cold
        );
    }
    Ok(())
}

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
fn cool_hugetlb(kind: PageKind, pages: usize, secs: u64) -> Result<(), String> {
    let page = kind.page_size();
    let path = prezero::cpu::HugetlbPool::nr_path(page);
    let total = prezero::cpu::hugetlb_pool(page).map_or(0, |p| p.total);
    let write = |n: usize| std::fs::write(&path, n.to_string()).map_err(|e| format!("{path}: {e}"));
    write(total.saturating_sub(pages))?;
    std::thread::sleep(Duration::from_secs(secs));
    write(total)?;
    let now = prezero::cpu::hugetlb_pool(page).map_or(0, |p| p.total);
    if now < total {
        return Err(format!(
            "could not take back {} hugetlb pages after cooling",
            total - now
        ));
    }
    Ok(())
}

fn vm_boot(args: &Args, size: usize, host: Temperature) -> Result<(), String> {
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
        let r = Region::new(size, kind).map_err(|e| e.to_string())?;
        prezero::prefault(&r, threads).map_err(|e| e.to_string())?;
    }
    for _ in 0..args.boot_runs {
        for (i, &p) in paths.iter().enumerate() {
            if let (Some(secs), true) = (
                args.host_cold,
                host == Temperature::Cold && p != BootPath::Service,
            ) {
                cool_hugetlb(kind, size / kind.page_size(), secs)?;
            }
            let t = Instant::now();
            let d = match p {
                BootPath::Service => {
                    if wait_ready(c, kind, size)? < size {
                        return Err(format!(
                            "the service has less than {} ready",
                            fmt_size(size)
                        ));
                    }
                    let t = Instant::now();
                    let m = alloc(c, size, kind)?;
                    let d = t.elapsed();
                    verify_zero(&m.as_slice()[..1 << 20], "service boot memory")?;
                    d
                }
                _ => {
                    let mut r = Region::new(size, kind).map_err(|e| e.to_string())?;
                    match p {
                        BootPath::PopulateParallel => {
                            prezero::prefault(&r, threads).map_err(|e| e.to_string())?;
                        }
                        BootPath::Populate => {
                            prezero::prefault(&r, 1).map_err(|e| e.to_string())?;
                        }
                        // Zeros: the check below reads these pages too.
                        _ => touch_pages(r.as_mut_slice(), kind.page_size(), 0),
                    }
                    let d = t.elapsed();
                    verify_zero(&r.as_slice()[..1 << 20], "kernel boot memory")?;
                    d
                }
            };
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

/// How the `vmm` row gives QEMU its guest RAM.
#[derive(Clone, Copy, PartialEq)]
enum VmmPath {
    /// `prezero client exec` + `memory-backend-file,mem-path={path},share=on,prealloc=on`.
    Service,
    /// `memory-backend-memfd,hugetlb=on,prealloc=on` on every thread.
    MemfdAll,
    /// The same on one thread.
    MemfdOne,
    /// Anonymous `memory-backend-ram,prealloc=on` (QEMU's default: one thread).
    Ram,
}

impl VmmPath {
    fn name(self) -> &'static str {
        match self {
            VmmPath::Service => "prezero client exec (memory-backend-file, share=on)",
            VmmPath::MemfdAll => "memfd hugetlb=on prealloc=on, all threads",
            VmmPath::MemfdOne => "memfd hugetlb=on prealloc=on, 1 thread",
            VmmPath::Ram => "memory-backend-ram prealloc=on (anonymous)",
        }
    }
}

/// Kills (SIGKILL) and reaps QEMU if a run ends early.
struct Qemu(Child);

impl Drop for Qemu {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// One QMP exchange on `q`: the command, then lines until its return (events
/// skipped); an error answer is an error.
fn qmp(q: &mut BufReader<UnixStream>, cmd: serde_json::Value) -> Result<serde_json::Value, String> {
    writeln!(q.get_mut(), "{cmd}").map_err(|e| format!("QMP: {e}"))?;
    loop {
        let mut line = String::new();
        if q.read_line(&mut line).map_err(|e| format!("QMP: {e}"))? == 0 {
            return Err("QMP: QEMU closed the monitor".into());
        }
        let v: serde_json::Value =
            serde_json::from_str(&line).map_err(|e| format!("QMP: {e}: {line}"))?;
        if let Some(r) = v.get("return") {
            return Ok(r.clone());
        }
        if v.get("error").is_some() {
            return Err(format!("QMP {cmd}: {v}"));
        }
    }
}

/// The first `name` on PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|f| f.is_file())
}

/// Starts QEMU on `path`'s memory, stopped (-S), and returns how long it took
/// from the spawn until QMP answers `query-status` (the machine is built, its
/// RAM allocated), after checking a sample of guest RAM is zero; then quits it.
fn vmm_once(
    p: VmmPath,
    qemu: &Path,
    accel: &str,
    size: usize,
    socket: &Path,
    dir: &Path,
) -> Result<Duration, String> {
    let qmp_path = dir.join("qmp.sock");
    let _ = std::fs::remove_file(&qmp_path);
    let threads = prezero::cpu().logical_cpus;
    let backend = match p {
        VmmPath::Service => {
            "memory-backend-file,id=m,size={size},mem-path={path},share=on,prealloc=on".to_owned()
        }
        VmmPath::MemfdAll | VmmPath::MemfdOne => format!(
            "memory-backend-memfd,id=m,size={size},hugetlb=on,hugetlbsize=2M,share=on,prealloc=on,prealloc-threads={}",
            if p == VmmPath::MemfdAll { threads } else { 1 }
        ),
        VmmPath::Ram => format!("memory-backend-ram,id=m,size={size},prealloc=on"),
    };
    let mut qemu_args: Vec<String> = [
        "-accel",
        accel,
        "-machine",
        "q35,memory-backend=m",
        "-m",
        &format!("{}M", size >> 20),
        "-object",
        &backend,
        "-S",
        "-nodefaults",
        "-display",
        "none",
        "-qmp",
        &format!("unix:{},server=on,wait=off", qmp_path.display()),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let log = std::fs::File::create(dir.join("qemu.log")).map_err(|e| e.to_string())?;
    let mut cmd = if p == VmmPath::Service {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut c = Command::new(exe);
        c.args(["client", "exec", "--no-fallback", "--quiet", "--socket"])
            .arg(socket)
            .args(["--size", &size.to_string(), "--"])
            .arg(qemu);
        c
    } else {
        // The service row's placeholders, filled in here.
        for a in &mut qemu_args {
            *a = a.replace("{size}", &size.to_string());
        }
        Command::new(qemu)
    };
    cmd.args(&qemu_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    let t = Instant::now();
    let mut child = Qemu(
        cmd.spawn()
            .map_err(|e| format!("{}: {e}", qemu.display()))?,
    );
    let log = || std::fs::read_to_string(dir.join("qemu.log")).unwrap_or_default();
    let stream = loop {
        if let Ok(s) = UnixStream::connect(&qmp_path) {
            break s;
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            return Err(format!("{}: QEMU exited ({status}): {}", p.name(), log()));
        }
        if t.elapsed() > Duration::from_secs(300) {
            return Err(format!("{}: no QMP socket within 300 s", p.name()));
        }
        std::thread::sleep(Duration::from_micros(500));
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(300)))
        .map_err(|e| e.to_string())?;
    let mut q = BufReader::new(stream);
    let mut greeting = String::new();
    q.read_line(&mut greeting)
        .map_err(|e| format!("QMP greeting: {e}"))?;
    qmp(&mut q, json!({"execute": "qmp_capabilities"}))?;
    let status = qmp(&mut q, json!({"execute": "query-status"}))?;
    let took = t.elapsed();
    if status["status"] != "prelaunch" {
        return Err(format!(
            "{}: QEMU is not ready and stopped: {status}",
            p.name()
        ));
    }
    // A sample of guest RAM (the tests read all of it): 4 KiB at 1 MiB, above
    // the ROMs q35 lays over 0xc0000-0xfffff at reset.
    let xp = qmp(
        &mut q,
        json!({"execute": "human-monitor-command",
               "arguments": {"command-line": "xp /512gx 0x100000"}}),
    )?;
    let words: Vec<&str> = xp
        .as_str()
        .unwrap_or("")
        .lines()
        .flat_map(|l| l.split_once(':').map_or("", |(_, w)| w).split_whitespace())
        .collect();
    if words.len() != 512 || words.iter().any(|w| *w != "0x0000000000000000") {
        return Err(format!(
            "VERIFY FAILED: {}: guest RAM at 1 MiB is not zero: {xp}",
            p.name()
        ));
    }
    qmp(&mut q, json!({"execute": "quit"}))?;
    let status = child.0.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("{}: QEMU exited {status}: {}", p.name(), log()));
    }
    Ok(took)
}

/// QEMU ready (spawned, guest RAM allocated and populated, QMP answering)
/// on service memory against QEMU's own preallocation, in the same run.
fn vmm(args: &Args, size: usize) -> Result<(), String> {
    let Some(qemu) = on_path("qemu-system-x86_64") else {
        println!(
            "# vmm: skipped: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
        );
        return Ok(());
    };
    let kind = PageKind::Huge2M;
    let size = size.next_multiple_of(kind.page_size());
    // The daemon's segment, QEMU's own hugetlb pages and anonymous memory.
    let budget = memory_budget();
    if args.socket.is_none() && 3 * size > budget {
        println!(
            "# vmm: {} skipped: three times that is more than the available memory less 4 GiB ({})",
            fmt_size(size),
            fmt_size(budget)
        );
        return Ok(());
    }
    // KVM where this process can open it, as a VMM would run; else TCG (the
    // guest never runs: -S).
    let accel = if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
    {
        "kvm"
    } else {
        "tcg"
    };
    // A private daemon's segments of the VM's size: its memory is one file.
    let daemon = Daemon::open_shaped(args.socket.as_deref(), kind, size, size, args.reserve)?;
    let (c, socket) = (&daemon.client, &daemon.socket);
    if wait_ready(c, kind, size)? < size {
        return Err(format!(
            "vmm: the service has less than {} ready",
            fmt_size(size)
        ));
    }
    // QEMU's own hugetlb pages, reserved once the daemon holds its own.
    let _pages = hugetlb_for_run(kind, size, args.reserve)?;
    let dir = std::env::temp_dir().join(format!("prezero-bench-vmm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let paths = [
        VmmPath::Service,
        VmmPath::MemfdAll,
        VmmPath::MemfdOne,
        VmmPath::Ram,
    ];
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); paths.len()];
    // Run 0 is untimed: every path meets memory the host has backed once
    // (host-warm) and a QEMU binary in the page cache.
    let result = (0..=args.vmm_runs).try_for_each(|run| {
        for (i, &p) in paths.iter().enumerate() {
            let d = vmm_once(p, &qemu, accel, size, socket, &dir)?;
            if run > 0 {
                samples[i].push(d.as_secs_f64());
            }
            // The daemon scrubs and verifies the segment QEMU let go: done
            // before the next row, so its work never overlaps a timed run.
            if p == VmmPath::Service && wait_ready(c, kind, size)? < size {
                return Err(format!(
                    "vmm: the service's segment did not come back ({} ready)",
                    fmt_size(ready(&c.stats().map_err(|e| e.to_string())?, kind))
                ));
            }
        }
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    let service = Stats::of(&samples[0]).median;
    let threads = prezero::cpu().logical_cpus;
    let table = Table::new(" ")
        .left(52)
        .right(9)
        .right(9)
        .right(9)
        .right(8)
        .right(10);
    if !args.json {
        println!(
            "# vmm: QEMU ready (spawn -> QMP answers query-status, stopped with -S, {accel}), {} of \
             guest RAM, host-warm ({} runs, median; prealloc threads: all = {threads})",
            fmt_size(size),
            args.vmm_runs
        );
        table.print(&["path", "ms", "min ms", "max ms", "stdev%", "x service"]);
    }
    for (i, &p) in paths.iter().enumerate() {
        let st = Stats::of(&samples[i]);
        let (min, max) = (st.min, st.max);
        let x = st.median / service;
        if args.json {
            Row::Service(ServiceTable::Vmm(rows::Vmm {
                path: p.name().to_string(),
                size: size as u64,
                accel: accel.to_string(),
                runs: args.vmm_runs as u64,
                ms: round2(st.median * 1e3),
                min_ms: round2(min * 1e3),
                max_ms: round2(max * 1e3),
                stdev_pct: round2(st.stdev_pct),
                x_service: round2(x),
            }))
            .print();
        } else {
            table.print(&[
                p.name().to_string(),
                format!("{:.1}", st.median * 1e3),
                format!("{:.1}", min * 1e3),
                format!("{:.1}", max * 1e3),
                format!("{:.1}", st.stdev_pct),
                format!("{x:.1}x"),
            ]);
        }
    }
    if !args.json {
        println!(
            "# QEMU's own hugetlb prealloc on all threads / prezero client exec = {:.1}x",
            Stats::of(&samples[1]).median / service
        );
    }
    Ok(())
}
