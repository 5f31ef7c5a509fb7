//! Byte sizes as text, both ways: the one parser and the one formatter of the
//! workspace (`env::parse_size` reads the `PREZERO_*` variables without
//! allocating, held to this one by a test and a fuzz target). Sizes are binary multiples, written three ways:
//!
//! | function | 4096 | 1536 MiB | 1000 | for |
//! |---|---|---|---|---|
//! | [`fmt_size`] | `4K` | `1536M` | `1000` | flags, the config, logs: exact, and [`parse_size`] reads it back |
//! | [`size_label`] | `4KiB` | `1536MiB` | `1000B` | Prometheus label values: exact, one token with its unit |
//! | [`human_size`] | `4 KiB` | `1.5 GiB` | `1000 B` | figures for a reader (tables, the report): three significant figures |

use crate::error::{Error, Result};

/// The binary units, largest first: shift, short name, IEC name.
const UNITS: [(u32, &str, &str); 4] = [
    (40, "T", "TiB"),
    (30, "G", "GiB"),
    (20, "M", "MiB"),
    (10, "K", "KiB"),
];

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
    match n.checked_mul(1usize << shift) {
        Some(0) => Err(Error::invalid(format!(
            "'{s}' is zero: a size is at least 1 byte (try 4K, 2M, 1G)"
        ))),
        Some(v) => Ok(v),
        None => Err(Error::invalid(format!(
            "'{s}' is more than the address space holds: at most {} bytes",
            usize::MAX
        ))),
    }
}

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
}
