//! The C ABI of prezero: libprezero.so and libprezero.a, and
//! `include/prezero.h`, generated from this crate by cbindgen. One file per
//! area: `clear`, `template`, `region` (with prefault and the page
//! kinds), `pool`, `cpu` and `service`; `helpers` holds what they share.
//!
//! Every function returning `int` returns 0 or a negative errno-style code (see
//! `pz_strerror`): results come back through out-parameters. The only other
//! returns are the static strings of `pz_strerror` and `pz_version` and the
//! accessors of a handle (`pz_region_ptr`, ...), which return the value itself.
//! Every pointer is checked for NULL and every size for overflow, and each call
//! runs behind a panic boundary: no panic ever crosses into C (one that would
//! is reported as `-ENOTRECOVERABLE`).
//!
//! What C holds is a number or an opaque handle. Each `PZ_*` number is written
//! out where it is defined and pinned by a test below, so no change on the Rust
//! side (an enum reordered, a kernel added) moves one. Each handle
//! (`pz_region`, `pz_pool`, `pz_service`, `pz_service_memory`) is a `Box` made
//! by one call and freed by one other, registered among the live handles in
//! between (`helpers::into_handle`): a pointer that is not a live handle of the
//! type a call takes (NULL, freed, another type's, garbage) is refused with
//! `-EINVAL` before anything reads it.
//!
//! Memory passed in as `(ptr, len)` must be valid for `len` bytes as the
//! function documents: that much C has to promise, as with `memset`.

#![warn(missing_docs)]

use std::ffi::{c_char, c_int};

mod clear;
mod cpu;
mod helpers;
mod pool;
mod region;
mod service;
mod template;

pub use clear::*;
pub use cpu::*;
pub use pool::*;
pub use region::*;
pub use service::*;
pub use template::*;

/// A static, NUL-terminated description of a return code of this library.
#[no_mangle]
pub extern "C" fn pz_strerror(code: c_int) -> *const c_char {
    // wrapping: INT_MIN has no negation, and a debug build must not panic here.
    let s: &'static [u8] = match code.wrapping_neg() {
        0 => b"success\0",
        libc::EINVAL => b"invalid argument (NULL pointer, bad size, unknown value, or not ours)\0",
        libc::ENOTSUP => b"not supported by this CPU or kernel\0",
        libc::ENOMEM => b"out of memory (or too few free hugetlb pages)\0",
        libc::EAGAIN => b"pool exhausted\0",
        libc::EBUSY => b"pool still has chunks outstanding\0",
        libc::EIO => b"verify mode found non-zero memory about to be handed out\0",
        libc::ETIMEDOUT => b"timed out\0",
        libc::ENOTRECOVERABLE => b"internal error (a panic was stopped at the C boundary)\0",
        libc::EPERM | libc::EACCES => b"not permitted\0",
        libc::EFAULT => b"bad address\0",
        libc::ENOENT => b"no such file (no prezero serve socket at that path)\0",
        libc::ECONNREFUSED => b"connection refused (a stale prezero serve socket)\0",
        libc::ENOTCONN => b"not connected to prezero serve\0",
        libc::EDQUOT => b"over this uid's cap at prezero serve\0",
        libc::EPROTO => b"protocol error talking to prezero serve\0",
        _ => b"system error (see errno for this value)\0",
    };
    s.as_ptr().cast()
}

/// The library version, e.g. "0.1.0". Static; never free it.
#[no_mangle]
pub extern "C" fn pz_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::clear::{kernel_bit, kernel_number, parse_strategy};
    use super::*;
    use prezero::clear::{Kernel, Strategy};

    /// C programs compiled against any earlier header mean these numbers.
    #[test]
    fn every_c_number_is_pinned() {
        let ints: [(&str, c_int, c_int); 22] = [
            ("PZ_STRATEGY_AUTO", PZ_STRATEGY_AUTO, 0),
            ("PZ_STRATEGY_AUTO_HOT", PZ_STRATEGY_AUTO_HOT, 1),
            ("PZ_STRATEGY_AUTO_COLD", PZ_STRATEGY_AUTO_COLD, 2),
            ("PZ_STRATEGY_REP_STOSB", PZ_STRATEGY_REP_STOSB, 3),
            ("PZ_STRATEGY_AVX512_NT", PZ_STRATEGY_AVX512_NT, 4),
            ("PZ_STRATEGY_AVX2_NT", PZ_STRATEGY_AVX2_NT, 5),
            ("PZ_STRATEGY_MOVNTI", PZ_STRATEGY_MOVNTI, 6),
            ("PZ_STRATEGY_CLZERO", PZ_STRATEGY_CLZERO, 7),
            ("PZ_STRATEGY_AVX512", PZ_STRATEGY_AVX512, 8),
            ("PZ_STRATEGY_AVX2", PZ_STRATEGY_AVX2, 9),
            ("PZ_STRATEGY_DC_ZVA", PZ_STRATEGY_DC_ZVA, 10),
            ("PZ_STRATEGY_PORTABLE", PZ_STRATEGY_PORTABLE, 11),
            ("PZ_PAGE_BASE", PZ_PAGE_BASE, 0),
            ("PZ_PAGE_THP", PZ_PAGE_THP, 1),
            ("PZ_PAGE_HUGE_2M", PZ_PAGE_HUGE_2M, 2),
            ("PZ_PAGE_HUGE_1G", PZ_PAGE_HUGE_1G, 3),
            ("PZ_SCRUB_IDLE", PZ_SCRUB_IDLE, 0),
            ("PZ_SCRUB_NICE19", PZ_SCRUB_NICE19, 1),
            ("PZ_SCRUB_NORMAL", PZ_SCRUB_NORMAL, 2),
            ("PZ_SOURCE_SERVICE", PZ_SOURCE_SERVICE, 0),
            ("PZ_SOURCE_LOCAL", PZ_SOURCE_LOCAL, 1),
            ("PZ_TEMPLATE_MAX_WORDS", PZ_TEMPLATE_MAX_WORDS as c_int, 8),
        ];
        let nodes: [(&str, i64, i64); 2] = [
            ("PZ_NODE_CALLER", PZ_NODE_CALLER, -1),
            ("PZ_NODE_ANY", PZ_NODE_ANY, -2),
        ];
        for (name, value, pinned) in nodes {
            assert_eq!(value, pinned, "{name}");
        }
        let bits: [(&str, u32, u32); 11] = [
            ("PZ_FEATURE_ERMS", PZ_FEATURE_ERMS, 1 << 0),
            ("PZ_FEATURE_FSRM", PZ_FEATURE_FSRM, 1 << 1),
            ("PZ_FEATURE_SSE2", PZ_FEATURE_SSE2, 1 << 2),
            ("PZ_FEATURE_AVX2", PZ_FEATURE_AVX2, 1 << 3),
            ("PZ_FEATURE_AVX512F", PZ_FEATURE_AVX512F, 1 << 4),
            ("PZ_FEATURE_AVX512BW", PZ_FEATURE_AVX512BW, 1 << 5),
            ("PZ_FEATURE_CLZERO", PZ_FEATURE_CLZERO, 1 << 6),
            ("PZ_FEATURE_DC_ZVA", PZ_FEATURE_DC_ZVA, 1 << 7),
            ("PZ_FEATURE_MOPS", PZ_FEATURE_MOPS, 1 << 8),
            ("PZ_SERVICE_NO_FALLBACK", PZ_SERVICE_NO_FALLBACK, 1),
            ("PZ_SERVICE_OTHER_NODES", PZ_SERVICE_OTHER_NODES, 2),
        ];
        for (name, value, pinned) in ints {
            assert_eq!(value, pinned, "{name}");
        }
        for (name, value, pinned) in bits {
            assert_eq!(value, pinned, "{name}");
        }
    }

    #[test]
    fn every_code_has_a_description() {
        for code in [0, -libc::EINVAL, 12345, c_int::MIN, c_int::MAX] {
            // SAFETY: pz_strerror returns a static NUL-terminated string.
            let s = unsafe { std::ffi::CStr::from_ptr(pz_strerror(code)) };
            assert!(!s.is_empty(), "{code}");
        }
    }

    /// Each kernel, by name, keeps its `PZ_STRATEGY_*` number and its
    /// `pz_cpu_info.kernels` bit whatever the order of `Kernel::ALL`.
    #[test]
    fn every_kernel_keeps_its_c_number() {
        let pinned = [
            ("rep-stosb", 3),
            ("avx512-nt", 4),
            ("avx2-nt", 5),
            ("movnti", 6),
            ("clzero", 7),
            ("avx512", 8),
            ("avx2", 9),
            ("dc-zva", 10),
            ("portable", 11),
        ];
        for k in Kernel::ALL {
            let (_, n) = pinned
                .iter()
                .find(|(name, _)| *name == k.name())
                .unwrap_or_else(|| panic!("kernel {} has no pinned C number", k.name()));
            assert_eq!(kernel_number(k), *n, "{}", k.name());
            assert_eq!(kernel_bit(k), 1 << (n - 3), "{}", k.name());
            assert_eq!(parse_strategy(*n).unwrap(), Strategy::Kernel(k));
        }
        assert_eq!(
            pinned.len(),
            Kernel::ALL.len(),
            "a pinned kernel that no longer exists"
        );
        for n in [-1, 12, c_int::MAX] {
            assert!(parse_strategy(n).is_err(), "{n} is no strategy");
        }
    }
}
