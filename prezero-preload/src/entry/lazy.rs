//! The C entry points the lazy mode takes: `mmap` (and `mmap64`, its other
//! name), `munmap`, `mremap` and `madvise`; and `close`, `close_range`,
//! `closefrom`, `dup2` and `dup3`, which stop it first where they would
//! close its descriptors, and `mlock`, `mlock2`, `mlockall` and
//! `munlockall`, which leave locked memory to the kernel: each then calls
//! the C library's. Until the lazy mode is asked
//! for (or in a process where it is not) each is one load and the system
//! call itself, made directly: the C library's wrappers do no more, and
//! calling them by name would come back here. Not in a test build (the
//! harness would map through them).

use std::ffi::{c_int, c_uint, c_void};

use super::missing;
use crate::lazy::{closing, mappings, wanted};
use crate::sys::{self, set_errno, Errno};

fn answer<T>(r: Result<T, Errno>, failed: T) -> T {
    r.unwrap_or_else(|Errno(e)| {
        set_errno(e);
        failed
    })
}

/// # Safety
/// As C's `mmap`.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
) -> *mut c_void {
    let a = addr as usize;
    super::boot_once();
    let r = if wanted() {
        // SAFETY: the caller's arguments, as mmap(2) takes them.
        unsafe { mappings::mmap(a, len, prot, flags, fd, off) }
    } else {
        // SAFETY: as above.
        unsafe { sys::mmap_raw(a, len, prot, flags, fd, off) }
    };
    answer(r.map(|p| p as *mut c_void), libc::MAP_FAILED)
}

/// # Safety
/// As C's `mmap64` (on 64-bit Linux the same function as `mmap`).
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
) -> *mut c_void {
    // SAFETY: forwarded with the caller's arguments.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// # Safety
/// As C's `munmap`.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    let a = addr as usize;
    let r = if wanted() {
        // SAFETY: the caller's arguments, as munmap(2) takes them.
        unsafe { mappings::munmap(a, len) }
    } else {
        // SAFETY: as above.
        unsafe { sys::munmap_raw(a, len) }
    };
    answer(r.map(|()| 0), -1)
}

/// # Safety
/// As C's `mremap`. The C function is variadic, its fifth argument read
/// only with `MREMAP_FIXED`; the 64-bit Linux calling conventions pass it
/// where a fixed fifth argument goes, and it is read under the same rule.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    let (a, to) = (old as usize, new_addr as usize);
    let to = if flags & libc::MREMAP_FIXED != 0 {
        to
    } else {
        0
    };
    let r = if wanted() {
        // SAFETY: the caller's arguments, as mremap(2) takes them.
        unsafe { mappings::mremap(a, old_len, new_len, flags, to) }
    } else {
        // SAFETY: as above.
        unsafe { sys::mremap_raw(a, old_len, new_len, flags, to) }
    };
    answer(r.map(|p| p as *mut c_void), libc::MAP_FAILED)
}

/// # Safety
/// As C's `madvise`.
#[no_mangle]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int {
    let a = addr as usize;
    let r = if wanted() {
        // SAFETY: the caller's arguments, as madvise(2) takes them.
        unsafe { mappings::madvise(a, len, advice) }
    } else {
        // SAFETY: as above.
        unsafe { sys::madvise_raw(a, len, advice) }
    };
    answer(r.map(|()| 0), -1)
}

/// # Safety
/// As C's `close`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if wanted() {
        closing(fd, fd);
    }
    match next_fn!(c"close", unsafe extern "C" fn(c_int) -> c_int) {
        // SAFETY: the caller's argument.
        Some(f) => unsafe { f(fd) },
        None => missing(-1),
    }
}

/// # Safety
/// As C's `close_range`.
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    // CLOSE_RANGE_CLOEXEC only marks them.
    if wanted() && flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        let clamp = |fd: c_uint| c_int::try_from(fd).unwrap_or(c_int::MAX);
        closing(clamp(first), clamp(last));
    }
    match next_fn!(
        c"close_range",
        unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int
    ) {
        // SAFETY: the caller's arguments.
        Some(f) => unsafe { f(first, last, flags) },
        None => missing(-1),
    }
}

/// # Safety
/// As C's `closefrom`.
#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    if wanted() {
        closing(low, c_int::MAX);
    }
    if let Some(f) = next_fn!(c"closefrom", unsafe extern "C" fn(c_int)) {
        // SAFETY: the caller's argument.
        unsafe { f(low) }
    }
}

/// # Safety
/// As C's `dup2`.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if wanted() && old != new {
        closing(new, new);
    }
    match next_fn!(c"dup2", unsafe extern "C" fn(c_int, c_int) -> c_int) {
        // SAFETY: the caller's arguments.
        Some(f) => unsafe { f(old, new) },
        None => missing(-1),
    }
}

/// # Safety
/// As C's `dup3`.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if wanted() && old != new {
        closing(new, new);
    }
    match next_fn!(c"dup3", unsafe extern "C" fn(c_int, c_int, c_int) -> c_int) {
        // SAFETY: the caller's arguments.
        Some(f) => unsafe { f(old, new, flags) },
        None => missing(-1),
    }
}

/// # Safety
/// As C's `mlock`.
#[no_mangle]
pub unsafe extern "C" fn mlock(addr: *const c_void, len: usize) -> c_int {
    if wanted() {
        let a = addr as usize;
        mappings::to_kernel(a, a.saturating_add(len));
    }
    match next_fn!(
        c"mlock",
        unsafe extern "C" fn(*const c_void, usize) -> c_int
    ) {
        // SAFETY: the caller's arguments.
        Some(f) => unsafe { f(addr, len) },
        None => missing(-1),
    }
}

/// # Safety
/// As C's `mlock2`.
#[no_mangle]
pub unsafe extern "C" fn mlock2(addr: *const c_void, len: usize, flags: c_uint) -> c_int {
    // MLOCK_ONFAULT populates nothing.
    if wanted() && flags & libc::MLOCK_ONFAULT == 0 {
        let a = addr as usize;
        mappings::to_kernel(a, a.saturating_add(len));
    }
    match next_fn!(
        c"mlock2",
        unsafe extern "C" fn(*const c_void, usize, c_uint) -> c_int
    ) {
        // SAFETY: the caller's arguments.
        Some(f) => unsafe { f(addr, len, flags) },
        None => missing(-1),
    }
}

/// # Safety
/// As C's `mlockall`.
#[no_mangle]
pub unsafe extern "C" fn mlockall(flags: c_int) -> c_int {
    if wanted() {
        mappings::locking_all(flags);
    }
    match next_fn!(c"mlockall", unsafe extern "C" fn(c_int) -> c_int) {
        // SAFETY: the caller's argument.
        Some(f) => unsafe { f(flags) },
        None => missing(-1),
    }
}

/// # Safety
/// As C's `munlockall`.
#[no_mangle]
pub unsafe extern "C" fn munlockall() -> c_int {
    let r = match next_fn!(c"munlockall", unsafe extern "C" fn() -> c_int) {
        // SAFETY: no arguments.
        Some(f) => unsafe { f() },
        None => missing(-1),
    };
    if wanted() && r == 0 {
        mappings::unlocked_all();
    }
    r
}
