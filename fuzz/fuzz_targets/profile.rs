//! The calibration profile reader (`profile/file.rs`, `ProfileFile`, over
//! serde_json) and the sections' checks (`SizeClasses::from_rows`,
//! `TemplateChoice::from_row`). Any bytes are a profile or an error in
//! words, never a panic, and a profile read is written (as calibrate writes
//! it) to text that reads as the same profile.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prezero::fuzzing::profile;

fuzz_target!(|data: &[u8]| {
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
