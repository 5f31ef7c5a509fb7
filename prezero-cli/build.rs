//! Builds the C reference of `prezero bench template` with gcc -O2, when the
//! target is x86_64 and gcc is there. Without it the bench says why the row is
//! missing (PREZERO_TEMPLATE_REFERENCE carries the reason) rather than failing
//! the build.

use std::process::Command;

fn main() {
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
