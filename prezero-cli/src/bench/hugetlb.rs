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
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGPIPE] {
            // SAFETY: `on_signal` makes only system calls (open, write,
            // close, _exit) on strings published above and leaked.
            let _ = unsafe { prezero_sys::on_signal(sig, on_signal) };
        }
    }

    extern "C" fn on_signal(_sig: libc::c_int) {
        let path = PATH.load(Ordering::Acquire);
        let value = VALUE.load(Ordering::Acquire);
        if !path.is_null() && !value.is_null() {
            // SAFETY: a leaked NUL-terminated string, valid until exit.
            let path = unsafe { std::ffi::CStr::from_ptr(path) };
            let len = VALUE_LEN.load(Ordering::Acquire);
            // SAFETY: `value` is a leaked string of `len` bytes.
            let value = unsafe { std::slice::from_raw_parts(value.cast::<u8>(), len) };
            // The raw layer's calls allocate nothing: safe in a handler.
            if let Some(fd) = prezero_sys::raw::open_write(path) {
                let _ = prezero_sys::raw::write_all(fd, value);
                prezero_sys::raw::direct::close(fd);
            }
        }
        prezero_sys::raw::exit_now(130);
    }
}
