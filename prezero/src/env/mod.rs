//! The `PREZERO_*` contract: the variables the preload reads, which `prezero
//! run` sets from its flags. Nothing here allocates (the preload reads them
//! inside `malloc`).

mod size;

pub use size::parse_size;
