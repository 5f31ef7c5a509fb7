//! Any other architecture: no identity, no features, the portable kernels alone.

use super::{Cache, Features};

pub(super) fn identity() -> (String, u32, u32, u32, String) {
    (String::new(), 0, 0, 0, String::new())
}

pub(super) fn features() -> Features {
    Features::default()
}

pub(super) fn cpuid_caches() -> Vec<Cache> {
    Vec::new()
}

pub(super) fn dc_zva_block() -> usize {
    0
}
