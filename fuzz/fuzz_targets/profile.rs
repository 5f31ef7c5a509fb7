//! The calibration profile reader (`profile/file.rs`, `ProfileFile`) and the
//! JSON reader under it (`json.rs`). Any bytes are a profile or an error in
//! words, never a panic, and a profile read is written (as calibrate writes
//! it) to text that reads as the same profile. The JSON reader on its own:
//! any text is an error or a value, and a value written reads and is written
//! again as the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prezero::fuzzing::{json_twice, profile};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok((first, again)) = json_twice(text) {
            assert_eq!(first, again, "written, read and written again, it changed");
        }
    }
    let Ok(file) = profile(data) else {
        return;
    };
    let written = file.to_json();
    match profile(written.as_bytes()) {
        Ok(back) => assert!(
            back == file,
            "{file:?}\nwritten as\n{written}\nreads as {back:?}"
        ),
        Err(e) => panic!("{file:?}\nwritten as\n{written}\ndoes not read: {e}"),
    }
});
