//! include/prezero.h must be exactly what cbindgen makes of src/ffi/ today.
//! Only that folder is read, so no other public item of the crate leaks into
//! the header.
//! `PREZERO_BLESS=1 cargo test -p prezero --test ffi_header` rewrites it.
//! x86_64 only: cbindgen is a dev-dependency there (see Cargo.toml).
#![cfg(target_arch = "x86_64")]

#[test]
fn header_is_current() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let config = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).unwrap();
    let bindings = cbindgen::Builder::new()
        .with_src(format!("{dir}/src/ffi/mod.rs"))
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
        "include/prezero.h is out of date with src/ffi/; run: PREZERO_BLESS=1 cargo test -p prezero --test ffi_header"
    );
}
