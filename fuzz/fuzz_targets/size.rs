//! The size parser (`prezero_sys::size::read_size`, which allocates nothing:
//! every flag of the `prezero` command and every `PREZERO_*` variable goes
//! through it): on every input it reads a number or refuses without a panic,
//! the library's `parse_size` agrees with it, and what it reads, `fmt_size`
//! writes back to the same number.
#![no_main]

use libfuzzer_sys::fuzz_target;

use prezero_sys::size::read_size;

fuzz_target!(|data: &[u8]| {
    let raw = read_size(data).ok();
    let lib = std::str::from_utf8(data)
        .ok()
        .and_then(|s| prezero::parse_size(s).ok());
    assert_eq!(raw, lib, "{:?}", String::from_utf8_lossy(data));
    if let Some(n) = raw {
        assert_eq!(read_size(prezero::fmt_size(n).as_bytes()), Ok(n));
    }
});
