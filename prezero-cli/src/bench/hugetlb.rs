//! Hugetlb pages for a bench run: checked free, or reserved for the run and
//! given back afterwards, also on Ctrl-C.

use anyhow::{bail, Context, Result};
use prezero::{HugetlbReservation, PageKind};

/// For a hugetlb page kind, checks that `bytes` worth of pages are free, or with
/// `reserve` grows the pool for the run: the returned guard restores it when
/// dropped, and a Ctrl-C meanwhile restores it too before exiting.
pub fn hugetlb_for_run(
    kind: PageKind,
    bytes: usize,
    reserve: bool,
) -> Result<Option<HugetlbReservation>> {
    if !kind.is_hugetlb() {
        return Ok(None);
    }
    let page = kind.page_size();
    let pages = bytes.div_ceil(page);
    if !reserve {
        let free = prezero::mm::hugetlb_pool(page).map_or(0, |p| p.free);
        if free < pages {
            bail!(
                "page {kind}: {pages} hugetlb pages needed, {free} free; rerun with --reserve (as root) or: echo {pages} > {}",
                prezero::mm::HugetlbPool::nr_path(page)
            );
        }
        return Ok(None);
    }
    let r = HugetlbReservation::ensure_free(page, pages).context("--reserve")?;
    interrupt::restore_on_interrupt(&prezero::mm::HugetlbPool::nr_path(page), r.previous_total());
    Ok(Some(r))
}

/// Ctrl-C while the hugetlb pool is grown: put it back, then exit.
mod interrupt {
    use std::ffi::CString;
    use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

    static PATH: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());
    static VALUE: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());
    static VALUE_LEN: AtomicUsize = AtomicUsize::new(0);

    /// On SIGINT, SIGTERM or SIGPIPE, writes `value` to `path` and exits with status 130.
    pub fn restore_on_interrupt(path: &str, value: usize) {
        let p = CString::new(path).expect("sysfs paths have no NUL");
        let v = CString::new(value.to_string()).expect("digits have no NUL");
        VALUE_LEN.store(v.as_bytes().len(), Ordering::Release);
        // Leaked on purpose: the handler may run at any time until exit.
        PATH.store(p.into_raw(), Ordering::Release);
        VALUE.store(v.into_raw(), Ordering::Release);
        let handler = on_signal as *const () as libc::sighandler_t;
        // SAFETY: `on_signal` only calls async-signal-safe functions (open, write,
        // close, _exit) on pointers published above.
        unsafe { libc::signal(libc::SIGINT, handler) };
        // SAFETY: as for SIGINT.
        unsafe { libc::signal(libc::SIGTERM, handler) };
        // SAFETY: as for SIGINT.
        unsafe { libc::signal(libc::SIGPIPE, handler) };
    }

    extern "C" fn on_signal(_sig: libc::c_int) {
        let path = PATH.load(Ordering::Acquire);
        let value = VALUE.load(Ordering::Acquire);
        if !path.is_null() && !value.is_null() {
            // SAFETY: a leaked NUL-terminated string; open is async-signal-safe.
            let fd = unsafe { libc::open(path, libc::O_WRONLY) };
            if fd >= 0 {
                let len = VALUE_LEN.load(Ordering::Acquire);
                // SAFETY: `value` is a leaked string of `len` bytes; write is
                // async-signal-safe.
                unsafe { libc::write(fd, value.cast(), len) };
                // SAFETY: the descriptor just opened; close is async-signal-safe.
                unsafe { libc::close(fd) };
            }
        }
        // SAFETY: _exit is async-signal-safe and ends the process at once.
        unsafe { libc::_exit(130) };
    }
}
