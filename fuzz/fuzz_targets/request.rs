//! The daemon's decoder (`Request::decode`): any datagram is a request or an
//! error, never a panic, and what decodes encodes back to the very bytes it
//! came from (every field is checked, none skipped, the reserved ones zero).
#![no_main]

use libfuzzer_sys::fuzz_target;
use prezero::service::protocol::Request;

fuzz_target!(|data: &[u8]| {
    if let Ok((seq, req)) = Request::decode(data) {
        assert_eq!(req.encode(seq), data, "{req:?} encodes to other bytes");
    }
});
