//! Byte sizes on the command line: the library's parser and formatters (exact
//! for flags, rounded for a reader), its errors as the text `main` prints.

pub use prezero::{fmt_size, human_size};

/// Parses "4096", "4K", "4KB", "4KiB", "2M", "1G", "1T" into bytes (see
/// [`prezero::parse_size`]).
pub fn parse_size(s: &str) -> Result<usize, String> {
    prezero::parse_size(s).map_err(|e| e.to_string())
}

/// A size, or 0 for flags where it means "none".
pub fn parse_size_or_zero(s: &str) -> Result<usize, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    parse_size(s)
}

/// Every size of a list (`--sizes 4K,2M,1G`).
pub fn parse_sizes<S: AsRef<str>>(list: impl IntoIterator<Item = S>) -> Result<Vec<usize>, String> {
    list.into_iter().map(|s| parse_size(s.as_ref())).collect()
}
