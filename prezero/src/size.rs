//! Byte sizes as people and sysfs write them: 4K, 64KiB, 2MB, 1G (binary
//! multiples). The one parser and formatter of the workspace: the library
//! reads cache sizes with it, the `prezero` command its flags.

use crate::error::{Error, Result};

/// Parses "4096", "4K", "4KB", "4KiB", "2M", "1G", "1T" (any case) into bytes.
/// Zero is refused: no size a caller asks for means nothing.
///
/// ```
/// assert_eq!(prezero::parse_size("2MB").unwrap(), 2 << 20);
/// assert!(prezero::parse_size("4X").is_err());
/// ```
pub fn parse_size(s: &str) -> Result<usize> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| Error::invalid(format!("'{s}' is not a size (try 4K, 2M, 1G)")))?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(Error::invalid(format!(
                "'{s}': unknown unit '{unit}' (use K, M, G or T)"
            )))
        }
    };
    n.checked_mul(1usize << shift)
        .filter(|&v| v > 0)
        .ok_or_else(|| Error::invalid(format!("'{s}' is zero or too large")))
}

/// The shortest exact binary form: 4096 -> "4K", 3 << 30 -> "3G", 1000 -> "1000".
pub fn fmt_size(n: usize) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for s in ["4K", "64K", "2M", "1G", "3G", "1000"] {
            assert_eq!(fmt_size(parse_size(s).unwrap()), s);
        }
        assert_eq!(parse_size("2MB").unwrap(), 2 << 20);
        assert_eq!(parse_size("4KiB").unwrap(), 4096);
        assert!(parse_size("0").is_err());
        assert!(parse_size("4X").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn sysfs_sizes_parse() {
        assert_eq!(parse_size("48K").unwrap(), 48 << 10);
        assert_eq!(parse_size("2048K\n").unwrap(), 2 << 20);
        assert_eq!(parse_size("260M").unwrap(), 260 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("x").is_err());
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let e = parse_size("4X").unwrap_err().to_string();
        assert!(e.contains("unknown unit 'X'"), "{e}");
        let e = parse_size("0").unwrap_err().to_string();
        assert!(e.contains("zero or too large"), "{e}");
    }
}
