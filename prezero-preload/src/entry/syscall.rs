//! `syscall(2)`, the C library's door to any system call: a program that
//! changes who it is (`setresuid`, `capset`, `seccomp`,
//! `landlock_restrict_self`, `unshare`...) or closes descriptors through it
//! is followed as through the C library's own functions (`threads.rs`,
//! `lazy.rs`). Every call is made directly, as the C library's `syscall`
//! makes it (its result, or -1 and errno).

use std::ffi::{c_int, c_long, c_uint};

use super::threads::{prctl_narrows, setns_scope, unshare_scope};
use crate::lazy::{closing, wanted};
use crate::sys::direct;
use crate::threads::{changing, Scope};

/// `landlock_restrict_self(2)` (the same number on every architecture).
const SYS_LANDLOCK_RESTRICT_SELF: c_long = 446;

/// Whose identity system call `nr` with first arguments `a`, `b` changes,
/// if it changes one.
fn scope(nr: c_long, a: c_long, b: c_long) -> Option<Scope> {
    match nr {
        libc::SYS_setuid
        | libc::SYS_setgid
        | libc::SYS_setreuid
        | libc::SYS_setregid
        | libc::SYS_setresuid
        | libc::SYS_setresgid
        | libc::SYS_setfsuid
        | libc::SYS_setfsgid
        | libc::SYS_setgroups
        | libc::SYS_seccomp
        | SYS_LANDLOCK_RESTRICT_SELF => Some(Scope::Thread),
        libc::SYS_prctl => prctl_narrows(a as c_int, b as _).then_some(Scope::Thread),
        libc::SYS_unshare => unshare_scope(a as c_int),
        libc::SYS_setns => Some(setns_scope(b as c_int)),
        _ => None,
    }
}

/// The descriptors system call `nr` closes, if it closes any.
fn closes(nr: c_long, a: c_long, b: c_long, c: c_long) -> Option<(c_int, c_int)> {
    let fd = |v: c_long| c_int::try_from(v as c_uint).unwrap_or(c_int::MAX);
    match nr {
        libc::SYS_close => Some((fd(a), fd(a))),
        libc::SYS_close_range if c as c_int & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 => {
            Some((fd(a), fd(b)))
        }
        libc::SYS_dup3 if a != b => Some((fd(b), fd(b))),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_dup2 if a != b => Some((fd(b), fd(b))),
        _ => None,
    }
}

/// # Safety
/// As C's `syscall` (its variadic arguments passed as the registers carry
/// them: six integers or pointers).
#[no_mangle]
pub unsafe extern "C" fn syscall(
    nr: c_long,
    a: c_long,
    b: c_long,
    c: c_long,
    d: c_long,
    e: c_long,
    f: c_long,
) -> c_long {
    // SAFETY: the caller's arguments, as system call `nr` takes them.
    let call = || direct::result(unsafe { direct::syscall6(nr, [a, b, c, d, e, f]) }).unwrap_or(-1);
    if let Some((lo, hi)) = closes(nr, a, b, c) {
        if wanted() {
            closing(lo, hi);
        }
        return call();
    }
    match scope(nr, a, b) {
        Some(s) => changing(s, call, || {
            crate::sys::set_errno(libc::EAGAIN);
            -1
        }),
        None => call(),
    }
}
