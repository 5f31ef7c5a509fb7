//! `pz_region_map` (with its accessors and `pz_region_unmap`) and
//! `pz_prefault`: a region is at least the size asked for in whole pages of
//! its kind, zero and writable; prefault changes no byte, and a range that
//! is not all mapped and writable (a guard page, a length past the address
//! space) is an error, never a crash.

use arbitrary::Arbitrary;
use prezero_capi as ffi;

use super::{assert_bytes, succeeded, Buffers, Span, Target};

/// One region mapped, written at its ends, prefaulted where small, unmapped.
#[derive(Arbitrary, Debug)]
pub struct Map {
    size: Size,
    /// Any number: 0-3 are page kinds, the rest refused.
    kind: i8,
    threads: u8,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Size {
    Small(u32),
    Any(usize),
}

/// Regions up to this size are prefaulted: what it populates counts against
/// the fuzzer's memory limit.
const PREFAULT_MAX: usize = 64 << 20;

impl Map {
    pub fn run(self) {
        let size = match self.size {
            Size::Small(n) => n as usize,
            Size::Any(n) => n,
        };
        let mut r = std::ptr::null_mut();
        // SAFETY: `r` is writable for a pointer.
        let rc = unsafe { ffi::pz_region_map(size, self.kind.into(), &mut r) };
        if !succeeded(rc, &self) {
            assert!(r.is_null(), "{self:?}: refused, yet it wrote the handle");
            return;
        }
        assert!(size > 0 && (0..=3).contains(&self.kind), "{self:?}: taken");
        // SAFETY: a live region (every call checks its handle anyway).
        let (p, len) = unsafe { (ffi::pz_region_ptr(r).cast::<u8>(), ffi::pz_region_len(r)) };
        let page = match i32::from(self.kind) {
            ffi::PZ_PAGE_HUGE_1G => 1 << 30,
            ffi::PZ_PAGE_HUGE_2M => 2 << 20,
            _ => 4096,
        };
        assert!(
            !p.is_null() && len >= size && len.is_multiple_of(page),
            "{self:?}: {len} bytes at {p:?}"
        );
        // SAFETY: [p, p + len) is the region's, read-write.
        unsafe {
            assert_eq!(
                (p.read(), p.add(len - 1).read()),
                (0, 0),
                "{self:?}: not zero"
            );
            p.write(0x5a);
            p.add(len - 1).write(0xa5);
        }
        if len <= PREFAULT_MAX {
            // SAFETY: the region's own range.
            let rc = unsafe { ffi::pz_prefault(p.cast(), len, self.threads.into()) };
            if succeeded(rc, &self) {
                assert!(self.threads > 0, "{self:?}: prefaulted with no threads");
            } else {
                assert_eq!(self.threads, 0, "{self:?}: prefault refused ({rc})");
            }
            // SAFETY: as above.
            unsafe {
                assert_eq!(
                    (p.read(), p.add(len - 1).read()),
                    (0x5a, 0xa5),
                    "{self:?}: prefault wrote"
                );
            }
        }
        // SAFETY: the last call on the region; nothing touches it after.
        assert_eq!(unsafe { ffi::pz_region_unmap(r) }, 0);
        // SAFETY: a freed handle: every call checks it before use.
        unsafe {
            assert_eq!(
                ffi::pz_region_unmap(r),
                -libc::EINVAL,
                "{self:?}: unmapped twice"
            );
            assert!(ffi::pz_region_ptr(r).is_null() && ffi::pz_region_len(r) == 0);
        }
    }
}

/// A prefault of a span of the destination buffer, or of its guard page.
#[derive(Arbitrary, Debug)]
pub struct Prefault {
    at: Span,
    threads: u8,
    /// At the guard page after the buffer instead, `len % 64 KiB + 1` bytes
    /// (the fence, and what lies beyond it).
    guard: bool,
}

impl Prefault {
    pub fn run(self, b: &mut Buffers) {
        let before = b.dst.bytes().to_vec();
        let (p, len, target) = if self.guard {
            let (_, len, _) = self.at.resolve(&b.dst);
            (
                b.dst.guard_after().cast(),
                len % (64 << 10) + 1,
                Target::Refused,
            )
        } else {
            self.at.resolve(&b.dst)
        };
        // SAFETY: prefault changes no byte; a range not all mapped and
        // writable must be an error.
        let rc = unsafe { ffi::pz_prefault(p, len, self.threads.into()) };
        match (succeeded(rc, &self), target) {
            (true, Target::Refused) => panic!("{self:?}: {len} bytes at {p:?} prefaulted"),
            (false, Target::Bytes(..)) if self.threads > 0 => panic!("{self:?}: refused ({rc})"),
            _ => {}
        }
        assert_bytes(b.dst.bytes(), &before, &self);
    }
}
