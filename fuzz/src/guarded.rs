//! Memory fenced by `PROT_NONE` pages, as `prezero/tests/common` has it: a
//! byte read or written past either end faults at once.

/// Whole pages of read-write memory between two inaccessible pages.
pub struct Guarded {
    base: *mut u8,
    total: usize,
    page: usize,
    len: usize,
}

impl Guarded {
    /// `len` usable bytes (rounded up to whole pages, at least one).
    pub fn new(len: usize) -> Guarded {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = len.next_multiple_of(page).max(page);
        let total = len + 2 * page;
        // SAFETY: a fresh anonymous mapping; then its first and last pages
        // are made inaccessible.
        let base = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED, "mmap");
            let p = p.cast::<u8>();
            assert_eq!(libc::mprotect(p.cast(), page, libc::PROT_NONE), 0);
            assert_eq!(
                libc::mprotect(p.add(page + len).cast(), page, libc::PROT_NONE),
                0
            );
            p
        };
        Guarded {
            base,
            total,
            page,
            len,
        }
    }

    /// The first usable byte.
    pub fn ptr(&self) -> *mut u8 {
        // SAFETY: inside the mapping.
        unsafe { self.base.add(self.page) }
    }

    /// Usable bytes.
    pub fn usable(&self) -> usize {
        self.len
    }

    /// The inaccessible page just after the usable bytes.
    pub fn guard_after(&self) -> *mut u8 {
        // SAFETY: inside the mapping.
        unsafe { self.ptr().add(self.len) }
    }

    /// The usable bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: [ptr, ptr + len) is mapped read-write and self's.
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len) }
    }

    /// The usable bytes, to write.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as bytes; &mut self makes it the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(), self.len) }
    }

    /// Fills the usable bytes with a pattern of `seed` that has no zero byte.
    pub fn scribble(&mut self, seed: u8) {
        for (i, b) in self.bytes_mut().iter_mut().enumerate() {
            *b = ((i % 251) as u8).wrapping_add(seed) | 1;
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: exactly the range mapped in new.
        unsafe { libc::munmap(self.base.cast(), self.total) };
    }
}
