//! Why the lazy mode could not start, said once on stderr (the program
//! `prezero run` executes; it then runs as `prezero run` runs it).

use crate::sys::uffd;
use crate::sys::{self, Errno};

/// Why it could not start.
pub enum Why {
    /// Testing only: `PREZERO_NO_USERFAULTFD=1`.
    Disabled,
    /// Neither `/dev/userfaultfd` nor `userfaultfd(2)` is allowed.
    Refused(uffd::Refused),
    /// The kernel has no `UFFDIO_MOVE`.
    NoMove(Errno),
    /// A step of the start failed: which, and its error.
    Failed(&'static str, Errno),
    /// `RLIMIT_DATA` is set: the reserve would count against it.
    DataLimit,
}

impl Why {
    /// Says why on stderr (formatted on the stack).
    pub fn print(&self) {
        use std::io::Write;
        let mut buf = [0u8; 512];
        let mut w = &mut buf[..];
        let _ = write!(w, "prezero: --lazy: ");
        let _ = match self {
            Why::Disabled => write!(w, "userfaultfd disabled (PREZERO_NO_USERFAULTFD=1)"),
            Why::Refused(r) => write!(
                w,
                "userfaultfd is not allowed here (/dev/userfaultfd: {}; userfaultfd(2): {}: \
                 give the user access to /dev/userfaultfd{})",
                sys::strerror(r.device),
                r.syscall
                    .map_or("not tried under a seccomp filter", sys::strerror),
                if r.syscall.is_some() {
                    ", or CAP_SYS_PTRACE"
                } else {
                    ""
                }
            ),
            Why::NoMove(e) => write!(
                w,
                "the kernel has no UFFDIO_MOVE (Linux 6.8 or later; {})",
                sys::strerror(*e)
            ),
            Why::Failed(what, e) => write!(w, "{what}: {}", sys::strerror(*e)),
            Why::DataLimit => write!(
                w,
                "RLIMIT_DATA is set, and the reserve would count against it"
            ),
        };
        let _ = writeln!(w, "; running as prezero run does");
        let used = 512 - w.len();
        sys::write_stderr(&buf[..used]);
    }
}
