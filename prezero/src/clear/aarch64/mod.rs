//! aarch64 kernels.

pub(crate) mod dc_zva;
