//! The C ABI's argument checks (`prezero_fuzz::ffi`): up to 16 calls per
//! input, clears, copies, template fills, regions, prefaults and pools, each
//! held to what the header promises.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|ops: Vec<prezero_fuzz::ffi::Op>| prezero_fuzz::ffi::run(ops));
