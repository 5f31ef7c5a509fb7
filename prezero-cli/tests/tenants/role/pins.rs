//! The kernel's own references to a tenant's pages, kept past a release: an
//! io_uring fixed buffer and a vmspliced pipe.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use io_uring::{opcode, types, IoUring};

use super::{Result, State};

pub(super) struct Ring {
    ring: IoUring,
    /// Where the registered buffer was mapped (it need not be any more).
    addr: *mut u8,
    len: usize,
}

/// Bytes, how many equal `pat`, the first, and whether all are the first.
fn summary(buf: &[u8], pat: u8) -> String {
    let same = buf.iter().filter(|&&b| b == pat).count();
    let first = buf.first().map_or(-1, |&b| i64::from(b));
    let uniform = u8::from(buf.iter().all(|b| Some(b) == buf.first()));
    format!(
        "bytes={} same={same} first={first} uniform={uniform}",
        buf.len()
    )
}

fn memfd() -> Result<OwnedFd> {
    // SAFETY: a NUL-terminated name and valid flags.
    let fd = unsafe { libc::memfd_create(c"tenant-io".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl State {
    /// Registers the first `len` bytes of the held memory as io_uring
    /// fixed buffer 0; `skip=ERRNO` if this kernel offers no io_uring.
    pub(super) fn uring_register(&mut self, len: usize) -> Result<String> {
        let m = self.mem()?;
        let addr = m.as_ptr();
        if len > m.len() {
            return Err("longer than the memory".into());
        }
        let ring = match IoUring::new(4) {
            Ok(r) => r,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
                return Ok(format!("skip={}", e.raw_os_error().unwrap_or(0)))
            }
            Err(e) => return Err(format!("io_uring_setup: {e}")),
        };
        let iov = libc::iovec {
            iov_base: addr.cast(),
            iov_len: len,
        };
        // SAFETY: the buffer is our live mapping now. The kernel pins its
        // pages; after this process unmaps it (the attack), fixed-buffer I/O
        // reaches only those pinned pages, never whatever this process maps
        // at that address later, so no Rust object is written behind its back.
        let r = unsafe { ring.submitter().register_buffers(&[iov]) };
        let errno = r.err().map_or(0, |e| e.raw_os_error().unwrap_or(-1));
        if errno == 0 {
            self.ring = Some(Ring { ring, addr, len });
        }
        Ok(format!("errno={errno}"))
    }

    /// One fixed-buffer operation on `fd`, waited for: its result.
    fn uring_op(&mut self, write: bool, fd: libc::c_int) -> Result<i32> {
        let r = self.ring.as_mut().ok_or("no io_uring registered")?;
        let e = if write {
            opcode::WriteFixed::new(types::Fd(fd), r.addr.cast_const(), r.len as u32, 0)
                .offset(0)
                .build()
        } else {
            opcode::ReadFixed::new(types::Fd(fd), r.addr, r.len as u32, 0)
                .offset(0)
                .build()
        };
        // SAFETY: the entry names fixed buffer 0 (pinned pages the ring
        // owns, see `uring_register`) and `fd`, which outlives the wait below.
        unsafe { r.ring.submission().push(&e) }.map_err(|_| "submission queue full")?;
        r.ring
            .submit_and_wait(1)
            .map_err(|e| format!("io_uring_enter: {e}"))?;
        let cqe = r.ring.completion().next().ok_or("no completion")?;
        Ok(cqe.result())
    }

    /// WRITE_FIXED of the whole fixed buffer to a file, read back: what
    /// the buffer holds now.
    pub(super) fn uring_out(&mut self, pat: u8) -> Result<String> {
        let out = memfd()?;
        let n = self.uring_op(true, out.as_raw_fd())?;
        if n < 0 {
            return Err(format!("WRITE_FIXED: errno {}", -n));
        }
        let mut buf = vec![0u8; n as usize];
        // SAFETY: pread into a buffer of its length.
        let got = unsafe { libc::pread(out.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if got != n as isize {
            return Err(format!("pread: {got}"));
        }
        Ok(summary(&buf, pat))
    }

    /// READ_FIXED from a file of `b` bytes into the whole fixed buffer.
    pub(super) fn uring_in(&mut self, b: u8) -> Result<String> {
        let len = self.ring.as_ref().ok_or("no io_uring registered")?.len;
        let src = memfd()?;
        let data = vec![b; len];
        // SAFETY: pwrite from a buffer of its length.
        let put = unsafe { libc::pwrite(src.as_raw_fd(), data.as_ptr().cast(), len, 0) };
        if put != len as isize {
            return Err(format!("pwrite: {put}"));
        }
        let n = self.uring_op(false, src.as_raw_fd())?;
        if n < 0 {
            return Err(format!("READ_FIXED: errno {}", -n));
        }
        Ok(format!("bytes={n}"))
    }

    /// vmsplice(2)s the first `len` bytes of the held memory into a pipe.
    pub(super) fn vmsplice(&mut self, len: usize) -> Result<String> {
        let addr = self.mem()?.as_ptr();
        let mut p = [0; 2];
        // SAFETY: pipe2 fills a local array.
        if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(format!("pipe2: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let r = unsafe { OwnedFd::from_raw_fd(p[0]) };
        // SAFETY: as for the read end.
        let w = unsafe { OwnedFd::from_raw_fd(p[1]) };
        // SAFETY: fcntl on our own pipe.
        if unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, len as libc::c_int) } < 0 {
            return Err(format!("F_SETPIPE_SZ: {}", std::io::Error::last_os_error()));
        }
        let mut done = 0;
        while done < len {
            let iov = libc::iovec {
                // SAFETY: done < len <= the mapping's length.
                iov_base: unsafe { addr.add(done) }.cast(),
                iov_len: len - done,
            };
            // SAFETY: the iovec covers our live mapping; the pipe takes
            // references to its pages and never writes them.
            let n = unsafe { libc::vmsplice(w.as_raw_fd(), &iov, 1, libc::SPLICE_F_NONBLOCK) };
            if n <= 0 {
                break;
            }
            done += n as usize;
        }
        self.pipe = Some((r, w));
        Ok(format!("bytes={done}"))
    }

    /// Everything in the pipe.
    pub(super) fn pipe_read(&mut self, pat: u8) -> Result<String> {
        let (r, _) = self.pipe.as_ref().ok_or("no pipe")?;
        let mut all = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            // SAFETY: read into a buffer of its length.
            let n = unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            all.extend_from_slice(&buf[..n as usize]);
        }
        Ok(summary(&all, pat))
    }
}
