//! The C library's SONAME: libprezero.so.MAJOR, or libprezero.so.0.MINOR
//! while the version is 0.x (where a minor release may change the ABI), so
//! that a program linked against one is never loaded with an incompatible
//! one (`scripts/install.sh` installs the file under that name, and the
//! development link beside it).

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_default();
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").unwrap_or_default();
    let abi = if major == "0" {
        format!("0.{minor}")
    } else {
        major
    };
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libprezero.so.{abi}");
    println!("cargo:rerun-if-changed=build.rs");
}
