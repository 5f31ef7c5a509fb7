//! The service's error: what the library reports, or what `prezero serve`
//! answered. The library's own error knows nothing of a service.

use std::fmt;
use std::io;

/// Everything that can go wrong asking `prezero serve` for memory, or
/// serving it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// What the library reports here: a mapping, a hugetlb shortage, a call
    /// that failed, a bad argument.
    Local(prezero::Error),
    /// `prezero serve` refused a request, or is not there.
    Refused {
        /// The service's errno: ENOTCONN (no service), EACCES (uid not allowed),
        /// ENOMEM (too little ready memory), EDQUOT (uid cap), EINVAL...
        errno: i32,
        /// The service's message.
        reason: String,
    },
    /// `prezero serve` refused a request because the caller's cgroup is at
    /// its hugetlb or memory limit: what the kernel would answer the
    /// caller's own allocation (`ENOMEM`), so no local memory is made instead.
    CgroupLimit {
        /// The service's message (which cgroup, which limit).
        reason: String,
    },
}

impl Error {
    /// An argument outside what the call accepts (the library's
    /// [`prezero::Error::InvalidArgument`]).
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::Local(prezero::Error::invalid(msg))
    }

    /// `call` failed with `source` (the library's [`prezero::Error::Os`]).
    pub fn os(call: &'static str, source: io::Error) -> Self {
        Error::Local(prezero::Error::os(call, source))
    }

    /// The matching errno, always in 1..=4095: a code from the daemon that is
    /// no real errno reads as `EPROTO`, so a lying daemon can never make a C
    /// call report success or a positive number.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Local(e) => e.errno(),
            Error::Refused { errno, .. } if (1..=4095).contains(errno) => *errno,
            Error::Refused { .. } => libc::EPROTO,
            Error::CgroupLimit { .. } => libc::ENOMEM,
        }
    }
}

impl From<prezero::Error> for Error {
    fn from(e: prezero::Error) -> Self {
        Error::Local(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Local(e) => e.fmt(f),
            Error::Refused { reason, .. } | Error::CgroupLimit { reason } => {
                write!(f, "prezero serve: {reason}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Local(e) => e.source(),
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
    fn a_peers_code_that_is_no_errno_never_reads_as_success() {
        for bad in [0, -12, i32::MIN, 4096, i32::MAX] {
            let e = Error::Refused {
                errno: bad,
                reason: String::new(),
            };
            assert_eq!(e.errno(), libc::EPROTO, "{bad}");
        }
        let e = Error::Refused {
            errno: libc::ENOMEM,
            reason: String::new(),
        };
        assert_eq!(e.errno(), libc::ENOMEM);
        let e = Error::CgroupLimit {
            reason: String::new(),
        };
        assert_eq!(e.errno(), libc::ENOMEM);
    }
}
