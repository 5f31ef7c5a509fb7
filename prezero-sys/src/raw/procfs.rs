//! The machine's memory state from `/proc` and sysfs, read into stack
//! buffers: what the preload reads inside `malloc`, and what every other
//! crate reads through these same functions (the std layer's
//! `mem_available`, the library's `mm::memory`).

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
}
