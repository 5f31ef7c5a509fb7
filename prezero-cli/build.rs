//! Three things the `prezero` binary carries with it:
//!
//! * `libprezero_preload.so`, which `prezero run` preloads: built here by a
//!   nested `cargo build --release -p prezero-preload` in a target directory
//!   of its own (cargo builds no other workspace member for
//!   `cargo run -p prezero-cli`), then embedded with `include_bytes!`.
//!   Failing to build it fails this build.
//! * The C reference of `prezero bench template` (gcc -O2), when the target
//!   is x86_64 and gcc is there. Without it the bench says why the row is
//!   missing (PREZERO_TEMPLATE_REFERENCE carries the reason).
//! * The C programs of `prezero bench run`, built as an executable with the
//!   target's C compiler; without one the bench skips their rows and says why
//!   (PREZERO_BENCH_ALLOC carries the reason).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    preload();
    template_reference();
    bench_alloc();
}

/// 64-bit FNV-1a: names the cache file of an embedded binary by its bytes.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("cargo sets {name} for build scripts"))
}

/// The nested build of `libprezero_preload.so`.
fn preload() {
    let manifest = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let root = manifest
        .parent()
        .expect("prezero-cli is inside the workspace");
    for p in [
        "prezero-preload/src",
        "prezero-preload/Cargo.toml",
        "prezero/src",
        "prezero/Cargo.toml",
        "prezero-sys/src",
        "prezero-sys/Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    let out = PathBuf::from(env("OUT_DIR")).join("preload");
    let target = env("TARGET");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "--release", "-p", "prezero-preload", "--target"])
        .arg(&target)
        .arg("--target-dir")
        .arg(&out);
    // The outer build's flags and wrappers are for the outer build: clippy's
    // driver or a sanitizer must not reach a library that goes into other
    // programs, and the target directory is our own.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "CLIPPY_ARGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_TARGET_DIR",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_BUILD_RUSTC_WRAPPER",
        "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
    ] {
        cmd.env_remove(var);
    }
    // No debug info: 14 MiB with it, 1.8 MiB without, and the binary
    // carries it. Symbols stay, so a backtrace still names functions.
    cmd.env("CARGO_PROFILE_RELEASE_DEBUG", "0");
    let output = cmd.output().unwrap_or_else(|e| {
        panic!("cannot run cargo to build libprezero_preload.so (`prezero run` embeds it): {e}")
    });
    if !output.status.success() {
        panic!(
            "building libprezero_preload.so failed ({}), which `prezero run` embeds; \
             `cargo build --release -p prezero-preload` shows the same error. Its output:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let so = out.join(&target).join("release/libprezero_preload.so");
    let bytes = std::fs::read(&so).unwrap_or_else(|e| {
        panic!(
            "the nested build succeeded but {} cannot be read: {e}",
            so.display()
        )
    });
    println!("cargo:rustc-env=PREZERO_PRELOAD_SO={}", so.display());
    println!(
        "cargo:rustc-env=PREZERO_PRELOAD_HASH={:016x}",
        fnv1a(&bytes)
    );
}

fn template_reference() {
    const SRC: &str = "src/bench/c/template_reference.c";
    println!("cargo:rerun-if-changed={SRC}");
    println!("cargo:rustc-check-cfg=cfg(template_reference)");
    let why_not = if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok("x86_64") {
        Some("the C reference is x86_64 code".to_string())
    } else {
        match Command::new("gcc").arg("-dumpfullversion").output() {
            Ok(o) if o.status.success() => {
                let version = String::from_utf8_lossy(&o.stdout).trim().to_string();
                match cc::Build::new()
                    .file(SRC)
                    .compiler("gcc")
                    .opt_level(2)
                    .try_compile("template_reference")
                {
                    Ok(()) => {
                        println!("cargo:rustc-cfg=template_reference");
                        println!("cargo:rustc-env=PREZERO_TEMPLATE_REFERENCE=gcc {version} -O2");
                        None
                    }
                    Err(e) => Some(format!("gcc {version} failed to build it: {e}")),
                }
            }
            _ => Some("no gcc at build time".to_string()),
        }
    };
    if let Some(why) = why_not {
        println!("cargo:warning=bench template's C reference not built: {why}");
        println!(
            "cargo:rustc-env=PREZERO_TEMPLATE_REFERENCE=not built ({})",
            why.replace('\n', " ")
        );
    }
}

/// `prezero-bench-alloc`, the C programs of `prezero bench run`.
fn bench_alloc() {
    const SRC: &str = "src/bench/c/alloc_programs.c";
    println!("cargo:rerun-if-changed={SRC}");
    println!("cargo:rustc-check-cfg=cfg(bench_alloc)");
    let exe = Path::new(&env("OUT_DIR")).join("prezero-bench-alloc");
    let built = cc::Build::new()
        .cargo_warnings(false)
        .try_get_compiler()
        .map_err(|e| format!("no C compiler for the target: {e}"))
        .and_then(|compiler| {
            let mut cmd = compiler.to_command();
            cmd.args(["-O2", "-Wall", "-pthread", "-o"])
                .arg(&exe)
                .arg(SRC);
            let shown = format!("{cmd:?}");
            match cmd.output() {
                Ok(o) if o.status.success() => Ok(()),
                Ok(o) => Err(format!(
                    "{shown} failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                )),
                Err(e) => Err(format!("cannot run {shown}: {e}")),
            }
        });
    match built.and_then(|()| std::fs::read(&exe).map_err(|e| format!("{}: {e}", exe.display()))) {
        Ok(bytes) => {
            println!("cargo:rustc-cfg=bench_alloc");
            println!("cargo:rustc-env=PREZERO_BENCH_ALLOC={}", exe.display());
            println!(
                "cargo:rustc-env=PREZERO_BENCH_ALLOC_HASH={:016x}",
                fnv1a(&bytes)
            );
        }
        Err(why) => {
            println!("cargo:warning=bench run's C programs not built: {why}");
            println!(
                "cargo:rustc-env=PREZERO_BENCH_ALLOC=not built ({})",
                why.replace('\n', " ")
            );
        }
    }
}
