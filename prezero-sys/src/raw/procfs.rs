//! The machine's state from `/proc` and sysfs, read into stack buffers or
//! walked in place: what the preload reads inside `malloc`, and what every
//! other crate reads through these same functions (the std layer's
//! `mem_available`, the library's `mm::memory` and NUMA topology).

use super::read_file_start;
use crate::size::read_size;

/// A field of `/proc/meminfo` in bytes (`field` with its colon, as
/// `b"MemAvailable:"`), or `None` where the file or the field is missing.
///
/// pre: none.
pub fn meminfo(field: &[u8]) -> Option<usize> {
    let mut buf = [0u8; 4096];
    let n = read_file_start(c"/proc/meminfo", &mut buf).ok()?;
    let text = &buf[..n];
    // At the start of a line: "MemTotal:" is not found inside "SwapMemTotal:".
    let at = text
        .windows(field.len())
        .enumerate()
        .position(|(i, w)| w == field && (i == 0 || text[i - 1] == b'\n'))?;
    let rest = &text[at + field.len()..];
    let rest = &rest[rest.iter().position(|b| b.is_ascii_digit())?..];
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    match &rest[..end] {
        b"0" => Some(0),
        digits => read_size(digits).ok()?.checked_mul(1024),
    }
}

/// The kernel's transparent huge page mode: the bracketed word of
/// `/sys/kernel/mm/transparent_hugepage/enabled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThpMode {
    /// Every anonymous mapping large enough gets huge pages.
    Always,
    /// Only mappings advised with `MADV_HUGEPAGE`.
    Madvise,
    /// None.
    Never,
}

impl ThpMode {
    /// The word the kernel writes in brackets.
    pub fn name(self) -> &'static str {
        match self {
            ThpMode::Always => "always",
            ThpMode::Madvise => "madvise",
            ThpMode::Never => "never",
        }
    }
}

/// The THP mode, or `None` where the kernel has no THP (or the file reads
/// otherwise).
///
/// pre: none.
pub fn thp_mode() -> Option<ThpMode> {
    let mut buf = [0u8; 64];
    let n = read_file_start(c"/sys/kernel/mm/transparent_hugepage/enabled", &mut buf).ok()?;
    let text = &buf[..n];
    let start = text.iter().position(|&b| b == b'[')? + 1;
    let len = text[start..].iter().position(|&b| b == b']')?;
    match &text[start..start + len] {
        b"always" => Some(ThpMode::Always),
        b"madvise" => Some(ThpMode::Madvise),
        b"never" => Some(ThpMode::Never),
        _ => None,
    }
}

/// Calls `f` with each id of a kernel list (`0-3,8`, as sysfs writes CPU
/// and node lists; blanks around it), in its order; `None` for garbage
/// (then `f` may have seen some).
///
/// pre: none.
pub fn each_in_list(text: &[u8], mut f: impl FnMut(u32)) -> Option<()> {
    for part in text
        .trim_ascii()
        .split(|&b| b == b',')
        .filter(|p| !p.is_empty())
    {
        let mut ends = part.splitn(2, |&b| b == b'-');
        let lo = list_id(ends.next()?)?;
        let hi = match ends.next() {
            Some(h) => list_id(h)?,
            None => lo,
        };
        // A range larger than any real machine's is a corrupt file.
        if hi < lo || hi - lo > 1 << 16 {
            return None;
        }
        (lo..=hi).for_each(&mut f);
    }
    Some(())
}

/// A decimal id of a list (at most six digits).
fn list_id(s: &[u8]) -> Option<u32> {
    if s.is_empty() || s.len() > 6 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |v, &d| v * 10 + u32::from(d - b'0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_reads_this_machines_fields_in_bytes() {
        let total = meminfo(b"MemTotal:").expect("MemTotal");
        assert!(total >= 64 << 20 && total.is_multiple_of(1024), "{total}");
        let available = meminfo(b"MemAvailable:").expect("MemAvailable");
        assert!(available <= total, "{available} of {total}");
        assert_eq!(meminfo(b"NoSuchField:"), None);
    }

    #[test]
    fn thp_mode_is_one_of_the_kernels_words() {
        let mut buf = [0u8; 64];
        match read_file_start(c"/sys/kernel/mm/transparent_hugepage/enabled", &mut buf) {
            Ok(n) => {
                let text = std::str::from_utf8(&buf[..n]).unwrap();
                let mode = thp_mode().expect("a bracketed word");
                assert!(text.contains(&format!("[{}]", mode.name())), "{text}");
            }
            Err(_) => {
                assert_eq!(thp_mode(), None);
                prezero_testkit::skip("machine", "no THP in this kernel");
            }
        }
    }

    #[test]
    fn kernel_lists_walk_in_order_and_garbage_does_not() {
        let walk = |t: &[u8]| {
            let mut v = Vec::new();
            each_in_list(t, |i| v.push(i)).map(|()| v)
        };
        assert_eq!(walk(b"0-3,8,10-11\n"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(walk(b" 1 "), Some(vec![1]));
        assert_eq!(walk(b""), Some(vec![]));
        for bad in [&b"a"[..], b"3-1", b"0-99999999", b"-1", b"0-", b"1 2"] {
            assert_eq!(walk(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
