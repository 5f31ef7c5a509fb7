//! The `PREZERO_*` contract: every variable the preload reads, which `prezero
//! run` sets from its flags, with its name, what it takes, its smallest value
//! and its default, and the one reader both use. Nothing here allocates (the
//! preload reads them inside `malloc`).
//!
//! A value the reader refuses is the caller's to handle: `prezero run`
//! stops with the reason before the program runs; the preload, which has no
//! one to tell, takes the default.

/// What a variable takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A size ("64K", "1G").
    Size {
        /// Its smallest value, in bytes.
        min: usize,
    },
    /// A size, or `0` for none.
    SizeOrZero,
    /// `1` (on) or `0` (off).
    Flag,
    /// A process id: digits only.
    Pid,
    /// A whole number of seconds: digits only, no unit.
    Seconds,
    /// An absolute path, or `0` for none.
    FileOrZero,
}

/// One variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Var {
    /// `PREZERO_...`.
    pub name: &'static str,
    /// The name for `getenv`.
    pub cname: &'static core::ffi::CStr,
    /// What it takes.
    pub kind: Kind,
    /// What an unset or refused variable stands for, as a person reads it.
    pub default: &'static str,
    /// What it does, in one sentence (`prezero run`'s man page shows it).
    pub what: &'static str,
}

/// What a variable's value reads as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// Bytes (a size), seconds (`PREZERO_IDLE_SECS`) or a pid.
    Number(usize),
    /// On or off; for a file, whether one is named (its path is the raw
    /// value).
    Flag(bool),
}

/// Why a value was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// No size the parser reads.
    NotASize,
    /// Below the variable's smallest value.
    Below(usize),
    /// Neither `1` nor `0`.
    NotAFlag,
    /// Not digits alone.
    NotAPid,
    /// Not digits alone (a unit such as `1M` is a size's, not a time's).
    NotSeconds,
    /// Neither an absolute path nor `0`.
    NotAFile,
}

impl core::fmt::Display for Refused {
    fn fmt(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        match self {
            Refused::NotASize => f.write_str("not a size (try 4K, 2M, 1G)"),
            Refused::Below(min) => write!(f, "at least {}", crate::size::fmt_size(*min)),
            Refused::NotAFlag => f.write_str("1 or 0"),
            Refused::NotAPid => f.write_str("a process id (digits)"),
            Refused::NotSeconds => f.write_str("a number of seconds (digits, no unit)"),
            Refused::NotAFile => f.write_str("an absolute path, or 0 for none"),
        }
    }
}

impl Var {
    /// Reads `raw` (the variable's bytes) as the preload does.
    pub fn read(&self, raw: &[u8]) -> Result<Value, Refused> {
        match self.kind {
            Kind::Size { min } => {
                let n = crate::size::read_size(raw).ok().ok_or(Refused::NotASize)?;
                if n < min {
                    return Err(Refused::Below(min));
                }
                Ok(Value::Number(n))
            }
            Kind::SizeOrZero if is_zero(raw) => Ok(Value::Number(0)),
            Kind::SizeOrZero => crate::size::read_size(raw)
                .ok()
                .map(Value::Number)
                .ok_or(Refused::NotASize),
            Kind::Flag => match raw {
                b"1" => Ok(Value::Flag(true)),
                b"0" => Ok(Value::Flag(false)),
                _ => Err(Refused::NotAFlag),
            },
            Kind::Pid if !raw.is_empty() && raw.iter().all(u8::is_ascii_digit) => {
                crate::size::read_size(raw)
                    .ok()
                    .map(Value::Number)
                    .ok_or(Refused::NotAPid)
            }
            Kind::Pid => Err(Refused::NotAPid),
            Kind::Seconds => seconds(raw).map(Value::Number).ok_or(Refused::NotSeconds),
            Kind::FileOrZero if raw == b"0" => Ok(Value::Flag(false)),
            Kind::FileOrZero if raw.first() == Some(&b'/') && !raw.contains(&0) => {
                Ok(Value::Flag(true))
            }
            Kind::FileOrZero => Err(Refused::NotAFile),
        }
    }

    /// Whether `n` bytes are a value it takes (a flag given as a size).
    pub fn takes(&self, n: usize) -> Result<usize, Refused> {
        match self.kind {
            Kind::Size { min } if n < min => Err(Refused::Below(min)),
            _ => Ok(n),
        }
    }
}

/// Zero written `0` (blanks around it): what `--cap 0` sets; the size
/// parser refuses zero.
fn is_zero(raw: &[u8]) -> bool {
    core::str::from_utf8(raw).is_ok_and(|t| t.trim() == "0")
}

/// Digits alone (blanks around them), as a count: read as a size, `1M`
/// seconds would be 1,048,576 of them.
fn seconds(raw: &[u8]) -> Option<usize> {
    let t = core::str::from_utf8(raw).ok()?.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

/// Requests of at least this many bytes are served from the cache.
pub const THRESHOLD: Var = Var {
    name: "PREZERO_THRESHOLD",
    cname: c"PREZERO_THRESHOLD",
    // Below it the C library's own arenas serve better.
    kind: Kind::Size { min: 64 << 10 },
    default: "1M",
    what: "Requests of at least this many bytes are served from the cache.",
};
/// Most free bytes the cache keeps beyond what the program uses.
pub const CAP: Var = Var {
    name: "PREZERO_CAP",
    cname: c"PREZERO_CAP",
    kind: Kind::SizeOrZero,
    default: "the smaller of 25% of MemAvailable and 8G",
    what: "Most free bytes the cache keeps populated beyond what the program uses.",
};
/// Bytes populated in the background at start, in the program `prezero run`
/// executes.
pub const PREFILL: Var = Var {
    name: "PREZERO_PREFILL",
    cname: c"PREZERO_PREFILL",
    kind: Kind::SizeOrZero,
    default: "0",
    what: "Bytes populated in the background at start, for the first requests, in the program prezero run executes.",
};
/// Free memory unused this many seconds goes back.
pub const IDLE_SECS: Var = Var {
    name: "PREZERO_IDLE_SECS",
    cname: c"PREZERO_IDLE_SECS",
    kind: Kind::Seconds,
    default: "5",
    what: "Free memory unused this many seconds goes back to the kernel.",
};
/// A summary line per process at exit.
pub const STATS: Var = Var {
    name: "PREZERO_STATS",
    cname: c"PREZERO_STATS",
    kind: Kind::Flag,
    default: "0",
    what: "A summary line per process on stderr at exit.",
};
/// Transparent huge pages on the cache's range.
pub const THP: Var = Var {
    name: "PREZERO_THP",
    cname: c"PREZERO_THP",
    kind: Kind::Flag,
    default: "0",
    what: "Transparent huge pages on the cache's range.",
};
/// A spare block populated for a program that frees and asks again.
pub const SPARE: Var = Var {
    name: "PREZERO_SPARE",
    cname: c"PREZERO_SPARE",
    kind: Kind::Flag,
    default: "0",
    what: "A spare block populated for a program that frees and asks again faster than the scrubber clears.",
};
/// The lazy mode.
pub const LAZY: Var = Var {
    name: "PREZERO_LAZY",
    cname: c"PREZERO_LAZY",
    kind: Kind::Flag,
    default: "0",
    what: "The lazy mode: large mappings populated on first touch from pre-zeroed huge pages.",
};
/// The lazy mode's reserve (one huge page at least).
pub const RESERVE: Var = Var {
    name: "PREZERO_RESERVE",
    cname: c"PREZERO_RESERVE",
    kind: Kind::Size { min: 2 << 20 },
    default: "the smallest of 1G, 10% of MemAvailable and 10% of the memory cgroup's room",
    what: "With the lazy mode, the most pre-zeroed memory a process keeps.",
};
/// The process `prezero run` executes (it prefills, fills its reserve from
/// start-up).
pub const PREFILL_PID: Var = Var {
    name: "PREZERO_PREFILL_PID",
    cname: c"PREZERO_PREFILL_PID",
    kind: Kind::Pid,
    default: "none",
    what: "The process prezero run executes (it prefills, and fills its lazy reserve from start-up); set by prezero run.",
};
/// Testing only: the lazy mode acts as if userfaultfd were refused.
pub const NO_USERFAULTFD: Var = Var {
    name: "PREZERO_NO_USERFAULTFD",
    cname: c"PREZERO_NO_USERFAULTFD",
    kind: Kind::Flag,
    default: "0",
    what: "Testing only: the lazy mode acts as if userfaultfd were refused.",
};

/// Where the lazy mode keeps what the program took in its last run: read
/// at start (the reserve fills that much ahead), written at exit.
pub const HISTORY: Var = Var {
    name: "PREZERO_HISTORY",
    cname: c"PREZERO_HISTORY",
    kind: Kind::FileOrZero,
    default: "0 (prezero run --lazy --history names a file per command in its cache directory)",
    what: "With the lazy mode, the file that keeps what the program took in its last run: its reserve fills that much ahead at start.",
};

/// Every variable of the contract.
pub const ALL: [Var; 12] = [
    THRESHOLD,
    CAP,
    PREFILL,
    IDLE_SECS,
    STATS,
    THP,
    SPARE,
    LAZY,
    RESERVE,
    PREFILL_PID,
    NO_USERFAULTFD,
    HISTORY,
];

/// The variable named `name`.
pub fn var(name: &str) -> Option<Var> {
    ALL.into_iter().find(|v| v.name == name)
}

/// Inputs and what each reader must make of them: the variable, its value,
/// and the number (or flag as 0/1) read, `None` where it is refused. The
/// preload's tests and `prezero run`'s run both readers over it.
#[doc(hidden)]
pub const CASES: &[(&str, &str, Option<usize>)] = &[
    ("PREZERO_THRESHOLD", "1M", Some(1 << 20)),
    ("PREZERO_THRESHOLD", "64K", Some(64 << 10)),
    ("PREZERO_THRESHOLD", "65535", None),
    ("PREZERO_THRESHOLD", "4K", None),
    ("PREZERO_THRESHOLD", "0", None),
    ("PREZERO_THRESHOLD", "lots", None),
    ("PREZERO_THRESHOLD", " 2m ", Some(2 << 20)),
    ("PREZERO_CAP", "0", Some(0)),
    ("PREZERO_CAP", " 0 ", Some(0)),
    ("PREZERO_CAP", "8G", Some(8 << 30)),
    ("PREZERO_CAP", "4096", Some(4096)),
    ("PREZERO_CAP", "-1", None),
    ("PREZERO_CAP", "", None),
    ("PREZERO_PREFILL", "16M", Some(16 << 20)),
    ("PREZERO_PREFILL", "0", Some(0)),
    ("PREZERO_PREFILL", "1.5M", None),
    ("PREZERO_IDLE_SECS", "0", Some(0)),
    ("PREZERO_IDLE_SECS", "30", Some(30)),
    ("PREZERO_IDLE_SECS", " 7 ", Some(7)),
    ("PREZERO_IDLE_SECS", "soon", None),
    ("PREZERO_IDLE_SECS", "1M", None),
    ("PREZERO_IDLE_SECS", "+5", None),
    ("PREZERO_IDLE_SECS", "99999999999999999999999", None),
    ("PREZERO_STATS", "1", Some(1)),
    ("PREZERO_STATS", "0", Some(0)),
    ("PREZERO_STATS", "yes", None),
    ("PREZERO_STATS", "", None),
    ("PREZERO_THP", "1", Some(1)),
    ("PREZERO_THP", "2", None),
    ("PREZERO_SPARE", "1", Some(1)),
    ("PREZERO_LAZY", "1", Some(1)),
    ("PREZERO_LAZY", "true", None),
    ("PREZERO_RESERVE", "2M", Some(2 << 20)),
    ("PREZERO_RESERVE", "1G", Some(1 << 30)),
    ("PREZERO_RESERVE", "1M", None),
    ("PREZERO_RESERVE", "0", None),
    ("PREZERO_RESERVE", "x", None),
    ("PREZERO_PREFILL_PID", "4187", Some(4187)),
    ("PREZERO_PREFILL_PID", "1K", None),
    ("PREZERO_PREFILL_PID", "", None),
    ("PREZERO_NO_USERFAULTFD", "1", Some(1)),
    (
        "PREZERO_HISTORY",
        "/root/.cache/prezero/history/0123abcd",
        Some(1),
    ),
    ("PREZERO_HISTORY", "0", Some(0)),
    ("PREZERO_HISTORY", "history", None),
    ("PREZERO_HISTORY", "", None),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_reads_as_the_table_says() {
        for &(name, raw, want) in CASES {
            let got = var(name)
                .unwrap()
                .read(raw.as_bytes())
                .ok()
                .map(|v| match v {
                    Value::Number(n) => n,
                    Value::Flag(f) => usize::from(f),
                });
            assert_eq!(got, want, "{name}={raw:?}");
        }
    }

    #[test]
    fn idle_seconds_take_no_unit() {
        assert_eq!(IDLE_SECS.read(b"1M"), Err(Refused::NotSeconds));
        assert_eq!(
            Refused::NotSeconds.to_string(),
            "a number of seconds (digits, no unit)"
        );
    }

    #[test]
    fn every_variable_has_a_case_and_one_name() {
        for v in ALL {
            assert!(CASES.iter().any(|c| c.0 == v.name), "{}", v.name);
            assert_eq!(ALL.iter().filter(|w| w.name == v.name).count(), 1);
        }
    }
}
