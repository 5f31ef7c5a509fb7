//! The man pages' ENVIRONMENT: the variables the library reads in every
//! command, the client's socket, and the preload's `PREZERO_*` contract
//! (`prezero run`), the last read from the library's own table
//! (`prezero_sys::env::ALL`), so a variable added there is documented here.

use prezero_sys::env::{Kind, Var};
use roff::{roman, Roff};

/// A group of variables a command reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Env {
    /// `PREZERO_SOCKET`: where the client looks for `prezero serve`.
    Socket,
    /// The preload's variables, which `prezero run` sets from its flags.
    Preload,
}

/// What the library reads in every command: the variable, and what it does.
const LIBRARY: &[(&str, &str)] = &[
    (
        "PREZERO_CPU",
        "Behave as a narrower CPU: an ISA level (x86-64-v2, x86-64-v3, x86-64-v4; armv8.0 \
         ... armv9.5) and/or removals (-avx512f, -clzero), comma-separated. It only takes \
         away: a level this CPU cannot reach stops the command (exit status 2). prezero \
         info shows what is in force.",
    ),
    (
        "PREZERO_STRATEGY",
        "Force Auto to one clearing kernel (rep-stosb, avx512-nt, avx2-nt, movnti, clzero, \
         avx512, avx2, dc-zva, portable), for experiments; one this CPU lacks is ignored \
         with a warning.",
    ),
    (
        "PREZERO_PROFILE",
        "The calibration profile to follow instead of the default one (a path), or none \
         for the built-in choices.",
    ),
    (
        "XDG_CONFIG_HOME, HOME",
        "Where the default profile is: $XDG_CONFIG_HOME/prezero/profile.json, else \
         $HOME/.config/prezero/profile.json.",
    ),
    (
        "PREZERO_VERIFY",
        "1: every chunk a pool hands out is checked zero first (a panic if one is not).",
    ),
];

const SOCKET: (&str, &str) = (
    "PREZERO_SOCKET",
    "The socket of prezero serve to use when --socket is not given (default \
     /run/prezero/prezero.sock).",
);

/// The ENVIRONMENT section for a command reading the library's variables
/// and `groups`.
pub(super) fn section(roff: &mut Roff, groups: &[Env]) {
    roff.control("SH", ["ENVIRONMENT"]);
    if groups.contains(&Env::Preload) {
        roff.control("PP", []).text([roman(
            "The preload reads these in every process it is loaded into (prezero run sets \
             them from its flags; a flag overrides a variable, an absent flag keeps the \
             caller's, and a value the preload would refuse stops prezero run before the \
             program starts):",
        )]);
        for v in prezero_sys::env::ALL {
            super::item(roff, v.name, &preload_text(&v));
        }
        roff.control("PP", []).text([roman(
            "Sizes take K, M, G and T suffixes (binary). The library, in every command:",
        )]);
    }
    for (name, what) in LIBRARY {
        super::item(roff, name, what);
    }
    if groups.contains(&Env::Socket) {
        super::item(roff, SOCKET.0, SOCKET.1);
    }
}

/// A preload variable: what it does, what it takes, its default.
fn preload_text(v: &Var) -> String {
    let takes = match v.kind {
        Kind::Size { min } => format!("a size, at least {}", prezero::fmt_size(min)),
        Kind::SizeOrZero => "a size, or 0 for none".to_owned(),
        Kind::Flag => "1 (on) or 0 (off)".to_owned(),
        Kind::Pid => "a process id".to_owned(),
        Kind::Seconds => "a number of seconds".to_owned(),
        Kind::FileOrZero => "an absolute path, or 0 for none".to_owned(),
    };
    format!("{} Takes {takes}; default {}.", v.what, v.default)
}
