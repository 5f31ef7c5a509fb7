//! What the fuzz targets (`fuzz/`) reach that is not the library's API:
//! compiled only with the `fuzzing` feature, which nothing else turns on.

use crate::clear::SizeClasses;
use crate::cpu::mask::{self, Arch};
use crate::cpu::Features;
use crate::profile::ProfileFile;
use crate::template::TemplateChoice;

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

/// A profile file's bytes, checked and read as [`ProfileFile::read`] reads a
/// file's (text that is not UTF-8 is an error), its sections then converted
/// as clearing and the template fills take them.
pub fn profile(bytes: &[u8]) -> Result<ProfileFile, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("cannot read it: {e}"))?;
    let file = ProfileFile::parse(text).map_err(|e| e.to_string())?;
    SizeClasses::from_rows(&file.classes).map_err(|e| e.to_string())?;
    if let Some(t) = &file.template {
        TemplateChoice::from_row(t).map_err(|e| e.to_string())?;
    }
    Ok(file)
}
