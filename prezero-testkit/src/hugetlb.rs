//! Whether hugetlb mappings can be made here at all: the probe the tests of
//! `prezero` and `prezero-service` share before they blame a shortage.

/// Why hugetlb mappings of `page_size` pages cannot be made here whatever the
/// pool holds, or `None` if they can. A kernel with the pool answers a mapping
/// with ENOMEM when no page is free (the tests reserve pages for that);
/// qemu-user refuses every `MAP_HUGETLB` mapping with EINVAL. Call it with the
/// pool's test lock held: a success holds a page until it is unmapped.
pub fn hugetlb_unmappable(page_size: usize) -> Option<String> {
    let log2 = page_size.trailing_zeros() as libc::c_int;
    // SAFETY: a fresh anonymous mapping, unmapped below if it was made.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page_size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE
                | libc::MAP_ANONYMOUS
                | libc::MAP_HUGETLB
                | (log2 << libc::MAP_HUGE_SHIFT),
            -1,
            0,
        )
    };
    if p != libc::MAP_FAILED {
        // SAFETY: we mapped exactly this range and nothing refers to it.
        unsafe { libc::munmap(p, page_size) };
        return None;
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP) => Some(format!(
            "mmap(MAP_HUGETLB) of {} KiB pages fails with \"{e}\", not a shortage: \
             hugetlb mappings are not emulated here (qemu-user)",
            page_size / 1024
        )),
        _ => None,
    }
}
