//! What the fuzz targets (`fuzz/`) reach that is not the library's API:
//! compiled only with the `fuzzing` feature, which nothing else turns on.

use crate::cpu::mask::{self, Arch};
use crate::cpu::Features;

/// `text` applied to `detected` as [`cpu()`](crate::cpu()) applies
/// `PREZERO_CPU`, with the names of x86_64 or (`aarch64`) of aarch64;
/// `cpu_has` answers for the instructions a level requires that [`Features`]
/// does not carry.
pub fn cpu_mask(
    text: &str,
    detected: Features,
    aarch64: bool,
    cpu_has: impl Fn(&str) -> bool,
) -> Result<Features, String> {
    let arch = if aarch64 { Arch::Aarch64 } else { Arch::X86_64 };
    mask::apply(text, detected, arch, cpu_has)
}

/// Where each segment of an `ALLOC` answer of these lengths goes in a request
/// of `len` bytes on `page`-byte pages, as the client checks it before it maps
/// anything: `(offset, bytes mapped)`, or why the answer is not believed.
pub fn alloc_tile(lens: &[u64], len: usize, page: usize) -> Result<Vec<(usize, usize)>, String> {
    crate::service::tile(lens, len, page).map_err(|e| e.to_string())
}
