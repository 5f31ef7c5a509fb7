//! What the fuzz targets share: the C ABI target's operations (`ffi/`), and
//! memory fenced by `PROT_NONE` pages (`guarded.rs`), so a call that reads or
//! writes one byte past a buffer faults where it does it.

pub mod ffi;
pub mod guarded;
