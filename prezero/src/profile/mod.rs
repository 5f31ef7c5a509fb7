//! The calibration profile: the file `prezero calibrate` writes (its format in
//! `file.rs`, what calibrate measured beside its choices in `measured.rs`),
//! where it is looked for, and the one this process follows. Clearing takes
//! its size classes from it (`clear/dispatch.rs`), the template fills their
//! choice (`template/choice.rs`).

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::clear::Profile;
use crate::cpu::cpu;
use crate::template::TemplateProfile;

mod file;
mod measured;

pub use file::{ProfileFile, PROFILE_FORMAT};
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

/// The parts of the profile file this process follows (none: the built-in
/// choices), and the sentence [`source`] gives.
pub(crate) struct Loaded {
    pub(crate) profile: Option<Profile>,
    pub(crate) template: Option<TemplateProfile>,
    pub(crate) source: String,
}

/// The profile file, read once per process. Problems are reported once on
/// stderr; the built-in choices are used then.
pub(crate) fn loaded() -> &'static Loaded {
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    LOADED.get_or_init(|| {
        let (file, source) = file_from_env();
        // Only the choices are kept: the figures calibrate recorded are
        // for people, not for every process that clears memory.
        let (profile, template) = file.map_or((None, None), |f| (Some(f.profile), f.template));
        Loaded {
            profile,
            template,
            source,
        }
    })
}

fn file_from_env() -> (Option<ProfileFile>, String) {
    let (path, explicit) = match std::env::var_os("PREZERO_PROFILE") {
        Some(v) if v == "none" => return (None, "built-in defaults (PREZERO_PROFILE=none)".into()),
        Some(v) if !v.is_empty() => (PathBuf::from(v), true),
        _ => match default_path() {
            Some(p) => (p, false),
            None => {
                return (
                    None,
                    "built-in defaults (no HOME or XDG_CONFIG_HOME)".into(),
                )
            }
        },
    };
    let shown = path.display();
    if !explicit && !path.exists() {
        return (
            None,
            format!("built-in defaults (no profile at {shown}; run `prezero calibrate`)"),
        );
    }
    let refuse = |why: String| {
        eprintln!("prezero: ignoring profile {shown}: {why}; using the built-in defaults");
        (None, format!("built-in defaults ({shown} ignored: {why})"))
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
            let date = f.date.clone();
            (Some(f), format!("{shown} (calibrated {date})"))
        }
    }
}
