//! # prezero
//!
//! Zeroed memory as fast as the hardware allows, on Linux.
//!
//! ```
//! let mut buf = vec![0xa5u8; 8 << 20];
//! // One extent, the kernel chosen once for this CPU and this size.
//! prezero::clear(&mut buf);
//! assert!(buf.iter().all(|&b| b == 0));
//!
//! // Memory you know is cold (e.g. freed long ago): streaming stores.
//! prezero::clear_with(&mut buf, prezero::Temperature::Cold).unwrap();
//!
//! // A latency bound: at most 1 MiB per step, a callback between steps.
//! let n = prezero::clear_bounded(&mut buf, 1 << 20, |_done| std::ops::ControlFlow::Continue(())).unwrap();
//! assert_eq!(n, buf.len());
//! ```
//!
//! The pieces, one module each: [`cpu`] (what the machine offers), [`clear`]
//! (the kernels and how they are chosen), [`profile`] (the calibration profile
//! file both choices can come from), [`region`] and [`prefault`] (mapping and
//! populating), [`pool`] (pre-zeroed chunks and their scrubber), [`template`]
//! (record arrays with streaming stores), [`numa`] and [`mm`] (the machine's
//! nodes and the kernel's memory state). The OS layer is the crate
//! `prezero_sys`, below this one.
//!
//! The modules are layers, each importing only those below it, and only what
//! its row names (`scripts/check-imports.py` checks every import, re-exports
//! followed to the module that defines the item, against this table):
//!
//! ```text
//! pool/, fuzzing.rs                   clear/ and below
//! clear/                              prefault.rs, numa/, profile/, cpu/, error.rs
//! prefault.rs                         region.rs, numa/, cpu/, error.rs
//! template/                           profile/, cpu/, error.rs
//! region.rs, numa/, hugetlb.rs        mm.rs, cpu/, error.rs
//! profile/                            cpu/, error.rs
//! cpu/                                size.rs, error.rs
//! mm.rs                               size.rs, error.rs
//! size.rs                             error.rs
//! error.rs, verify.rs                 nothing of the crate's
//! ```
//!
//! Beside it: `prezero-service` (`prezero serve` and its client), `prezero-capi`
//! (the C ABI, libprezero), `prezero-preload` and `prezero-cli`, which import
//! this crate and never the reverse. See `docs/ARCHITECTURE.md`.

#![warn(missing_docs)]

// The OS layer is the workspace's own crate; `sys::` names its calls here.
use prezero_sys as sys;

pub mod clear;
pub mod cpu;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod hugetlb;
#[cfg(any(test, feature = "interleavings"))]
#[doc(hidden)]
pub mod interleavings;
pub mod mm;
pub mod numa;
pub mod pool;
pub mod prefault;
pub mod profile;
pub mod region;
mod size;
pub mod template;
mod verify;

pub use clear::{
    active_size_classes, auto_kernel, clear, clear_bounded, clear_bounded_with, clear_near,
    clear_parallel, clear_parallel_on_nodes, clear_parallel_with, clear_raw, clear_raw_with,
    clear_with, forced_kernel, Kernel, SizeClass, SizeClasses, Strategy, Temperature, MAX_CLASSES,
};
pub use cpu::cpu;
pub use error::{Error, Result};
pub use hugetlb::HugetlbReservation;
pub use mm::memory;
pub use pool::{Chunk, FreeRunning, Pool, PoolBuilder, PoolStats, ScrubPriority};
pub use prefault::{prefault, prefault_on_nodes, prefault_raw};
pub use profile::{source as profile_source, PROFILE_FORMAT};
pub use region::{PageKind, Region};
pub use size::{fmt_size, human_size, parse_size, size_label};
pub use template::{
    active_template_choice, drain, stream_copy, stream_copy_nodrain, template_fill,
    template_fill_grouped, template_fill_words, template_fill_words_grouped, CopyKernel, Record,
    Streamer, TemplateChoice,
};
pub use verify::{first_nonzero, is_zero};
