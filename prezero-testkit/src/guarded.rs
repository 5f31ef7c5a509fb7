//! Memory fenced by `PROT_NONE` pages: a byte read or written past either
//! end faults at once instead of passing unnoticed.

/// Whole pages of read-write memory between two inaccessible pages.
pub struct Guarded {
    base: *mut u8,
    total: usize,
    page: usize,
    len: usize,
}

impl Guarded {
    /// `len` usable bytes (rounded up to whole pages, at least one).
    ///
    /// # Panics
    ///
    /// If the memory cannot be mapped or fenced.
    pub fn new(len: usize) -> Guarded {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = len.next_multiple_of(page).max(page);
        let total = len + 2 * page;
        // SAFETY: a fresh anonymous mapping at an address the kernel picks.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap");
        let base = p.cast::<u8>();
        // SAFETY: base + page + len is the last page of the mapping.
        let last = unsafe { base.add(page + len) };
        for guard in [base, last] {
            // SAFETY: one whole page of the mapping just made, which nothing
            // refers to yet.
            let r = unsafe { libc::mprotect(guard.cast(), page, libc::PROT_NONE) };
            assert_eq!(r, 0, "mprotect");
        }
        Guarded {
            base,
            total,
            page,
            len,
        }
    }

    /// The first usable byte.
    pub fn ptr(&self) -> *mut u8 {
        // SAFETY: the first page after the leading guard, inside the mapping.
        unsafe { self.base.add(self.page) }
    }

    /// Usable bytes.
    pub fn usable(&self) -> usize {
        self.len
    }

    /// The inaccessible page just after the usable bytes.
    pub fn guard_after(&self) -> *mut u8 {
        // SAFETY: the trailing guard page, inside the mapping.
        unsafe { self.ptr().add(self.len) }
    }

    /// The usable bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: [ptr, ptr + len) is mapped read-write and self's.
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len) }
    }

    /// The usable bytes, to write.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; &mut self makes it the only reference.
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
        // SAFETY: exactly the range mapped in `new`; the slices handed out
        // borrow self and so are gone.
        unsafe { libc::munmap(self.base.cast(), self.total) };
    }
}

#[cfg(test)]
mod tests {
    use super::Guarded;

    /// The permissions `/proc/self/maps` gives the page at `p`.
    fn perms(p: *const u8) -> String {
        let at = p as usize;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .find_map(|l| {
                let (range, rest) = l.split_once(' ')?;
                let (from, to) = range.split_once('-')?;
                let inside = (usize::from_str_radix(from, 16).ok()?
                    ..usize::from_str_radix(to, 16).ok()?)
                    .contains(&at);
                inside.then(|| rest[..4].to_owned())
            })
            .unwrap_or_else(|| panic!("{at:#x} is not mapped"))
    }

    #[test]
    fn whole_pages_read_write_between_two_inaccessible_ones() {
        let mut g = Guarded::new(1);
        let page = g.usable();
        assert!(page >= 4096 && page.is_power_of_two());
        g.scribble(0xff);
        assert!(g.bytes().iter().all(|&b| b != 0));
        assert_eq!(perms(g.ptr()), "rw-p");
        assert_eq!(perms(g.guard_after()), "---p");
        assert_eq!(perms(g.ptr().wrapping_sub(1)), "---p");
        assert_eq!(Guarded::new(page + 1).usable(), 2 * page);
    }
}
