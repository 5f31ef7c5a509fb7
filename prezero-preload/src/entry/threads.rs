//! The C entry points of `crate::threads`: calls that change who the
//! program is, each run with our threads stopped and started again after
//! it (they take after the caller): `set*id`, `setgroups` and `initgroups`
//! (glibc makes every thread repeat them), `unshare` and `setns`, and the
//! `prctl` options that enter a seccomp filter or narrow the bounding set.
//! Not in a test build (the harness's threads would go through them).

use std::ffi::{c_int, c_ulong};

use super::missing;
use crate::sys::{self, direct};
use crate::threads::{
    changing, setns_needs_one_thread, unshare_needs_one_thread, IdCall, IdChange, Scope,
};

/// What a call returns, errno `EAGAIN`, where a thread of ours could not be
/// stopped before a call every thread must repeat.
fn again() -> c_int {
    sys::set_errno(libc::EAGAIN);
    -1
}

/// Entry points that glibc makes every thread repeat: each the C
/// library's, with none of our threads running, unless they can repeat it
/// as they are (`ids`: the call, and the caller's ids it is judged by).
macro_rules! every_thread {
    ($($name:ident $c_name:literal ( $($arg:ident : $t:ty),* ) $ids:expr),* $(,)?) => {$(
        /// # Safety
        /// As the C function of this name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $t),*) -> c_int {
            let Some(f) = next_fn!($c_name, unsafe extern "C" fn($($t),*) -> c_int) else {
                return missing(-1);
            };
            // SAFETY: the caller's arguments, as the function takes them.
            let call = || unsafe { f($($arg),*) };
            let ids: Option<IdChange> = $ids;
            changing(Scope::Process, ids, call, again)
        }
    )*};
}

/// A `set*id` call of uids (`gid` false) or gids.
fn ids(gid: bool, call: IdCall) -> Option<IdChange> {
    Some(IdChange { gid, call })
}

every_thread! {
    setuid c"setuid" (uid: libc::uid_t) ids(false, IdCall::Set(uid)),
    setgid c"setgid" (gid: libc::gid_t) ids(true, IdCall::Set(gid)),
    seteuid c"seteuid" (uid: libc::uid_t) ids(false, IdCall::Eff(uid)),
    setegid c"setegid" (gid: libc::gid_t) ids(true, IdCall::Eff(gid)),
    setreuid c"setreuid" (r: libc::uid_t, e: libc::uid_t) ids(false, IdCall::Re(r, e)),
    setregid c"setregid" (r: libc::gid_t, e: libc::gid_t) ids(true, IdCall::Re(r, e)),
    setresuid c"setresuid" (r: libc::uid_t, e: libc::uid_t, s: libc::uid_t)
        ids(false, IdCall::Res([r, e, s])),
    setresgid c"setresgid" (r: libc::gid_t, e: libc::gid_t, s: libc::gid_t)
        ids(true, IdCall::Res([r, e, s])),
    // Groups always need CAP_SETGID.
    setgroups c"setgroups" (n: usize, list: *const libc::gid_t) None,
    // Its own setgroups is glibc's internal one, which the one above does
    // not see.
    initgroups c"initgroups" (user: *const libc::c_char, gid: libc::gid_t) None,
}

/// The scope of a change of namespaces by `unshare` (`flags`), if it is
/// one.
pub fn unshare_scope(flags: c_int) -> Option<Scope> {
    let namespaces = libc::CLONE_NEWCGROUP
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWUSER
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWTIME;
    if unshare_needs_one_thread(flags) {
        Some(Scope::Process)
    } else {
        (flags & namespaces != 0).then_some(Scope::Thread)
    }
}

/// The scope of `setns` into a namespace of type `kind`.
pub fn setns_scope(kind: c_int) -> Scope {
    if setns_needs_one_thread(kind) {
        Scope::Process
    } else {
        Scope::Thread
    }
}

/// Whose identity `prctl(option, arg2)` narrows in a way ours must follow,
/// if it narrows one: a seccomp filter entered, a capability dropped from
/// the bounding set (ours have none once they start, but where they could
/// not drop it), `no_new_privs`.
pub fn prctl_scope(option: c_int, arg2: c_ulong) -> Option<Scope> {
    match option {
        libc::PR_SET_SECCOMP => Some(Scope::Seccomp),
        libc::PR_CAPBSET_DROP => Some(Scope::Thread),
        libc::PR_SET_NO_NEW_PRIVS if arg2 != 0 => Some(Scope::Thread),
        _ => None,
    }
}

/// # Safety
/// As C's `unshare`.
#[no_mangle]
pub unsafe extern "C" fn unshare(flags: c_int) -> c_int {
    match next_fn!(c"unshare", unsafe extern "C" fn(c_int) -> c_int) {
        Some(f) => match unshare_scope(flags) {
            // SAFETY: the caller's argument.
            Some(scope) => changing(scope, None, || unsafe { f(flags) }, again),
            // SAFETY: as above.
            None => unsafe { f(flags) },
        },
        None => missing(-1),
    }
}

/// # Safety
/// As C's `setns`.
#[no_mangle]
pub unsafe extern "C" fn setns(fd: c_int, kind: c_int) -> c_int {
    match next_fn!(c"setns", unsafe extern "C" fn(c_int, c_int) -> c_int) {
        // SAFETY: the caller's arguments.
        Some(f) => changing(setns_scope(kind), None, || unsafe { f(fd, kind) }, again),
        None => missing(-1),
    }
}

/// # Safety
/// As C's `prctl` (its variadic arguments passed as the registers carry
/// them: five integers or pointers).
#[no_mangle]
pub unsafe extern "C" fn prctl(
    option: c_int,
    a2: c_ulong,
    a3: c_ulong,
    a4: c_ulong,
    a5: c_ulong,
) -> c_int {
    let call = || {
        let args = [option as _, a2 as _, a3 as _, a4 as _, a5 as _, 0];
        // SAFETY: the caller's arguments, as prctl(2) takes them (the C
        // library's prctl is the system call alone).
        let r = direct::result(unsafe { direct::syscall6(libc::SYS_prctl, args) });
        r.map_or(-1, |v| v as c_int)
    };
    match prctl_scope(option, a2) {
        Some(scope) => changing(scope, None, call, again),
        None => call(),
    }
}
