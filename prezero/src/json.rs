//! A small JSON reader and writer for the calibration profile, so the library
//! needs no dependency beyond libc. Reads RFC 8259 JSON (numbers become f64);
//! writes it as serde_json's pretty printer does, so files written before by
//! the CLI and files written now are the same bytes.

use std::fmt;
use std::fmt::Write;

/// A JSON value, parsed or to be written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    /// Any number read; written with a fraction or an exponent (`20.0`).
    Num(f64),
    /// A whole number to write as one (`4096`); the reader gives `Num`.
    Int(u64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

/// Where and why parsing stopped.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ParseError {
    pub(crate) offset: usize,
    pub(crate) what: &'static str,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.offset)
    }
}

impl Json {
    pub(crate) fn parse(text: &str) -> Result<Json, ParseError> {
        let mut p = Parser {
            b: text.as_bytes(),
            i: 0,
        };
        let v = p.value(0)?;
        p.ws();
        if p.i != p.b.len() {
            return Err(p.err("trailing data after the JSON value"));
        }
        Ok(v)
    }

    /// The member `key` of an object.
    pub(crate) fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            Json::Num(n) => Some(*n),
            Json::Int(n) => Some(*n as f64),
            _ => None,
        }
    }

    /// A whole number of at least 0 (a byte count, a count, a format
    /// number); past `usize::MAX` it saturates, as an `as` cast does.
    pub(crate) fn as_count(&self) -> Option<usize> {
        self.as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0)
            .map(|f| f as usize)
    }

    pub(crate) fn as_bool(&self) -> Option<bool> {
        match self {
            Json::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub(crate) fn as_array(&self) -> Option<&[Json]> {
        match self {
            Json::Arr(a) => Some(a),
            _ => None,
        }
    }

    /// The members of an object, in the order read.
    pub(crate) fn as_object(&self) -> Option<&[(String, Json)]> {
        match self {
            Json::Obj(m) => Some(m),
            _ => None,
        }
    }

    /// The text of this value as serde_json's `to_string_pretty` writes it:
    /// two spaces a level, members sorted by key (serde_json's map is
    /// ordered), numbers as `itoa` and `ryu` print them.
    pub(crate) fn to_pretty(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, 0);
        out
    }

    fn write(&self, out: &mut String, depth: usize) {
        let indent = |out: &mut String, depth: usize| {
            out.push('\n');
            out.push_str(&"  ".repeat(depth));
        };
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Num(n) => write_f64(out, *n),
            Json::Int(n) => {
                let _ = write!(out, "{n}");
            }
            Json::Str(s) => write_str(out, s),
            Json::Arr(a) if a.is_empty() => out.push_str("[]"),
            Json::Obj(m) if m.is_empty() => out.push_str("{}"),
            Json::Arr(a) => {
                out.push('[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    indent(out, depth + 1);
                    v.write(out, depth + 1);
                }
                indent(out, depth);
                out.push(']');
            }
            Json::Obj(m) => {
                let mut members: Vec<&(String, Json)> = m.iter().collect();
                members.sort_by(|a, b| a.0.cmp(&b.0));
                out.push('{');
                for (i, (k, v)) in members.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    indent(out, depth + 1);
                    write_str(out, k);
                    out.push_str(": ");
                    v.write(out, depth + 1);
                }
                indent(out, depth);
                out.push('}');
            }
        }
    }
}

/// As serde_json prints an f64: the shortest digits that read back the same,
/// a `.0` on whole numbers, an exponent (`1e+16`, `1e-7`) outside 1e-5..1e16;
/// JSON has no NaN or infinity, so serde_json writes those as `null`.
fn write_f64(out: &mut String, n: f64) {
    if !n.is_finite() {
        out.push_str("null");
        return;
    }
    // Rust's `{:?}` prints the same digits, but switches to an exponent below
    // 1e-4, not 1e-5 (`{}` never does), and writes no `+` in it.
    let text = if (1e-5..1e-4).contains(&n.abs()) {
        format!("{n}")
    } else {
        format!("{n:?}")
    };
    match text.split_once('e') {
        Some((digits, exp)) if !exp.starts_with('-') => {
            let _ = write!(out, "{digits}e+{exp}");
        }
        _ => out.push_str(&text),
    }
}

/// A string with the escapes serde_json uses: `\"`, `\\`, the short forms
/// of control characters and `\u00XX` for the rest; everything else as is.
fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if c < ' ' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

/// Deeper nesting than this is refused rather than risking the stack.
const MAX_DEPTH: usize = 64;

impl Parser<'_> {
    fn err(&self, what: &'static str) -> ParseError {
        ParseError {
            offset: self.i,
            what,
        }
    }

    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn lit(&mut self, word: &'static str, v: Json) -> Result<Json, ParseError> {
        if self.b[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("unknown literal"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, ParseError> {
        if depth > MAX_DEPTH {
            return Err(self.err("nested too deeply"));
        }
        self.ws();
        match self.b.get(self.i) {
            None => Err(self.err("unexpected end (truncated file?)")),
            Some(b'n') => self.lit("null", Json::Null),
            Some(b't') => self.lit("true", Json::Bool(true)),
            Some(b'f') => self.lit("false", Json::Bool(false)),
            Some(b'"') => self.string().map(Json::Str),
            Some(b'[') => {
                self.i += 1;
                let mut a = Vec::new();
                if self.eat(b']') {
                    return Ok(Json::Arr(a));
                }
                loop {
                    a.push(self.value(depth + 1)?);
                    if self.eat(b']') {
                        return Ok(Json::Arr(a));
                    }
                    if !self.eat(b',') {
                        return Err(self.err("expected ',' or ']'"));
                    }
                }
            }
            Some(b'{') => {
                self.i += 1;
                let mut m = Vec::new();
                if self.eat(b'}') {
                    return Ok(Json::Obj(m));
                }
                loop {
                    self.ws();
                    if self.b.get(self.i) != Some(&b'"') {
                        return Err(self.err("expected a string key"));
                    }
                    let k = self.string()?;
                    if !self.eat(b':') {
                        return Err(self.err("expected ':'"));
                    }
                    m.push((k, self.value(depth + 1)?));
                    if self.eat(b'}') {
                        return Ok(Json::Obj(m));
                    }
                    if !self.eat(b',') {
                        return Err(self.err("expected ',' or '}'"));
                    }
                }
            }
            Some(c) if *c == b'-' || c.is_ascii_digit() => self.number(),
            Some(_) => Err(self.err("unexpected character")),
        }
    }

    fn number(&mut self) -> Result<Json, ParseError> {
        let start = self.i;
        while self.i < self.b.len()
            && matches!(
                self.b[self.i],
                b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
            )
        {
            self.i += 1;
        }
        let n = std::str::from_utf8(&self.b[start..self.i])
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .ok_or_else(|| self.err("bad number"))?;
        // Past f64's range a number parses as infinity, which JSON cannot
        // hold (it would be written back as `null`): refused, as serde_json
        // refuses it.
        if !n.is_finite() {
            return Err(self.err("number out of range"));
        }
        Ok(Json::Num(n))
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.i += 1; // the opening quote
        let mut out = Vec::new();
        loop {
            let Some(&c) = self.b.get(self.i) else {
                return Err(self.err("unterminated string (truncated file?)"));
            };
            self.i += 1;
            match c {
                b'"' => return String::from_utf8(out).map_err(|_| self.err("string is not UTF-8")),
                b'\\' => {
                    let Some(&e) = self.b.get(self.i) else {
                        return Err(self.err("unterminated escape"));
                    };
                    self.i += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let hex = self
                                .b
                                .get(self.i..self.i + 4)
                                .ok_or_else(|| self.err("short \\u escape"))?;
                            let code = std::str::from_utf8(hex)
                                .ok()
                                .and_then(|h| u32::from_str_radix(h, 16).ok())
                                .ok_or_else(|| self.err("bad \\u escape"))?;
                            self.i += 4;
                            let ch = char::from_u32(code).unwrap_or('\u{fffd}');
                            out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                        }
                        _ => return Err(self.err("unknown escape")),
                    }
                }
                c if c < 0x20 => return Err(self.err("control character in string")),
                c => out.push(c),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_serde_json_writes() {
        let v =
            Json::parse(r#" {"a": [1, -2.5e3, true, null], "b": {"c": "x\"y\u00e9\n"}, "d": []} "#)
                .unwrap();
        assert_eq!(
            v.get("a").unwrap().as_array().unwrap()[1].as_f64(),
            Some(-2500.0)
        );
        assert_eq!(
            v.get("b").unwrap().get("c").unwrap().as_str(),
            Some("x\"yé\n")
        );
        assert_eq!(v.get("d"), Some(&Json::Arr(vec![])));
        assert_eq!(v.get("zz"), None);
    }

    #[test]
    fn rejects_broken_input() {
        for bad in [
            "",
            "{",
            "{\"a\":",
            "{\"a\" 1}",
            "[1,]",
            "[1 2]",
            "\"abc",
            "tru",
            "{} x",
            "{1:2}",
            "-",
            "\"\\q\"",
            "1e309",
            "[-1e999]",
        ] {
            assert!(Json::parse(bad).is_err(), "{bad:?} parsed");
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(Json::parse(&deep).is_err());
    }

    /// What serde_json 1.0.154's `to_string_pretty` gives for the same values.
    #[test]
    fn writes_what_serde_json_writes() {
        let num = |n: f64| Json::Num(n);
        let v = Json::Obj(vec![
            (
                "b".into(),
                Json::Arr(vec![
                    Json::Int(1),
                    num(20.0),
                    num(1e16),
                    num(1.5e16),
                    num(0.000015),
                    num(9.9e-6),
                    num(1e-7),
                    num(0.0001),
                    num(-0.0),
                    num(9.09),
                    num(123456789.125),
                    num(f64::NAN),
                ]),
            ),
            ("a".into(), Json::Obj(vec![])),
            ("c".into(), Json::Arr(vec![])),
            (
                "d".into(),
                Json::Str("q\"b\\s/\n\t\r\u{8}\u{c}\u{1}\u{7f}é".into()),
            ),
            ("e".into(), Json::Null),
            ("f".into(), Json::Bool(true)),
            (
                "g".into(),
                Json::Obj(vec![
                    ("z".into(), Json::Int(1)),
                    ("y".into(), Json::Arr(vec![Json::Bool(false)])),
                ]),
            ),
        ]);
        let want = "{\n  \"a\": {},\n  \"b\": [\n    1,\n    20.0,\n    1e+16,\n    1.5e+16,\n    0.000015,\n    9.9e-6,\n    1e-7,\n    0.0001,\n    -0.0,\n    9.09,\n    123456789.125,\n    null\n  ],\n  \"c\": [],\n  \"d\": \"q\\\"b\\\\s/\\n\\t\\r\\b\\f\\u0001\u{7f}é\",\n  \"e\": null,\n  \"f\": true,\n  \"g\": {\n    \"y\": [\n      false\n    ],\n    \"z\": 1\n  }\n}";
        assert_eq!(v.to_pretty(), want);
        // And what was written reads back as it was (numbers as f64).
        let back = Json::parse(&v.to_pretty()).unwrap();
        assert_eq!(back.get("g").unwrap().get("z"), Some(&Json::Num(1.0)));
        assert_eq!(back.get("d"), v.get("d"));
    }
}
