//! The two size parsers: `prezero::parse_size` (the library's, every flag of
//! the `prezero` command) and `prezero::env::parse_size` (the `PREZERO_*`
//! variables', which the preload reads without allocating). On every input they agree:
//! both refuse, or both read the same number. What they read, `fmt_size`
//! writes back to the same number.
#![no_main]

use libfuzzer_sys::fuzz_target;

use prezero::env::parse_size as env_parse_size;

fuzz_target!(|data: &[u8]| {
    let lib = std::str::from_utf8(data)
        .ok()
        .and_then(|s| prezero::parse_size(s).ok());
    assert_eq!(
        env_parse_size(data),
        lib,
        "{:?}",
        String::from_utf8_lossy(data)
    );
    if let Some(n) = lib {
        assert_eq!(prezero::parse_size(&prezero::fmt_size(n)).ok(), Some(n));
    }
});
