//! The C entry points of `crate::threads`: each calls the C library's,
//! `set*id` once our threads have the caller's credentials, `unshare` and
//! `setns` of what needs a single-threaded process with our threads
//! stopped. Not in a test build (the harness's threads would go through
//! them).

use std::ffi::c_int;

use super::missing;
use crate::threads::{agreeing, alone, setns_needs_one_thread, unshare_needs_one_thread};

/// Entry points that glibc makes every thread repeat: each the C
/// library's, once our threads have the caller's credentials.
macro_rules! every_thread {
    ($($name:ident $c_name:literal ( $($arg:ident : $t:ty),* )),* $(,)?) => {$(
        /// # Safety
        /// As the C function of this name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $t),*) -> c_int {
            match next_fn!($c_name, unsafe extern "C" fn($($t),*) -> c_int) {
                // SAFETY: the caller's arguments, as the function takes them.
                Some(f) => agreeing(|| unsafe { f($($arg),*) }),
                None => missing(-1),
            }
        }
    )*};
}

every_thread! {
    setuid c"setuid" (uid: libc::uid_t),
    setgid c"setgid" (gid: libc::gid_t),
    seteuid c"seteuid" (uid: libc::uid_t),
    setegid c"setegid" (gid: libc::gid_t),
    setreuid c"setreuid" (r: libc::uid_t, e: libc::uid_t),
    setregid c"setregid" (r: libc::gid_t, e: libc::gid_t),
    setresuid c"setresuid" (r: libc::uid_t, e: libc::uid_t, s: libc::uid_t),
    setresgid c"setresgid" (r: libc::gid_t, e: libc::gid_t, s: libc::gid_t),
    setgroups c"setgroups" (n: usize, list: *const libc::gid_t),
    // Its own setgroups is glibc's internal one, which the one above does
    // not see.
    initgroups c"initgroups" (user: *const libc::c_char, gid: libc::gid_t),
}

/// # Safety
/// As C's `unshare`.
#[no_mangle]
pub unsafe extern "C" fn unshare(flags: c_int) -> c_int {
    match next_fn!(c"unshare", unsafe extern "C" fn(c_int) -> c_int) {
        // SAFETY: the caller's argument.
        Some(f) if unshare_needs_one_thread(flags) => alone(|| unsafe { f(flags) }),
        // SAFETY: as above.
        Some(f) => unsafe { f(flags) },
        None => missing(-1),
    }
}

/// # Safety
/// As C's `setns`.
#[no_mangle]
pub unsafe extern "C" fn setns(fd: c_int, kind: c_int) -> c_int {
    match next_fn!(c"setns", unsafe extern "C" fn(c_int, c_int) -> c_int) {
        // SAFETY: the caller's arguments.
        Some(f) if setns_needs_one_thread(kind) => alone(|| unsafe { f(fd, kind) }),
        // SAFETY: as above.
        Some(f) => unsafe { f(fd, kind) },
        None => missing(-1),
    }
}
