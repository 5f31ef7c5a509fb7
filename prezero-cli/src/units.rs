//! Byte sizes on the command line: the library's parser and formatters (exact
//! for flags, rounded for a reader), and the two ways a flag takes more.

use anyhow::Result;
pub use prezero::{fmt_size, human_size, parse_size};

/// A size, or 0 for flags where it means "none".
pub fn parse_size_or_zero(s: &str) -> Result<usize> {
    if s.trim() == "0" {
        return Ok(0);
    }
    Ok(parse_size(s)?)
}

/// Every size of a list (`--sizes 4K,2M,1G`).
pub fn parse_sizes<S: AsRef<str>>(list: impl IntoIterator<Item = S>) -> Result<Vec<usize>> {
    Ok(list
        .into_iter()
        .map(|s| parse_size(s.as_ref()))
        .collect::<prezero::Result<_>>()?)
}
