//! The two size parsers: `prezero::parse_size` (the library's, every flag of
//! the `prezero` command) and the preload's (`PREZERO_*`, without
//! allocating; its file compiled here as it is). On every input they agree:
//! both refuse, or both read the same number. What they read, `fmt_size`
//! writes back to the same number.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../prezero-preload/src/size.rs"]
mod preload;

fuzz_target!(|data: &[u8]| {
    let lib = std::str::from_utf8(data)
        .ok()
        .and_then(|s| prezero::parse_size(s).ok());
    assert_eq!(
        preload::parse_size(data),
        lib,
        "{:?}",
        String::from_utf8_lossy(data)
    );
    if let Some(n) = lib {
        assert_eq!(prezero::parse_size(&prezero::fmt_size(n)).ok(), Some(n));
    }
});
