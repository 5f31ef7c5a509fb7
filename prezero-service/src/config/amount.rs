//! [`Amount`]: how much memory a pool's target or cap asks for, in bytes or
//! as a share of its node's memory, so that one configuration fits machines
//! of any size.

use std::fmt;

use crate::{Error, Result};
use prezero::{fmt_size, parse_size};

/// A pool's target or cap as the configuration says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    /// So many bytes (`"8G"`).
    Bytes(usize),
    /// A share of the memory of the node the pool is placed on (the node's
    /// `MemTotal`, hugetlb pages included, so the share does not move as
    /// pages are reserved): `"1/8"` or `"12.5%"`, kept as the fraction
    /// `num/den` in lowest terms, `0 < num <= den`.
    Share {
        /// Numerator.
        num: u32,
        /// Denominator.
        den: u32,
    },
}

impl Amount {
    /// Reads a size (`"8G"`, as [`parse_size`] reads it), a fraction of the
    /// node's memory (`"1/8"`) or a percentage of it (`"12.5%"`, at most six
    /// decimals). A share is more than nothing and at most the whole node.
    pub fn parse(s: &str) -> Result<Amount> {
        let t = s.trim();
        let share = if let Some(pct) = t.strip_suffix('%') {
            percent(pct)
        } else if let Some((n, d)) = t.split_once('/') {
            fraction(n, d)
        } else {
            return parse_size(t).map(Amount::Bytes).map_err(|e| match e {
                prezero::Error::InvalidArgument(m) => {
                    Error::invalid(format!("{m}; or a share of the node's memory (1/8, 12.5%)"))
                }
                e => e.into(),
            });
        };
        let (num, den) = share.ok_or_else(|| {
            Error::invalid(format!(
                "'{s}' is not a share of the node's memory: N/D with 0 < N <= D (1/8), \
                 or a percentage above 0 and at most 100 (12.5%)"
            ))
        })?;
        let g = gcd(num, den);
        Ok(Amount::Share {
            num: (num / g) as u32,
            den: (den / g) as u32,
        })
    }

    /// The bytes this asks for on a node of `node_memory` bytes, in whole
    /// segments of `segment` bytes (a share rounded down; bytes as given).
    pub fn on_node(self, node_memory: u64, segment: usize) -> usize {
        match self {
            Amount::Bytes(b) => b,
            Amount::Share { num, den } => {
                let bytes = u128::from(node_memory) * u128::from(num) / u128::from(den);
                let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
                bytes - bytes % segment.max(1)
            }
        }
    }

    /// Whether it is a share of the node's memory.
    pub fn is_share(self) -> bool {
        matches!(self, Amount::Share { .. })
    }
}

/// `"8G"`, `"1/8"`: what [`Amount::parse`] reads back to the same amount.
impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Amount::Bytes(b) => f.write_str(&fmt_size(*b)),
            Amount::Share { num, den } => write!(f, "{num}/{den}"),
        }
    }
}

/// `N/D` with `0 < N <= D`, both integers that fit a `u32`.
fn fraction(n: &str, d: &str) -> Option<(u64, u64)> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(n) || !digits(d) {
        return None;
    }
    let (n, d): (u32, u32) = (n.parse().ok()?, d.parse().ok()?);
    (n > 0 && n <= d).then_some((u64::from(n), u64::from(d)))
}

/// `P` of `P%`, `0 < P <= 100`, with at most six decimals: `P/100`.
fn percent(p: &str) -> Option<(u64, u64)> {
    let (whole, decimals) = p.split_once('.').unwrap_or((p, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || whole.len() > 3 || decimals.len() > 6 || !digits(whole) {
        return None;
    }
    if !digits(decimals) || (p.contains('.') && decimals.is_empty()) {
        return None;
    }
    let scale = 10u64.pow(decimals.len() as u32);
    let num = whole.parse::<u64>().ok()? * scale + decimals.parse::<u64>().unwrap_or(0);
    let den = 100 * scale;
    (num > 0 && num <= den).then_some((num, den))
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_fractions_and_percentages_read() {
        assert_eq!(Amount::parse("8G").unwrap(), Amount::Bytes(8 << 30));
        let eighth = Amount::Share { num: 1, den: 8 };
        for s in ["1/8", " 1/8 ", "2/16", "12.5%", "12.500%"] {
            assert_eq!(Amount::parse(s).unwrap(), eighth, "{s}");
        }
        assert_eq!(
            Amount::parse("100%").unwrap(),
            Amount::Share { num: 1, den: 1 }
        );
        assert_eq!(
            Amount::parse("0.000001%").unwrap(),
            Amount::Share {
                num: 1,
                den: 100_000_000
            }
        );
        for a in [
            eighth,
            Amount::Bytes(256 << 20),
            Amount::Share { num: 3, den: 7 },
        ] {
            assert_eq!(Amount::parse(&a.to_string()).unwrap(), a);
        }
    }

    #[test]
    fn bad_amounts_say_what_is_expected() {
        for s in [
            "0/8",
            "9/8",
            "1/0",
            "-1/8",
            "1/-8",
            "1.5/8",
            "1/8/2",
            "/8",
            "1/",
            "0%",
            "100.1%",
            "1000%",
            "%",
            "-5%",
            "12.%",
            ".5%",
            "1.1234567%",
            "12,5%",
            "1 /8",
            "4294967296/1",
        ] {
            let e = Amount::parse(s).unwrap_err().to_string();
            assert!(e.contains("not a share of the node's memory"), "{s}: {e}");
        }
        let e = Amount::parse("8X").unwrap_err().to_string();
        assert!(
            e.contains("unknown unit") && e.contains("(1/8, 12.5%)"),
            "{e}"
        );
        let e = Amount::parse("0").unwrap_err().to_string();
        assert!(e.contains("at least 1 byte"), "{e}");
    }

    #[test]
    fn a_share_is_whole_segments_of_the_nodes_memory() {
        let eighth = Amount::parse("1/8").unwrap();
        // 15.6 GiB: an eighth is 1.95 GiB, seven segments of 256 MiB.
        let node = 16_000_000_000 / 1024 * 1024;
        assert_eq!(eighth.on_node(node, 256 << 20), 7 * (256 << 20));
        // Less than a segment is none.
        assert_eq!(eighth.on_node(1 << 30, 256 << 20), 0);
        assert_eq!(Amount::Bytes(3 << 20).on_node(1 << 30, 2 << 20), 3 << 20);
        let all = Amount::parse("100%").unwrap();
        assert_eq!(all.on_node(u64::MAX, 1), usize::try_from(u64::MAX).unwrap());
    }
}
