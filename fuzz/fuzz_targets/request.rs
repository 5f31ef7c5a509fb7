//! The daemon's decoder (`Request::decode`): any datagram is a request or an
//! error, never a panic, and what decodes encodes back to the very bytes it
//! came from (every field is checked, none skipped, the reserved ones zero),
//! but for the version: a message is written in the lowest version that
//! carries it, so a version-2 message without a node comes back as version 1.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prezero_service::protocol::Request;

fuzz_target!(|data: &[u8]| {
    if let Ok((seq, req)) = Request::decode(data) {
        let again = req.encode(seq);
        let version = |m: &[u8]| u16::from_le_bytes([m[4], m[5]]);
        assert!(
            version(&again) <= version(data),
            "{req:?} written in a later version"
        );
        assert_eq!(
            (&again[..4], &again[6..]),
            (&data[..4], &data[6..]),
            "{req:?} encodes to other bytes"
        );
    }
});
