//! The shared object exports the allocator's entry points and nothing else.
//! Its own build leaves prezero's C ABI out (feature `ffi`), but when the
//! workspace is built together Cargo unifies features and prezero comes with
//! it; rustc would export its `pz_*` functions too. Symbols from the
//! dependencies' archives stay local.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,--exclude-libs,ALL");
}
