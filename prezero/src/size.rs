//! Byte sizes as text: the workspace's one parser and formatter live in
//! `prezero_sys::size` (the preload reads sizes there without allocating);
//! the library's [`parse_size`] gives its refusal as an [`Error`].

use crate::error::{Error, Result};

pub use prezero_sys::size::{fmt_size, human_size, size_label};

/// Parses "4096", "4K", "4KB", "4KiB", "2M", "1G", "1T" (any case) into bytes.
/// Zero is refused: no size a caller asks for means nothing.
///
/// ```
/// assert_eq!(prezero::parse_size("2MB").unwrap(), 2 << 20);
/// assert!(prezero::parse_size("4X").is_err());
/// ```
pub fn parse_size(s: &str) -> Result<usize> {
    prezero_sys::size::parse_size(s).map_err(Error::invalid)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn refusals_are_invalid_input_with_the_reason() {
        let e = parse_size("4X").unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        assert!(e.to_string().contains("unknown unit 'X'"), "{e}");
    }
}
