//! The `prezero serve` a bench measures: the one at `--socket`, or a private
//! one the bench starts on a temporary socket and stops when done.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use prezero::PageKind;
use prezero_service::{AllocOptions, Client, ServiceMemory, ServiceStats};

use crate::units::fmt_size;

/// A connected daemon; a private one is stopped on drop.
pub struct Daemon {
    pub client: Client,
    pub socket: PathBuf,
    /// Last: fields drop in order, so the client hangs up before the daemon stops.
    private: Option<PrivateDaemon>,
}

impl Daemon {
    /// Connects to the daemon at `socket`, or without one starts a private
    /// daemon with one pool of `kind` holding `target` bytes in segments of
    /// 256 MiB (or one page, if larger).
    pub fn open(
        socket: Option<&Path>,
        kind: PageKind,
        target: usize,
        reserve: bool,
    ) -> Result<Daemon> {
        Daemon::open_shaped(
            socket,
            kind,
            target,
            kind.page_size().max(256 << 20),
            reserve,
        )
    }

    /// [`Daemon::open_shaped`] with more `prezero serve` flags for a private
    /// daemon (`--prepare`), and room under its cap for `extra_cap` bytes
    /// more than its target.
    pub fn open_with(
        kind: PageKind,
        target: usize,
        segment: usize,
        extra_cap: usize,
        flags: &[String],
    ) -> Result<Daemon> {
        let private = PrivateDaemon::start(kind, target, segment, (extra_cap, flags), true)?;
        let socket = private.socket.clone();
        let client = Client::connect(&socket)?;
        Ok(Daemon {
            client,
            socket,
            private: Some(private),
        })
    }

    /// [`Daemon::open`], a private daemon's segments of `segment` bytes (a
    /// VM's size, so that its memory is one file).
    pub fn open_shaped(
        socket: Option<&Path>,
        kind: PageKind,
        target: usize,
        segment: usize,
        reserve: bool,
    ) -> Result<Daemon> {
        let private = match socket {
            Some(_) => None,
            None => Some(PrivateDaemon::start(
                kind,
                target,
                segment,
                (0, &[]),
                reserve,
            )?),
        };
        let socket = socket.map_or_else(
            || private.as_ref().expect("started").socket.clone(),
            Path::to_path_buf,
        );
        let client = Client::connect(&socket)?;
        if !client.is_connected() {
            bail!("no prezero serve at {}", socket.display());
        }
        Ok(Daemon {
            client,
            socket,
            private,
        })
    }

    /// The private daemon's log so far (nothing for one at `--socket`).
    pub fn log(&self) -> String {
        self.private
            .as_ref()
            .map_or(String::new(), PrivateDaemon::log)
    }
}

/// A `prezero serve` of this benchmark on a temporary socket; stopped on drop.
struct PrivateDaemon {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
}

impl PrivateDaemon {
    /// Starts a daemon with one pool and waits until its socket is there,
    /// which it creates once its initial segments are ready (or as many as it
    /// could get: the daemon logs a shortage and goes on).
    fn start(
        kind: PageKind,
        target: usize,
        segment: usize,
        (extra_cap, flags): (usize, &[String]),
        reserve: bool,
    ) -> Result<PrivateDaemon> {
        let target = target.next_multiple_of(segment);
        let cap = target + extra_cap.next_multiple_of(segment);
        // A new directory of our own (0700; refused if the name exists), so no
        // other user can plant a socket or a symlink for the log: this runs as
        // root under --reserve.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir =
            std::env::temp_dir().join(format!("prezero-bench-{}-{nanos}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let socket = dir.join("s.sock");
        let log_path = dir.join("daemon.log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("cannot create {}", log_path.display()))?;
        let exe = std::env::current_exe().context("cannot find this program")?;
        let mut cmd = Command::new(exe);
        cmd.args(["serve", "--socket"])
            .arg(&socket)
            .arg("--pool")
            .arg(format!(
                "{}:target={},cap={},segment={}",
                kind.name(),
                fmt_size(target),
                fmt_size(cap),
                fmt_size(segment)
            ))
            .args(flags)
            // Not the bench's stdout: a daemon left behind by a killed bench
            // must not hold `bench all`'s pipe open.
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if reserve {
            cmd.arg("--reserve");
        }
        let child = cmd.spawn().context("cannot start prezero serve")?;
        let mut d = PrivateDaemon { child, dir, socket };
        let t = Instant::now();
        while !d.socket.exists() {
            if let Ok(Some(status)) = d.child.try_wait() {
                bail!("prezero serve exited ({status}): {}", d.log());
            }
            if t.elapsed() > Duration::from_secs(300) {
                bail!("prezero serve did not start: {}", d.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(d)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }
}

impl Drop for PrivateDaemon {
    fn drop(&mut self) {
        let _ = prezero_sys::kill(self.child.id() as i32, libc::SIGTERM);
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Ready bytes of the pool of `kind`.
pub fn ready(s: &ServiceStats, kind: PageKind) -> usize {
    s.pools
        .iter()
        .find(|p| p.page_size == kind.page_size() as u64)
        .map_or(0, |p| (p.ready * p.segment_size) as usize)
}

/// Waits (untimed) until `bytes` are ready, or until the pool is quiet (nothing
/// in quarantine or scrubbing) and that is all there is.
pub fn wait_ready(c: &Client, kind: PageKind, bytes: usize) -> Result<usize> {
    let t = Instant::now();
    loop {
        let s = c.stats()?;
        let r = ready(&s, kind);
        let busy = s.pools.iter().any(|p| p.quarantined + p.scrubbing > 0);
        if r >= bytes || (!busy && t.elapsed() > Duration::from_millis(500)) {
            return Ok(r);
        }
        if t.elapsed() > Duration::from_secs(120) {
            bail!("the service's memory did not come back within 120 s");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `size` bytes of `kind` from the service or an error, never local memory;
/// populated with every CPU (as a VMM would).
pub fn alloc(c: &Client, size: usize, kind: PageKind) -> Result<ServiceMemory> {
    let service_only = AllocOptions {
        fallback: false,
        ..AllocOptions::default()
    };
    Ok(c.alloc_with(size, kind, service_only)?)
}
