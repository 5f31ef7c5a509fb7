//! Byte sizes as text, both ways: the one parser and the one formatter of the
//! workspace. [`read_size`] allocates nothing (the preload reads the
//! `PREZERO_*` variables inside `malloc`); [`parse_size`] is the same reading
//! with a message that says what is wrong. Sizes are binary multiples,
//! written three ways:
//!
//! | function | 4096 | 1536 MiB | 1000 | for |
//! |---|---|---|---|---|
//! | [`fmt_size`] | `4K` | `1536M` | `1000` | flags, the config, logs: exact, and [`parse_size`] reads it back |
//! | [`size_label`] | `4KiB` | `1536MiB` | `1000B` | Prometheus label values: exact, one token with its unit |
//! | [`human_size`] | `4 KiB` | `1.5 GiB` | `1000 B` | figures for a reader (tables, the report): three significant figures |

/// Why a text is not a size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeRefused {
    /// No digits first, or not UTF-8.
    NotANumber,
    /// A unit that is none of B, K, M, G, T (with an optional `B` or `iB`).
    UnknownUnit,
    /// Zero: no size a caller asks for means nothing.
    Zero,
    /// More than a `usize` holds.
    TooLarge,
}

impl SizeRefused {
    /// What is wrong with `s`, the text that was refused, in a sentence.
    pub fn message(self, s: &str) -> String {
        match self {
            SizeRefused::NotANumber => format!("'{s}' is not a size (try 4K, 2M, 1G)"),
            SizeRefused::UnknownUnit => {
                let t = s.trim();
                let unit = t.trim_start_matches(|c: char| c.is_ascii_digit());
                format!("'{s}': unknown unit '{unit}' (use K, M, G or T)")
            }
            SizeRefused::Zero => {
                format!("'{s}' is zero: a size is at least 1 byte (try 4K, 2M, 1G)")
            }
            SizeRefused::TooLarge => format!(
                "'{s}' is more than the address space holds: at most {} bytes",
                usize::MAX
            ),
        }
    }
}

/// Reads "4096", "4K", "4KB", "4KiB", "2M", "1G", "1T" (any case, blanks
/// around it) into bytes, without allocating: the unit is lowered in a stack
/// buffer. Zero is refused.
///
/// ```
/// use prezero_sys::size::{read_size, SizeRefused};
/// assert_eq!(read_size(b"2MB"), Ok(2 << 20));
/// assert_eq!(read_size(b"4X"), Err(SizeRefused::UnknownUnit));
/// ```
pub fn read_size(s: &[u8]) -> Result<usize, SizeRefused> {
    let t = std::str::from_utf8(s)
        .map_err(|_| SizeRefused::NotANumber)?
        .trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(SizeRefused::NotANumber);
    }
    // Every unit has at most three letters: a longer one is none of them.
    let mut buf = [0u8; 3];
    let lower = buf.get_mut(..unit.len()).ok_or(SizeRefused::UnknownUnit)?;
    lower.copy_from_slice(unit.as_bytes());
    lower.make_ascii_lowercase();
    let shift = match &*lower {
        b"" | b"b" => 0,
        b"k" | b"kb" | b"kib" => 10,
        b"m" | b"mb" | b"mib" => 20,
        b"g" | b"gb" | b"gib" => 30,
        b"t" | b"tb" | b"tib" => 40,
        _ => return Err(SizeRefused::UnknownUnit),
    };
    // All digits: a parse failure is a number too large for a usize.
    let n: usize = num.parse().map_err(|_| SizeRefused::TooLarge)?;
    match n.checked_mul(1usize << shift) {
        Some(0) => Err(SizeRefused::Zero),
        Some(v) => Ok(v),
        None => Err(SizeRefused::TooLarge),
    }
}

/// [`read_size`] of a text, its refusal said in a sentence that names it.
///
/// ```
/// assert_eq!(prezero_sys::size::parse_size("2MB").unwrap(), 2 << 20);
/// assert!(prezero_sys::size::parse_size("4X").is_err());
/// ```
pub fn parse_size(s: &str) -> Result<usize, String> {
    read_size(s.as_bytes()).map_err(|why| why.message(s))
}

/// The binary units, largest first: shift, short name, IEC name.
const UNITS: [(u32, &str, &str); 4] = [
    (40, "T", "TiB"),
    (30, "G", "GiB"),
    (20, "M", "MiB"),
    (10, "K", "KiB"),
];

/// The shortest exact form, as flags take it: 4096 -> "4K", 3 << 30 -> "3G",
/// 1000 -> "1000".
pub fn fmt_size(n: usize) -> String {
    match whole_unit(n) {
        Some((count, unit, _)) => format!("{count}{unit}"),
        None => n.to_string(),
    }
}

/// The exact form with an IEC unit, as one token (a Prometheus label value):
/// 2 << 20 -> "2MiB", 4 << 30 -> "4GiB", 3145729 -> "3145729B".
pub fn size_label(n: usize) -> String {
    match whole_unit(n) {
        Some((count, _, unit)) => format!("{count}{unit}"),
        None => format!("{n}B"),
    }
}

/// The largest unit `n` is a whole number of: (how many, short name, IEC name).
fn whole_unit(n: usize) -> Option<(usize, &'static str, &'static str)> {
    UNITS
        .iter()
        .find(|&&(shift, ..)| n >= 1 << shift && n.is_multiple_of(1 << shift))
        .map(|&(shift, short, iec)| (n >> shift, short, iec))
}

/// For a reader: the largest binary unit `n` reaches, exact where the figure
/// is (4096 -> "4 KiB", 30 << 30 -> "30 GiB", 1536 << 20 -> "1.5 GiB"), else
/// three significant figures (47453132 -> "45.3 MiB").
pub fn human_size(n: usize) -> String {
    const NAMES: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let k = (1..NAMES.len()).take_while(|&k| n >> (10 * k) > 0).count();
    let v = n as f64 / (1u64 << (10 * k)) as f64;
    let shown = if v.fract() == 0.0 {
        v.to_string()
    } else {
        three_figures(v)
    };
    format!("{shown} {}", NAMES[k])
}

/// `v` (at least 1) rounded to three significant figures, trailing zeros
/// dropped: 45.34 -> "45.3", 1023.9 -> "1020", 9.996 -> "10".
fn three_figures(v: f64) -> String {
    let digits = |x: f64| x.log10().floor() as i32 + 1;
    let step = 10f64.powi(digits(v) - 3);
    let r = (v / step).round() * step;
    let t = format!("{r:.*}", (3 - digits(r)).max(0) as usize);
    if t.contains('.') {
        t.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        t
    }
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
    fn labels_are_exact_with_their_unit() {
        assert_eq!(size_label(2 << 20), "2MiB");
        assert_eq!(size_label(4 << 30), "4GiB");
        assert_eq!(size_label(1536 << 20), "1536MiB");
        assert_eq!(size_label(4096), "4KiB");
        assert_eq!(size_label(3145729), "3145729B");
        assert_eq!(size_label(0), "0B");
    }

    #[test]
    fn human_sizes_are_three_figures_and_a_unit() {
        assert_eq!(human_size(4096), "4 KiB");
        assert_eq!(human_size(47453132), "45.3 MiB");
        assert_eq!(human_size(32212254720), "30 GiB");
        assert_eq!(human_size(1000), "1000 B");
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1536 << 20), "1.5 GiB");
        assert_eq!(human_size(256 << 20), "256 MiB");
        assert_eq!(human_size((1 << 30) - 1), "1020 MiB");
        assert_eq!(human_size(1 << 40), "1 TiB");
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
        assert!(e.contains("'0' is zero: a size is at least 1 byte"), "{e}");
        let e = parse_size("99999999999T").unwrap_err().to_string();
        assert!(e.contains("more than the address space holds"), "{e}");
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
    fn sizes_refuse_what_they_should() {
        assert_eq!(read_size(b"123"), Ok(123));
        assert_eq!(read_size(b"1MiB"), Ok(1 << 20));
        for (s, why) in [
            (&b""[..], SizeRefused::NotANumber),
            (b"G", SizeRefused::NotANumber),
            (b"-1", SizeRefused::NotANumber),
            (b"4\xffK", SizeRefused::NotANumber),
            (b"1X", SizeRefused::UnknownUnit),
            (b"1 M", SizeRefused::UnknownUnit),
            (b"0K", SizeRefused::Zero),
            (b"99999999999999999999999", SizeRefused::TooLarge),
            (b"20000000T", SizeRefused::TooLarge),
        ] {
            assert_eq!(read_size(s), Err(why), "{:?}", String::from_utf8_lossy(s));
        }
        for s in SIZES {
            assert_eq!(read_size(s.as_bytes()).ok(), parse_size(s).ok(), "{s:?}");
        }
    }
}
