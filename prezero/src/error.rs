//! The one error type of the library.

use std::fmt;
use std::io;

/// Everything that can go wrong in prezero. Each variant says enough to act on.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The requested clearing kernel needs an instruction this CPU lacks.
    Unsupported {
        /// The kernel's name, as `prezero info` prints it.
        kernel: &'static str,
        /// What is missing, e.g. "avx512f".
        needs: &'static str,
    },
    /// An argument is outside what the call accepts.
    InvalidArgument(String),
    /// The kernel refused memory: `size` bytes could not be mapped.
    OutOfMemory {
        /// The size asked for, in bytes.
        size: usize,
    },
    /// A pool has handed out all its capacity.
    Exhausted {
        /// The pool's capacity in bytes.
        capacity: usize,
    },
    /// Verify mode found a non-zero byte in memory about to be handed out as zero.
    NotZero {
        /// Offset of the first non-zero byte.
        offset: usize,
    },
    /// The object is still in use (a pool with chunks outstanding).
    Busy,
    /// Not enough free hugetlb pages of the requested size.
    HugetlbShortage {
        /// Page size in bytes.
        page_size: usize,
        /// Pages the request needs.
        needed: usize,
        /// Pages free right now.
        free: usize,
        /// A command that reserves enough (run as root).
        reserve_cmd: String,
    },
    /// Any other failing system call: which call, and the OS error.
    Os {
        /// The call, e.g. "madvise(MADV_POPULATE_WRITE)".
        call: &'static str,
        /// The error the kernel returned.
        source: io::Error,
    },
}

impl Error {
    /// [`Error::InvalidArgument`] with this message.
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }

    /// [`Error::Os`]: `call` failed with `source`.
    pub fn os(call: &'static str, source: io::Error) -> Self {
        Error::Os { call, source }
    }

    /// The matching errno (positive: the C ABI returns it negated), for the C
    /// ABI and for callers who think in errno. Always in 1..=4095: an OS code
    /// that is not a real errno reads as `EIO`, so a C call never reports
    /// success or a positive number for a failure.
    pub fn errno(&self) -> i32 {
        let real = |e: i32| (1..=4095).contains(&e);
        match self {
            Error::Unsupported { .. } => libc::ENOTSUP,
            Error::InvalidArgument(_) => libc::EINVAL,
            Error::OutOfMemory { .. } | Error::HugetlbShortage { .. } => libc::ENOMEM,
            Error::Exhausted { .. } => libc::EAGAIN,
            Error::NotZero { .. } => libc::EIO,
            Error::Busy => libc::EBUSY,
            Error::Os { source, .. } => source
                .raw_os_error()
                .filter(|e| real(*e))
                .unwrap_or(libc::EIO),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unsupported { kernel, needs } => {
                write!(f, "kernel '{kernel}' needs {needs}, which this CPU lacks")
            }
            Error::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
            Error::OutOfMemory { size } => write!(f, "out of memory mapping {size} bytes"),
            Error::NotZero { offset } => {
                write!(f, "verify: memory to be handed out as zero has a non-zero byte at {offset}")
            }
            Error::Busy => write!(f, "still in use (chunks outstanding)"),
            Error::Exhausted { capacity } => {
                write!(f, "pool exhausted: all {capacity} bytes of its capacity are in use")
            }
            Error::HugetlbShortage {
                page_size,
                needed,
                free,
                reserve_cmd,
            } => write!(
                f,
                "need {needed} hugetlb pages of {} KiB but only {free} are free; reserve more with: {reserve_cmd}",
                page_size / 1024
            ),
            Error::Os { call, source } => write!(f, "{call} failed: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Shorthand used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::Error;

    #[test]
    fn an_os_code_that_is_no_errno_never_reads_as_success() {
        for bad in [0, -12, i32::MIN, 4096, i32::MAX] {
            let e = Error::os("test", std::io::Error::from_raw_os_error(bad));
            assert_eq!(e.errno(), libc::EIO, "{bad}");
        }
        let e = Error::os("test", std::io::Error::from_raw_os_error(libc::ENOMEM));
        assert_eq!(e.errno(), libc::ENOMEM);
    }
}
