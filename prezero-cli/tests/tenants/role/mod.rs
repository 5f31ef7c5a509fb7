//! Runs commands from stdin, one a line, each answered on stdout with
//! `@@ ok key=value ...` or `@@ err why`.

use std::io::BufRead;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use prezero::PageKind;
use prezero_service::protocol::{self, Reply};
use prezero_service::{Client, ServiceMemory, Source};

use crate::common::tenant::say;
use crate::common::{seqpacket_connect, unreserved_pages, Hog, MB, NO_FALLBACK};

mod pins;

use pins::Ring;

type Result<T> = std::result::Result<T, String>;

/// How long an `alloc` waits for a segment to be ready.
const READY_WITHIN: Duration = Duration::from_secs(10);

pub fn serve(socket: PathBuf) {
    let mut t = State {
        socket,
        client: None,
        mem: Vec::new(),
        ring: None,
        pipe: None,
        hog: Vec::new(),
        conns: Vec::new(),
        heavy: Vec::new(),
        opath: None,
    };
    say("ok ready");
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"exit") {
            say("ok");
            break;
        }
        match t.run(&words) {
            Ok(a) => say(&format!("ok {a}")),
            Err(e) => say(&format!("err {e}")),
        }
    }
}

struct State {
    socket: PathBuf,
    client: Option<Client>,
    /// Held allocations, the last one first in line for every command.
    mem: Vec<ServiceMemory>,
    ring: Option<Ring>,
    /// (read end, write end)
    pipe: Option<(OwnedFd, OwnedFd)>,
    /// Free hugetlb pages taken.
    hog: Vec<Hog>,
    /// Connections, and what the daemon said on each (an errno; CLOSED).
    conns: Vec<(OwnedFd, Option<i32>)>,
    heavy: Vec<std::fs::File>,
    /// An `O_PATH` descriptor of a segment, kept past its release.
    opath: Option<OwnedFd>,
}

/// The daemon closed the connection without a message.
const CLOSED: i32 = -1;

fn size(s: &str) -> Result<usize> {
    let (num, unit) = match s.as_bytes().last() {
        Some(b'K') => (&s[..s.len() - 1], 1 << 10),
        Some(b'M') => (&s[..s.len() - 1], MB),
        Some(b'G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>()
        .map(|n| n * unit)
        .map_err(|e| format!("size '{s}': {e}"))
}

fn arg<'a>(words: &[&'a str], i: usize) -> Result<&'a str> {
    words
        .get(i)
        .copied()
        .ok_or_else(|| format!("'{}' needs argument {i}", words.join(" ")))
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// 0 if the call returned 0, else its errno.
fn errno_of(r: libc::c_int) -> i32 {
    if r == 0 {
        0
    } else {
        last_errno()
    }
}

fn fstat(fd: libc::c_int) -> Result<libc::stat> {
    // SAFETY: an all-zero stat is valid; fstat writes into the local.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into a local buffer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(format!("fstat: {}", std::io::Error::last_os_error()));
    }
    Ok(st)
}

impl State {
    fn client(&mut self) -> &Client {
        let socket = &self.socket;
        self.client
            .get_or_insert_with(|| Client::connect(socket).expect("the socket path fits"))
    }

    fn mem(&mut self) -> Result<&mut ServiceMemory> {
        self.mem
            .last_mut()
            .ok_or_else(|| "no memory held".to_owned())
    }

    /// The memfd of the last allocation's first segment.
    fn fd(&mut self) -> Result<libc::c_int> {
        let m = self.mem()?;
        Ok(m.segments()[0].fd.as_raw_fd())
    }

    fn run(&mut self, w: &[&str]) -> Result<String> {
        match w.first().copied().unwrap_or("") {
            "connect" => {
                let c = Client::connect(&self.socket).map_err(|e| e.to_string())?;
                let out = format!(
                    "connected={} errno={}",
                    u8::from(c.is_connected()),
                    c.connect_errno().unwrap_or(0)
                );
                self.client = Some(c);
                Ok(out)
            }
            "alloc" => self.alloc(size(arg(w, 1)?)?, true),
            "alloc-once" => self.alloc(size(arg(w, 1)?)?, false),
            "release" => {
                // Unmaps, closes the descriptors and releases.
                self.mem.pop().ok_or("no memory held")?;
                Ok(String::new())
            }
            "fill" => {
                let b: u8 = arg(w, 1)?.parse().map_err(|e| format!("{e}"))?;
                self.mem()?.as_mut_slice().fill(b);
                Ok(String::new())
            }
            "check" => {
                let b: u8 = arg(w, 1)?.parse().map_err(|e| format!("{e}"))?;
                let m = self.mem()?;
                let first = m.as_slice().iter().position(|&x| x != b);
                Ok(format!("first={}", first.map_or(-1, |o| o as i64)))
            }
            "stat" => Ok(format!("size={}", fstat(self.fd()?)?.st_size)),
            "open-by-path" => {
                // What a VMM given `mem-path=/proc/self/fd/N` does.
                let path = format!("/proc/self/fd/{}\0", self.fd()?);
                // SAFETY: a NUL-terminated path; the descriptor is closed at once.
                let fd =
                    unsafe { libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) };
                if fd >= 0 {
                    // SAFETY: our own fresh descriptor.
                    unsafe { libc::close(fd) };
                }
                Ok(format!("errno={}", errno_of(fd.min(0))))
            }
            "keep-opath" => {
                let path = format!("/proc/self/fd/{}\0", self.fd()?);
                // SAFETY: a NUL-terminated path.
                let fd =
                    unsafe { libc::open(path.as_ptr().cast(), libc::O_PATH | libc::O_CLOEXEC) };
                if fd < 0 {
                    return Err(format!("O_PATH open: errno {}", errno_of(fd)));
                }
                // SAFETY: our own fresh descriptor.
                self.opath = Some(unsafe { OwnedFd::from_raw_fd(fd) });
                Ok(String::new())
            }
            "reopen-opath" => {
                let kept = self.opath.as_ref().ok_or("no O_PATH descriptor kept")?;
                let path = format!("/proc/self/fd/{}\0", kept.as_raw_fd());
                // SAFETY: a NUL-terminated path; the descriptor is closed at once.
                let fd =
                    unsafe { libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) };
                if fd >= 0 {
                    // SAFETY: our own fresh descriptor.
                    unsafe { libc::close(fd) };
                }
                Ok(format!("errno={}", errno_of(fd.min(0))))
            }
            "ftruncate" => {
                let len = size(arg(w, 1)?)?;
                let fd = self.fd()?;
                // SAFETY: ftruncate on a descriptor we hold; our mapping
                // stays as long as the file, which the seal keeps.
                let r = unsafe { libc::ftruncate(fd, len as libc::off_t) };
                Ok(format!("errno={}", errno_of(r)))
            }
            "fallocate" => {
                let mode: libc::c_int = arg(w, 1)?.parse().map_err(|e| format!("{e}"))?;
                let (off, len) = (size(arg(w, 2)?)?, size(arg(w, 3)?)?);
                let fd = self.fd()?;
                // SAFETY: fallocate on a descriptor we hold. A punched range
                // of our mapping is not touched again by this process.
                let r =
                    unsafe { libc::fallocate(fd, mode, off as libc::off_t, len as libc::off_t) };
                Ok(format!("errno={}", errno_of(r)))
            }
            "add-seals" => {
                let fd = self.fd()?;
                // SAFETY: fcntl on a descriptor we hold.
                let r = unsafe {
                    libc::fcntl(
                        fd,
                        libc::F_ADD_SEALS,
                        libc::F_SEAL_WRITE | libc::F_SEAL_FUTURE_WRITE,
                    )
                };
                Ok(format!("errno={}", errno_of(r)))
            }
            "uring-register" => self.uring_register(size(arg(w, 1)?)?),
            "uring-out" => self.uring_out(arg(w, 1)?.parse().map_err(|e| format!("{e}"))?),
            "uring-in" => self.uring_in(arg(w, 1)?.parse().map_err(|e| format!("{e}"))?),
            "vmsplice" => self.vmsplice(size(arg(w, 1)?)?),
            "pipe-read" => self.pipe_read(arg(w, 1)?.parse().map_err(|e| format!("{e}"))?),
            "hog" => self.hog(),
            "unhog" => {
                self.hog.clear();
                Ok(String::new())
            }
            "conns" => self.conns(arg(w, 1)?.parse().map_err(|e| format!("{e}"))?),
            "conn-status" => self.conn_status(arg(w, 1)?.parse().map_err(|e| format!("{e}"))?),
            "close-conns" => {
                self.conns.clear();
                Ok(String::new())
            }
            "fill-backlog" => self.fill_backlog(),
            "connect-raw" => Ok(format!(
                "errno={}",
                seqpacket_connect(&self.socket, 0)
                    .err()
                    .map_or(0, |e| e.raw_os_error().unwrap_or(-1))
            )),
            "heavy" => self.heavy(
                arg(w, 1)?.parse().map_err(|e| format!("{e}"))?,
                arg(w, 2)?.parse().map_err(|e| format!("{e}"))?,
            ),
            "cycles" => self.cycles(
                arg(w, 1)?.parse().map_err(|e| format!("{e}"))?,
                size(arg(w, 2)?)?,
            ),
            other => Err(format!("unknown command '{other}'")),
        }
    }

    /// Memory from the service (no fallback), retried while nothing is
    /// ready if `retry`: its inode, file size, length and first non-zero byte.
    fn alloc(&mut self, bytes: usize, retry: bool) -> Result<String> {
        let t = Instant::now();
        let m = loop {
            match self
                .client()
                .alloc_with(bytes, PageKind::Huge2M, NO_FALLBACK)
            {
                Ok(m) => break m,
                Err(e) if retry && e.errno() == libc::ENOMEM && t.elapsed() < READY_WITHIN => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                Err(e) => return Ok(format!("errno={} why={e}", e.errno())),
            }
        };
        if !matches!(m.source(), Source::Service { .. }) {
            return Err(format!("not from the service: {:?}", m.source()));
        }
        let st = fstat(m.segments()[0].fd.as_raw_fd())?;
        let nonzero = prezero::first_nonzero(m.as_slice()).map_or(-1, |o| o as i64);
        let out = format!(
            "errno=0 ino={} size={} len={} nonzero={nonzero}",
            st.st_ino,
            st.st_size,
            m.len()
        );
        self.mem.push(m);
        Ok(out)
    }

    /// Takes every free 2 MiB hugetlb page no one has reserved.
    fn hog(&mut self) -> Result<String> {
        let hog = Hog::take();
        let pages = hog.pages();
        self.hog.push(hog);
        Ok(format!(
            "pages={pages} unreserved_after={}",
            unreserved_pages()
        ))
    }

    /// `n` more connections (blocking connect), held idle.
    fn conns(&mut self, n: usize) -> Result<String> {
        for i in 0..n {
            match seqpacket_connect(&self.socket, 0) {
                Ok(fd) => self.conns.push((fd, None)),
                Err(e) => {
                    return Ok(format!(
                        "opened={i} errno={}",
                        e.raw_os_error().unwrap_or(-1)
                    ))
                }
            }
        }
        Ok(format!("opened={n} errno=0"))
    }

    /// Reads what the daemon said on each connection that has no verdict yet.
    fn classify(&mut self) -> usize {
        let mut buf = vec![0u8; protocol::MAX_MESSAGE + 1];
        let mut pending = 0;
        for (fd, verdict) in &mut self.conns {
            if verdict.is_some() {
                continue;
            }
            *verdict = match protocol::recv(fd.as_fd(), &mut buf, libc::MSG_DONTWAIT) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
                Err(_) => Some(CLOSED),
                Ok(r) if r.len == 0 => Some(CLOSED),
                Ok(r) => match Reply::decode(&buf[..r.len]) {
                    Ok((_, Reply::Error { errno, .. })) => Some(errno),
                    _ => Some(CLOSED),
                },
            };
            pending += usize::from(verdict.is_none());
        }
        pending
    }

    /// Waits (3 s at most) until no more than `idle` connections are
    /// without a verdict, then a moment more for late ones: how many are
    /// idle (accepted, nothing said), refused with EAGAIN, or otherwise.
    fn conn_status(&mut self, idle: usize) -> Result<String> {
        let t = Instant::now();
        while self.classify() > idle && t.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(300));
        let pending = self.classify();
        let eagain = self
            .conns
            .iter()
            .filter(|c| c.1 == Some(libc::EAGAIN))
            .count();
        let other = self.conns.len() - pending - eagain;
        Ok(format!("idle={pending} eagain={eagain} other={other}"))
    }

    /// Non-blocking connects until the listen backlog is full.
    fn fill_backlog(&mut self) -> Result<String> {
        for i in 0..20000 {
            match seqpacket_connect(&self.socket, libc::SOCK_NONBLOCK) {
                Ok(fd) => self.conns.push((fd, None)),
                Err(e) => return Ok(format!("n={i} errno={}", e.raw_os_error().unwrap_or(-1))),
            }
        }
        Ok("n=20000 errno=0".into())
    }

    /// `threads` sleeping threads and `fds` more open descriptors.
    fn heavy(&mut self, threads: usize, fds: usize) -> Result<String> {
        let null = std::fs::File::open("/dev/null").map_err(|e| e.to_string())?;
        for _ in 0..fds {
            self.heavy
                .push(null.try_clone().map_err(|e| format!("dup: {e}"))?);
        }
        for _ in 0..threads {
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(|| loop {
                    std::thread::park();
                })
                .map_err(|e| format!("spawn: {e}"))?;
        }
        Ok(format!("threads={threads} fds={fds}"))
    }

    /// `n` rounds of: alloc `bytes` (waiting while nothing is ready),
    /// check every byte, scribble on every 4 KiB page, release.
    fn cycles(&mut self, n: usize, bytes: usize) -> Result<String> {
        let t = Instant::now();
        let (mut nonzero, mut waits) = (0, 0);
        for _ in 0..n {
            let mut m = loop {
                match self
                    .client()
                    .alloc_with(bytes, PageKind::Huge2M, NO_FALLBACK)
                {
                    Ok(m) => break m,
                    Err(e)
                        if e.errno() == libc::ENOMEM && t.elapsed() < Duration::from_secs(20) =>
                    {
                        waits += 1;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) => return Ok(format!("errno={} why={e}", e.errno())),
                }
            };
            if !matches!(m.source(), Source::Service { .. }) {
                return Err(format!("not from the service: {:?}", m.source()));
            }
            if prezero::first_nonzero(m.as_slice()).is_some() {
                nonzero += 1;
            }
            for b in m.as_mut_slice().iter_mut().step_by(4096) {
                *b = 0xa5;
            }
        }
        Ok(format!(
            "errno=0 elapsed_ms={} nonzero={nonzero} waits={waits}",
            t.elapsed().as_millis()
        ))
    }
}
