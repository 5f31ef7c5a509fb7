//! The C entry points the lazy mode takes: `mmap` (and `mmap64`, its other
//! name), `munmap`, `mremap` and `madvise`. Until the lazy mode is asked
//! for (or in a process where it is not) each is one load and the system
//! call itself, made directly: the C library's wrappers do no more, and
//! calling them by name would come back here. Not in a test build (the
//! harness would map through them).

use std::ffi::{c_int, c_void};

use super::{mappings, wanted};
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
    crate::entry::boot_once();
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
