//! [`SegmentFiles`]: the memory as files rather than a mapping, for a program
//! that maps them itself (`prezero client exec`), and how they pass to it
//! across `exec`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use super::held::{lease_accessors, Backing};
use super::{SegmentView, Source};
use crate::{Error, Result};
use prezero::region::PageKind;
use prezero_sys as sys;

/// Zeroed, populated memory as files, from [`Client::alloc_files`]: the
/// service's segments (sealed hugetlb memfds), or one local memfd. Nothing is
/// mapped here. Dropped, the files close and the segments are released.
///
/// [`Client::alloc_files`]: super::Client::alloc_files
pub struct SegmentFiles {
    pub(super) len: usize,
    pub(super) page: PageKind,
    pub(super) source: Source,
    pub(super) backing: Backing<OwnedFd>,
}

/// A file given up by [`SegmentFiles::into_inherited`]: open across `exec`.
#[derive(Debug)]
pub struct InheritedFile {
    /// The memfd, with `FD_CLOEXEC` cleared.
    pub fd: OwnedFd,
    /// Where it starts in the request.
    pub offset: usize,
    /// Bytes of the request it covers (map this much of it; the file may be longer).
    pub len: usize,
}

impl SegmentFiles {
    lease_accessors!();

    /// Makes the child `cmd` starts inherit the files, under the descriptor
    /// numbers [`SegmentFiles::segments`] shows (name them to it by those): a
    /// `pre_exec` hook clears `FD_CLOEXEC` in the child only. Here the files
    /// stay close-on-exec, so no other thread's fork+exec inherits them.
    ///
    /// Keep `self` until the child is spawned, then drop it: the segments are
    /// released, and the daemon keeps them in quarantine for as long as the
    /// child (or anything it passes them to) holds them. With
    /// [`CommandExt::exec`](std::os::unix::process::CommandExt::exec) the
    /// hook runs in this process just before the exec; the exec then closes
    /// the client's connection (close-on-exec), which releases them.
    ///
    /// A spawn after `self` was dropped fails (`EBADF`) rather than pass on
    /// whatever file has since taken one of the numbers.
    pub fn pass_to(&self, cmd: &mut std::process::Command) -> Result<()> {
        let mut files = Vec::new();
        for s in self.segments() {
            let st = sys::fstat(s.fd).map_err(|e| Error::os("fstat", e))?;
            files.push((s.fd.as_raw_fd(), st.st_dev, st.st_ino));
        }
        // Runs between fork and exec: fstat, fcntl and a stack error only (no
        // allocation, no lock).
        let hook = move || {
            for &(fd, dev, ino) in &files {
                match sys::fstat(fd) {
                    Ok(st) if st.st_dev == dev && st.st_ino == ino => {}
                    _ => return Err(io::Error::from_raw_os_error(libc::EBADF)),
                }
                // SAFETY: `fd` was just seen to name the file it named in the
                // parent, and nothing in this child closes it before the exec.
                let fd = unsafe { BorrowedFd::borrow_raw(fd) };
                sys::set_cloexec(fd, false)?;
            }
            Ok(())
        };
        // SAFETY: the hook is async-signal-safe (above), so it may run in a
        // child forked from a multi-threaded process.
        unsafe { std::os::unix::process::CommandExt::pre_exec(cmd, hook) };
        Ok(())
    }

    /// Gives the files up for an `exec` of this process, which must be
    /// single-threaded: prefer [`SegmentFiles::pass_to`]. `FD_CLOEXEC` is
    /// cleared on each file at once, so a fork+exec on any other thread from
    /// now on hands the memory to that program too. The release is forgotten:
    /// the segments stay leased to the client's connection until it closes.
    /// The socket is close-on-exec, so an `exec` closes it, and the daemon
    /// then quarantines them for as long as any process holds one of the files
    /// or a mapping of it, and scrubs them once none is left; after a `spawn`
    /// instead they stay leased, and charged, until the [`Client`](super::Client) is dropped.
    pub fn into_inherited(self) -> Result<Vec<InheritedFile>> {
        for s in self.segments() {
            sys::set_cloexec(s.fd, false).map_err(|e| Error::os("fcntl(F_SETFD)", e))?;
        }
        let (fds, spans) = match self.backing {
            Backing::Local(fd) => (vec![fd], vec![(0, self.len)]),
            Backing::Service { spans, mut held } => {
                // No RELEASE when `held` drops: the connection's close does it.
                held.ids.clear();
                (std::mem::take(&mut held.fds), spans)
            }
        };
        Ok(fds
            .into_iter()
            .zip(spans)
            .map(|(fd, (offset, len))| InheritedFile { fd, offset, len })
            .collect())
    }
}
