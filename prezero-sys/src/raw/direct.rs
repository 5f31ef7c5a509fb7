//! System calls made directly (the instruction itself), past the C
//! library's functions that this library interposes: `syscall(2)`,
//! `close`, `prctl` (`entry/`). A call of ours through them would come back
//! to our own entry point and be taken for the program's (a `capset` of a
//! thread of ours, a `close` of our descriptor).

/// The system call `nr` with six arguments: its result, or `-errno`.
///
/// # Safety
/// pre: the arguments are what system call `nr` takes (pointers valid for
/// what it reads and writes).
#[cfg(target_arch = "x86_64")]
pub unsafe fn syscall6(nr: libc::c_long, args: [libc::c_long; 6]) -> libc::c_long {
    let ret;
    // SAFETY: the Linux x86_64 system call convention: the number in rax,
    // the arguments in rdi, rsi, rdx, r10, r8, r9; rcx and r11 clobbered;
    // memory as the call's arguments say (pre).
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            in("r8") args[4],
            in("r9") args[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// The system call `nr` with six arguments: its result, or `-errno`.
///
/// # Safety
/// pre: the arguments are what system call `nr` takes (pointers valid for
/// what it reads and writes).
#[cfg(target_arch = "aarch64")]
pub unsafe fn syscall6(nr: libc::c_long, args: [libc::c_long; 6]) -> libc::c_long {
    let ret;
    // SAFETY: the Linux aarch64 system call convention: the number in x8,
    // the arguments in x0-x5, the result in x0; memory as the call's
    // arguments say (pre).
    unsafe {
        std::arch::asm!(
            "svc #0",
            in("x8") nr,
            inlateout("x0") args[0] => ret,
            in("x1") args[1],
            in("x2") args[2],
            in("x3") args[3],
            in("x4") args[4],
            in("x5") args[5],
            options(nostack),
        );
    }
    ret
}

/// [`syscall6`]'s result as C's: `Ok(value)`, or `Err` with errno set.
pub fn result(ret: libc::c_long) -> Result<libc::c_long, super::Errno> {
    if (-4095..0).contains(&ret) {
        let e = -ret as libc::c_int;
        super::set_errno(e);
        return Err(super::Errno(e));
    }
    Ok(ret)
}

/// `prctl(option, arg2)` of the calling thread, made directly.
pub fn prctl(option: libc::c_int, arg2: libc::c_ulong) -> Result<libc::c_long, super::Errno> {
    // SAFETY: the options this crate sets take numbers, no pointer.
    result(unsafe { syscall6(libc::SYS_prctl, [option as _, arg2 as _, 0, 0, 0, 0]) })
}

/// Closes `fd`, directly.
///
/// pre: `fd` is this crate's own, and nothing uses it after.
pub fn close(fd: libc::c_int) {
    // SAFETY: close takes a number (the descriptor is ours: pre).
    let _ = unsafe { syscall6(libc::SYS_close, [fd as _, 0, 0, 0, 0, 0]) };
}
