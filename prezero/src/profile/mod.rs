//! The calibration profile: the file `prezero calibrate` writes (its format in
//! `file.rs`, what calibrate measured beside its choices in `measured.rs`),
//! where it is looked for, and the one this process follows. Its rows are
//! names and numbers as the file has them: clearing checks and takes its size
//! classes from them at one point (`clear::classes::tuning`), the template
//! fills their choice at another (`template::choice::tuning`). So this module
//! imports neither.

use std::fmt::Display;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::cpu::cpu;

mod file;
mod json;
mod measured;

#[cfg(test)]
pub(crate) use file::{test_file_text, TEST_CLASSES};
pub use file::{ClassRow, ClassRows, ProfileFile, TemplateRow, PROFILE_FORMAT};
pub use measured::{Figure, Measured, Scrubber, ThreadFigure};

/// Where `prezero calibrate` writes and the library looks by default:
/// `$XDG_CONFIG_HOME/prezero/profile.json`, else `~/.config/prezero/profile.json`.
pub fn default_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("prezero").join("profile.json"))
}

/// Where the choices this process follows came from, and why (e.g. "built-in
/// defaults (no profile at ~/.config/prezero/profile.json)").
pub fn source() -> &'static str {
    &loaded().source
}

/// The rows of the profile file this process follows (none: the built-in
/// choices), and the sentence [`source`] gives.
pub(crate) struct Loaded {
    /// `"profile"`, if a file is followed.
    pub(crate) classes: Option<ClassRows>,
    /// `"template"`, if a file with one is followed.
    pub(crate) template: Option<TemplateRow>,
    source: String,
    /// The file's path, for a warning about one of its sections.
    shown: String,
}

/// The profile file, read once per process. Problems with the file as a whole
/// are reported once on stderr; the built-in choices are used then.
pub(crate) fn loaded() -> &'static Loaded {
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    LOADED.get_or_init(|| {
        let (file, source, shown) = file_from_env();
        // Only the choices are kept: the figures calibrate recorded are
        // for people, not for every process that clears memory.
        let (classes, template) = file.map_or((None, None), |f| (Some(f.classes), f.template));
        Loaded {
            classes,
            template,
            source,
            shown,
        }
    })
}

/// Says once, on stderr, that a section of the file this process follows
/// cannot be used (`why`), and so the built-in choice holds for it: each
/// section's reader calls it once, where it converts the rows.
pub(crate) fn refuse_section(section: &str, why: impl Display) {
    let shown = &loaded().shown;
    eprintln!("prezero: ignoring profile {shown}'s \"{section}\" section: {why}; using the built-in choice for it");
}

fn file_from_env() -> (Option<ProfileFile>, String, String) {
    let (path, explicit) = match std::env::var_os("PREZERO_PROFILE") {
        Some(v) if v == "none" => {
            return (
                None,
                "built-in defaults (PREZERO_PROFILE=none)".into(),
                String::new(),
            )
        }
        Some(v) if !v.is_empty() => (PathBuf::from(v), true),
        _ => match default_path() {
            Some(p) => (p, false),
            None => {
                return (
                    None,
                    "built-in defaults (no HOME or XDG_CONFIG_HOME)".into(),
                    String::new(),
                )
            }
        },
    };
    let shown = path.display().to_string();
    if !explicit && !path.exists() {
        return (
            None,
            format!("built-in defaults (no profile at {shown}; run `prezero calibrate`)"),
            shown,
        );
    }
    let refuse = |why: String| {
        eprintln!("prezero: ignoring profile {shown}: {why}; using the built-in defaults");
        let source = format!("built-in defaults ({shown} ignored: {why})");
        (None, source, shown.clone())
    };
    match ProfileFile::read(&path) {
        Err(e) => refuse(e.to_string()),
        Ok(f) if f.cpu_id != cpu().identity() => refuse(format!(
            "it was measured on \"{}\" ({}), this CPU is \"{}\" ({})",
            f.cpu_model,
            f.cpu_id,
            cpu().model_name,
            cpu().identity()
        )),
        Ok(f) => {
            let source = format!("{shown} (calibrated {})", f.date);
            (Some(f), source, shown)
        }
    }
}
