//! Byte sizes as people write them: 4K, 64KiB, 2MB, 1G (binary multiples).

/// Parses "4096", "4K", "4KB", "4KiB", "2M", "1G", "1T" into bytes.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (try 4K, 2M, 1G)"))?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("'{s}': unknown unit '{unit}' (use K, M, G or T)")),
    };
    n.checked_mul(1usize << shift)
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("'{s}' is zero or too large"))
}

/// Shortest exact binary form: 4096 -> "4K", 3 << 30 -> "3G", 1000 -> "1000".
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
}
