//! libprezero_preload.so against C programs, as a hostile tester would run
//! them.
//!
//! The programs are tests/c/preload_stress.c (one binary, one mode per run:
//! see its header) and tests/c/preload_dl.c (a library that allocates in its
//! constructor and destructor), compiled with gcc here, and run with
//! `LD_PRELOAD` set to the shared object cargo built for this package (built
//! first if it is missing or older than the sources). Where glibc's own answer
//! is the reference, the same mode runs without the preload and the outputs
//! are compared. Without gcc every test skips (`tool`) and passes.
//!
//! The tests run one at a time (a lock): they measure resident memory and
//! time, and the machines that run them have two cores.
//!
//! The scenarios, by what they check: `contents` (zeroes, alignment, guards,
//! overlap), `process` (fork, signals, dlopen, foreign pointers), `stats`
//! (the stats line, the cap, idle, prefill), `address_space`, `tools`
//! (sanitizers, valgrind, the exported and imported symbols).

#[path = "../common/mod.rs"]
mod common;

mod address_space;
mod contents;
mod process;
mod stats;
mod tools;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
