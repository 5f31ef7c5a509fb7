//! include/prezero.h must be exactly what cbindgen makes of this crate's src/
//! today. Only this crate is read, so no public item of the Rust library
//! leaks into the header.
//! `PREZERO_BLESS=1 cargo test -p prezero-capi --test ffi_header` rewrites it.
//! x86_64 only: cbindgen is a dev-dependency there (see Cargo.toml).
#![cfg(target_arch = "x86_64")]

#[test]
fn header_is_current() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let config = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).unwrap();
    let bindings = cbindgen::Builder::new()
        .with_src(format!("{dir}/src/lib.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen failed");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let path = format!("{dir}/../include/prezero.h");
    if std::env::var("PREZERO_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &fresh).unwrap();
        return;
    }
    let current = std::fs::read(&path).unwrap_or_default();
    assert!(
        current == fresh,
        "include/prezero.h is out of date with prezero-capi/src/; run: PREZERO_BLESS=1 cargo test -p prezero-capi --test ffi_header"
    );
}
