//! Numbers as a reader takes them in: at most three significant figures, with
//! a unit (SI prefixes for rates and times; bytes are `prezero::human_size`'s),
//! never an exponent. And the two bits of HTML every section writes: escaping
//! and tables.

use std::fmt::Write;

/// `x` rounded to three significant figures, trailing zeros dropped:
/// 2.1839 -> "2.18", 0.122913 -> "0.123", 1593.9 -> "1590", 17.0 -> "17".
pub fn sig3(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return if x == 0.0 { "0".into() } else { x.to_string() };
    }
    let r = round3(x);
    let decimals = (2 - magnitude(r)).max(0) as usize;
    let t = format!("{r:.decimals$}");
    if t.contains('.') {
        t.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        t
    }
}

/// The power of ten of `x`'s leading digit.
fn magnitude(x: f64) -> i32 {
    x.abs().log10().floor() as i32
}

fn round3(x: f64) -> f64 {
    let p = 10f64.powi(magnitude(x) - 2);
    (x / p).round() * p
}

/// `x` of `unit` with an SI prefix: (533188, "/s") -> "533 k/s",
/// (0.000195, "s") -> "195 µs", (2.3e10, "B/s") -> "23 GB/s".
pub fn si(x: f64, unit: &str) -> String {
    const PREFIXES: [&str; 9] = ["n", "µ", "m", "", "k", "M", "G", "T", "P"];
    if x == 0.0 || !x.is_finite() {
        return format!("{} {unit}", sig3(x)).trim_end().to_string();
    }
    // The prefix of the rounded value, so 999.7 is "1 k", not "1000".
    let thousands = magnitude(round3(x)).div_euclid(3).clamp(-3, 5);
    let prefix = PREFIXES[(thousands + 3) as usize];
    let mantissa = sig3(x / 10f64.powi(3 * thousands));
    format!("{mantissa} {prefix}{unit}").trim_end().to_string()
}

/// A throughput the benches give in GB/s (10^9 bytes a second).
pub fn gbps(x: f64) -> String {
    si(x * 1e9, "B/s")
}

/// A duration in seconds.
pub fn secs(x: f64) -> String {
    si(x, "s")
}

/// A duration in milliseconds.
pub fn ms(x: f64) -> String {
    secs(x / 1e3)
}

/// A duration in microseconds.
pub fn us(x: f64) -> String {
    secs(x / 1e6)
}

/// A count: exact up to 9999, then SI (65536 -> "65.5 k").
pub fn count(n: f64) -> String {
    if n.abs() < 1e4 && n.fract() == 0.0 {
        format!("{n}")
    } else {
        si(n, "")
    }
}

pub fn pct(x: f64) -> String {
    format!("{} %", sig3(x))
}

/// How many times one figure is the other.
pub fn times(x: f64) -> String {
    format!("{}×", sig3(x))
}

pub fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An HTML table; every cell is text, escaped here.
pub fn table(head: &[&str], body: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut t = String::from("<table><tr>");
    for h in head {
        let _ = write!(t, "<th>{}</th>", esc(h));
    }
    t.push_str("</tr>");
    for r in body {
        t.push_str("<tr>");
        for c in r {
            let _ = write!(t, "<td>{}</td>", esc(&c));
        }
        t.push_str("</tr>");
    }
    t.push_str("</table>\n");
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_figures_and_a_unit() {
        assert_eq!(sig3(2.1839384198345777), "2.18");
        assert_eq!(sig3(0.122913473), "0.123");
        assert_eq!(sig3(1593.9), "1590");
        assert_eq!(sig3(17.0), "17");
        assert_eq!(sig3(9.996), "10");
        assert_eq!(sig3(-4.655), "-4.66");
        assert_eq!(sig3(0.0), "0");
        assert_eq!(si(533188.0, "/s"), "533 k/s");
        assert_eq!(si(999.7, "/s"), "1 k/s");
        assert_eq!(si(9e6, ""), "9 M");
        assert_eq!(gbps(23.37), "23.4 GB/s");
        assert_eq!(gbps(10865.91), "10.9 TB/s");
        assert_eq!(gbps(0.85), "850 MB/s");
        assert_eq!(secs(0.122913473), "123 ms");
        assert_eq!(secs(0.0), "0 s");
        assert_eq!(us(0.195), "195 ns");
        assert_eq!(us(1158.428), "1.16 ms");
        assert_eq!(ms(1256.45), "1.26 s");
        assert_eq!(count(65536.0), "65.5 k");
        assert_eq!(count(20.0), "20");
        assert_eq!(pct(36.02), "36 %");
        assert_eq!(times(183.1), "183×");
    }
}
