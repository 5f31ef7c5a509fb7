//! What the preload's integration tests share: the shared object, built
//! for them, and the C compiler that builds their programs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

/// One test at a time: they measure resident memory and time, and the
/// machines that run them have two cores.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/c")
}

/// `<target>/<profile>` of this test executable (`.../deps/preload-HASH`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test runs from <target>/<profile>/deps")
        .to_path_buf()
}

/// The .so of this package, built now: an integration test does not make
/// cargo build (or rebuild) a cdylib-only library. A no-op when it is up to
/// date. In `<target>/preload`, a target dir of its own: built alone, the
/// package takes prezero without its C ABI, and in the workspace's dir that
/// build and every workspace build (which unifies the C ABI back on) would
/// rebuild prezero over each other's (the cdylib's file name has no hash).
/// `scripts/preload-suites.sh` uses the same dir.
pub fn shared_object() -> PathBuf {
    let dir = profile_dir();
    let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "prezero-preload"]);
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    // <target>/<profile>, or <target>/<triple>/<profile> when cross-built:
    // cargo marks its target dir with both files (either can be missing, as
    // CACHEDIR.TAG is when the directory existed before cargo first ran).
    let up = dir.parent().expect("target dir").to_path_buf();
    let is_target =
        |d: &Path| d.join("CACHEDIR.TAG").exists() || d.join(".rustc_info.json").exists();
    let (target, triple) = match (is_target(&up), up.file_name(), up.parent()) {
        (false, Some(triple), Some(top)) => (top.to_path_buf(), Some(triple.to_owned())),
        _ => (up, None),
    };
    let own = target.join("preload");
    let mut so = own.clone();
    if let Some(t) = &triple {
        cmd.arg("--target").arg(t);
        so.push(t);
    }
    so.extend([profile, "libprezero_preload.so"]);
    let out = cmd
        .env("CARGO_TARGET_DIR", &own)
        .output()
        .expect("run cargo build");
    assert!(
        out.status.success(),
        "cargo build -p prezero-preload failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(so.exists(), "{} not built", so.display());
    so
}

pub fn gcc(args: &[&str]) -> Result<(), String> {
    let out = Command::new("gcc")
        .args(args)
        .output()
        .map_err(|e| format!("gcc: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "gcc {}:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
