//! `syscall(2)`, the C library's door to any system call: a program that
//! changes who it is (`setresuid`, `seccomp`, `landlock_restrict_self`,
//! `unshare`...) or closes descriptors through it is followed as through
//! the C library's own functions (`threads.rs`, `lazy.rs`). Every call is
//! made directly, as the C library's `syscall` makes it (its result, or -1
//! and errno).
//!
//! The entry point itself is a leaf, as the C library's is: a `clone`,
//! `fork`, `vfork` or `clone3` made through it returns in the child on the
//! stack the caller gave it (a raw thread's function address at its top,
//! say), where a frame of ours would not be. Those four are made there,
//! every other number goes on to [`followed`].

use std::ffi::{c_int, c_long, c_uint};

use super::threads::{prctl_scope, setns_scope, unshare_scope};
use crate::lazy::{closing, wanted};
use crate::sys::{self, direct};
use crate::threads::{changing, Scope};

/// `landlock_restrict_self(2)` (the same number on every architecture).
const SYS_LANDLOCK_RESTRICT_SELF: c_long = 446;
/// `seccomp(2)`'s operations that enter a filter (strict mode, a filter).
const SECCOMP_SET_MODE_STRICT: c_long = 0;
const SECCOMP_SET_MODE_FILTER: c_long = 1;

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
        | SYS_LANDLOCK_RESTRICT_SELF => Some(Scope::Thread),
        libc::SYS_seccomp if matches!(a, SECCOMP_SET_MODE_STRICT | SECCOMP_SET_MODE_FILTER) => {
            Some(Scope::Seccomp)
        }
        libc::SYS_prctl => prctl_scope(a as c_int, b as _),
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

/// Every number but the four made in the entry point: followed where it
/// changes who the program is or closes descriptors, then made.
///
/// # Safety
/// As C's `syscall`.
unsafe extern "C" fn followed(
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
        Some(s) => changing(s, None, call, || {
            sys::set_errno(libc::EAGAIN);
            -1
        }),
        None => call(),
    }
}

/// A call the entry point made that failed with `-errno` (`neg`): errno set,
/// -1 returned, as the C library's `syscall` does.
extern "C" fn failed(neg: c_long) -> c_long {
    sys::set_errno(-neg as c_int);
    -1
}

/// # Safety
/// As C's `syscall` (its variadic arguments passed as the registers and the
/// stack carry them: six integers or pointers).
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
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
    core::arch::naked_asm!(
        // clone, fork, vfork, clone3: made here; the rest, followed.
        "cmp rdi, 56",
        "je 2f",
        "cmp rdi, 57",
        "je 2f",
        "cmp rdi, 58",
        "je 2f",
        "cmp rdi, 435",
        "je 2f",
        "jmp {followed}",
        "2:",
        "mov rax, rdi",
        "mov rdi, rsi",
        "mov rsi, rdx",
        "mov rdx, rcx",
        "mov r10, r8",
        "mov r8, r9",
        "mov r9, [rsp + 8]",
        "syscall",
        "cmp rax, -4095",
        "jae 3f",
        "ret",
        "3:",
        "mov rdi, rax",
        "jmp {failed}",
        followed = sym followed,
        failed = sym failed,
    )
}

/// # Safety
/// As C's `syscall` (its variadic arguments passed as the registers carry
/// them: six integers or pointers).
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
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
    core::arch::naked_asm!(
        // clone and clone3 (aarch64 has no fork or vfork): made here; the
        // rest, followed.
        "cmp x0, #220",
        "b.eq 2f",
        "cmp x0, #435",
        "b.eq 2f",
        "b {followed}",
        "2:",
        "mov x8, x0",
        "mov x0, x1",
        "mov x1, x2",
        "mov x2, x3",
        "mov x3, x4",
        "mov x4, x5",
        "mov x5, x6",
        "svc #0",
        "cmn x0, #4095",
        "b.cs 3f",
        "ret",
        "3:",
        "b {failed}",
        followed = sym followed,
        failed = sym failed,
    )
}
