//! The `vmm` rows: an unmodified QEMU ready on service memory (`prezero
//! client exec`) against QEMU's own preallocation, driven through QMP.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::json;

use prezero::PageKind;

use super::{memory_budget, Args};
use crate::bench::daemon::{ready, wait_ready, Daemon};
use crate::bench::hugetlb::hugetlb_for_run;
use crate::rows::{self, Row, ServiceTable};
use crate::stats::{round2, Stats};
use crate::table::Table;
use crate::units::fmt_size;

/// How the `vmm` row gives QEMU its guest RAM.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum VmmPath {
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
fn qmp(q: &mut BufReader<UnixStream>, cmd: serde_json::Value) -> Result<serde_json::Value> {
    send(q, &cmd)?;
    loop {
        let mut line = String::new();
        let read = q
            .read_line(&mut line)
            .context("QMP: cannot read QEMU's monitor")?;
        if read == 0 {
            bail!("QMP: QEMU closed the monitor");
        }
        let v: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("QMP: not JSON: {line}"))?;
        if let Some(r) = v.get("return") {
            return Ok(r.clone());
        }
        if v.get("error").is_some() {
            bail!("QMP {cmd}: {v}");
        }
    }
}

/// Writes `cmd` and its newline in one write: QEMU parses a command as soon
/// as its JSON closes, so after a `quit` written in two parts the newline met
/// a closed monitor (EPIPE) in a few runs in ten.
fn send(q: &mut BufReader<UnixStream>, cmd: &serde_json::Value) -> Result<()> {
    q.get_mut()
        .write_all(format!("{cmd}\n").as_bytes())
        .context("QMP: cannot write to QEMU's monitor")
}

/// The first `name` on PATH.
pub(super) fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|f| f.is_file())
}

/// Starts QEMU on `path`'s memory, stopped (-S), and returns how long it took
/// from the spawn until QMP answers `query-status` (the machine is built, its
/// RAM allocated), after checking a sample of guest RAM is zero; then quits it.
pub(super) fn vmm_once(
    p: VmmPath,
    qemu: &Path,
    accel: &str,
    size: usize,
    socket: &Path,
    dir: &Path,
) -> Result<Duration> {
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
    let log_path = dir.join("qemu.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut cmd = if p == VmmPath::Service {
        let exe = std::env::current_exe().context("cannot find this program")?;
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
            .with_context(|| format!("cannot run {}", qemu.display()))?,
    );
    let log = || std::fs::read_to_string(dir.join("qemu.log")).unwrap_or_default();
    let stream = loop {
        if let Ok(s) = UnixStream::connect(&qmp_path) {
            break s;
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            bail!("{}: QEMU exited ({status}): {}", p.name(), log());
        }
        if t.elapsed() > Duration::from_secs(300) {
            bail!("{}: no QMP socket within 300 s", p.name());
        }
        std::thread::sleep(Duration::from_micros(500));
    };
    // A failed exchange is most often QEMU gone (a shortage of hugetlb pages
    // at prealloc, say): its exit status and log say why, not the pipe.
    let (took, _monitor) = qmp_session(p, stream, t).map_err(|e| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.0.try_wait() {
                return e.context(format!("QEMU exited ({status}): {}", log().trim_end()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        e
    })?;
    let status = child.0.wait().context("cannot wait for QEMU")?;
    if !status.success() {
        bail!("{}: QEMU exited {status}: {}", p.name(), log());
    }
    Ok(took)
}

/// The QMP side of [`vmm_once`]: greeting, `query-status` (timed from `t`),
/// the zero check of a sample of guest RAM, `quit`; the connection comes
/// back, to be closed once QEMU has exited (closed at once, QEMU dropped the
/// `quit` it had not yet read).
fn qmp_session(p: VmmPath, stream: UnixStream, t: Instant) -> Result<(Duration, UnixStream)> {
    stream
        .set_read_timeout(Some(Duration::from_secs(300)))
        .context("QMP: cannot set a timeout on QEMU's monitor")?;
    let mut q = BufReader::new(stream);
    let mut greeting = String::new();
    if q.read_line(&mut greeting)
        .context("QMP: no greeting from QEMU")?
        == 0
    {
        bail!("{}: QEMU closed its monitor before its greeting", p.name());
    }
    qmp(&mut q, json!({"execute": "qmp_capabilities"}))?;
    let status = qmp(&mut q, json!({"execute": "query-status"}))?;
    let took = t.elapsed();
    if status["status"] != "prelaunch" {
        bail!("{}: QEMU is not ready and stopped: {status}", p.name());
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
        bail!(
            "VERIFY FAILED: {}: guest RAM at 1 MiB is not zero: {xp}",
            p.name()
        );
    }
    // Its answer may not come before QEMU closes the monitor: QEMU's exit
    // status, which the caller checks, is the answer.
    send(&mut q, &json!({"execute": "quit"}))?;
    Ok((took, q.into_inner()))
}

/// QEMU ready (spawned, guest RAM allocated and populated, QMP answering)
/// on service memory against QEMU's own preallocation, in the same run.
/// KVM where this process can open it, as a VMM would run; else TCG (the
/// guest never runs: -S).
pub(super) fn accel() -> &'static str {
    let kvm = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm");
    if kvm.is_ok() {
        "kvm"
    } else {
        "tcg"
    }
}

pub(super) fn vmm(args: &Args, size: usize) -> Result<()> {
    let Some(qemu) = on_path("qemu-system-x86_64") else {
        super::super::not_measured(
            "the vmm rows",
            "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)",
        );
        return Ok(());
    };
    let kind = PageKind::Huge2M;
    let size = size.next_multiple_of(kind.page_size());
    // The daemon's segment, QEMU's own hugetlb pages and anonymous memory.
    let budget = memory_budget();
    if args.socket.is_none() && 3 * size > budget {
        super::super::not_measured(
            &format!("the vmm rows of {}", fmt_size(size)),
            &format!(
                "three times that is more than the available memory less 4 GiB ({})",
                fmt_size(budget)
            ),
        );
        return Ok(());
    }
    let accel = accel();
    // A private daemon's segments of the VM's size: its memory is one file.
    let daemon = Daemon::open_shaped(args.socket.as_deref(), kind, size, size, args.reserve)?;
    let (c, socket) = (&daemon.client, &daemon.socket);
    if wait_ready(c, kind, size)? < size {
        bail!("vmm: the service has less than {} ready", fmt_size(size));
    }
    // QEMU's own hugetlb pages, reserved once the daemon holds its own.
    let _pages = hugetlb_for_run(kind, size, args.reserve)?;
    let dir = std::env::temp_dir().join(format!("prezero-bench-vmm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
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
                bail!(
                    "vmm: the service's segment did not come back ({} ready)",
                    fmt_size(ready(&c.stats()?, kind))
                );
            }
        }
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    print_vmm(args, size, accel, &paths, &samples);
    Ok(())
}

/// The table (or JSON rows) of each path's times, against the service's.
fn print_vmm(args: &Args, size: usize, accel: &str, paths: &[VmmPath], samples: &[Vec<f64>]) {
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
}
