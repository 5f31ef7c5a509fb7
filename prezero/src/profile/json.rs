//! The few things the profile's reader and writer ask of a JSON value beyond
//! what serde_json's [`Value`] offers.

use serde_json::{Map, Value};

/// A whole number of at least 0 (a byte count, a count, a format number),
/// written as an integer or as a whole float (`4096.0`); past `usize::MAX`
/// it saturates, as an `as` cast does.
pub(super) fn as_count(v: &Value) -> Option<usize> {
    let n = v.as_number()?;
    match n.as_u64() {
        Some(u) => Some(usize::try_from(u).unwrap_or(usize::MAX)),
        None => n
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0)
            .map(|f| f as usize),
    }
}

/// A count or byte count to write.
pub(super) fn count(n: usize) -> Value {
    Value::from(n as u64)
}

/// An object of these members, keys in order: serde_json's map sorts them,
/// and keeps the order given instead where a crate in the build turns on its
/// `preserve_order`, so they are given sorted.
pub(super) fn object(mut members: Vec<(&str, Value)>) -> Value {
    members.sort_by(|a, b| a.0.cmp(b.0));
    let map: Map<String, Value> = members
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    Value::Object(map)
}
