//! Sizes as the `PREZERO_*` variables write them, read exactly as
//! `prezero::parse_size` reads them, without allocating (the preload reads
//! them inside `malloc`). The fuzz target `size` holds the two to each other.

/// A size read exactly as `prezero::parse_size` reads it ("4096", "4K",
/// "4KB", "4KiB", "2M", "1G", "1T", any case, blanks around it; zero
/// refused), without allocating: its errors say nothing, and the unit is
/// lowered in a stack buffer. A test holds the two to one table.
pub fn parse_size(s: &[u8]) -> Option<usize> {
    let t = std::str::from_utf8(s).ok()?.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num.parse().ok()?;
    // Every unit has at most three letters: a longer one is none of them.
    let mut buf = [0u8; 3];
    let lower = buf.get_mut(..unit.len())?;
    lower.copy_from_slice(unit.as_bytes());
    lower.make_ascii_lowercase();
    let shift = match &*lower {
        b"" | b"b" => 0,
        b"k" | b"kb" | b"kib" => 10,
        b"m" | b"mb" | b"mib" => 20,
        b"g" | b"gb" | b"gib" => 30,
        b"t" | b"tb" | b"tib" => 40,
        _ => return None,
    };
    n.checked_mul(1usize << shift).filter(|&v| v > 0)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_and_garbage_does_not() {
        assert_eq!(parse_size(b"123"), Some(123));
        assert_eq!(parse_size(b"64K"), Some(64 << 10));
        assert_eq!(parse_size(b"1MiB"), Some(1 << 20));
        assert_eq!(parse_size(b"8G"), Some(8 << 30));
        for bad in [
            &b""[..],
            b"G",
            b"1X",
            b"-1",
            b"99999999999999999999999",
            b"1 M",
        ] {
            assert_eq!(parse_size(bad), None, "{:?}", std::str::from_utf8(bad));
        }
        assert_eq!(parse_size(b"20000000T"), None, "overflow");
    }

    /// What both parsers are given: every unit in every case, blanks, zero,
    /// the edges of overflow, and what neither reads.
    const SIZES: &[&str] = &[
        "0",
        "1",
        "123",
        "4096",
        "4K",
        "4k",
        "4KB",
        "4kb",
        "4Kb",
        "4KiB",
        "4kib",
        "4KIB",
        "64K",
        "2M",
        "2m",
        "2MB",
        "2mb",
        "2MiB",
        "1G",
        "1g",
        "1GB",
        "1GiB",
        "1T",
        "1t",
        "1TB",
        "1TiB",
        "1B",
        "1b",
        "0K",
        "0B",
        "00",
        "007M",
        "20000000T",
        "16777215T",
        "16777216T",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999999",
        "",
        " ",
        "B",
        "G",
        "K",
        "iB",
        "1X",
        "4X",
        "-1",
        "+1",
        "1 M",
        " 2M",
        "2M ",
        "2048K\n",
        "\t8G\t",
        "\u{a0}1M\u{a0}",
        "1.5M",
        "1e6",
        "0x10",
        "1MM",
        "1iB",
        "1Ki",
        "1KiBB",
        "1P",
        "1K\0",
        "\u{663}",
        "\u{ff11}",
    ];

    #[test]
    fn sizes_read_as_the_library_reads_them() {
        for s in SIZES {
            assert_eq!(parse_size(s.as_bytes()), crate::parse_size(s).ok(), "{s:?}");
        }
        // Bytes that are no UTF-8 reach the preload's alone (the library's
        // takes a `str`): refused.
        assert_eq!(parse_size(b"4\xffK"), None);
    }
}
