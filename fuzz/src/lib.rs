//! What the fuzz targets share: the C ABI target's operations (`ffi/`), on
//! memory fenced by `PROT_NONE` pages (`prezero_testkit::Guarded`), so a call
//! that reads or writes one byte past a buffer faults where it does it.

pub mod ffi;
