//! Which template kernels the free functions use in this process: a streaming
//! one for large fills, a temporal one below `stream_from` bytes (the rule of
//! Linux's prezeroing work: memory about to be touched is best written hot, memory not in cache
//! streamed). `prezero calibrate` measures all three and stores them in the
//! profile's `"template"` section; without one, the built-in choice holds.

use std::sync::OnceLock;

use super::{CopyKernel, Streamer, TemplateChoice};
use crate::cpu::cpu;

/// The template kernels in force in this process.
#[derive(Debug, Clone, Copy)]
pub(super) struct InForce {
    pub stream: Streamer,
    pub temporal: Streamer,
    pub stream_from: usize,
}

pub(super) fn in_force() -> &'static InForce {
    static IN_FORCE: OnceLock<InForce> = OnceLock::new();
    IN_FORCE.get_or_init(|| {
        let builtin = TemplateChoice::builtin(cpu());
        let p = active_template_choice().unwrap_or(builtin);
        // A profile naming a kernel this CPU lacks cannot come from this CPU's
        // calibration (the identity matched): fall back kernel by kernel.
        let get = |k: CopyKernel, or: CopyKernel| {
            Streamer::new(k)
                .or_else(|_| Streamer::new(or))
                .expect("built-in kernels are available")
        };
        InForce {
            stream: get(p.stream, builtin.stream),
            temporal: get(p.temporal, builtin.temporal),
            stream_from: p.stream_from,
        }
    })
}

// The kernels in force, as `Streamer`s: here, so that `streamer.rs` (what a
// kernel is) never reads which one this process chose.
impl Streamer {
    /// The streaming kernel the template functions use for large fills: the
    /// profile's choice (`prezero calibrate`) or the built-in one.
    pub fn auto() -> Streamer {
        in_force().stream
    }

    /// The temporal kernel the template functions use for fills smaller than
    /// [`stream_from`](super::stream_from).
    pub fn auto_temporal() -> Streamer {
        in_force().temporal
    }

    /// The kernel the template functions use for a fill of `bytes` bytes:
    /// temporal below [`stream_from`](super::stream_from), streaming from it.
    pub fn for_bytes(bytes: usize) -> Streamer {
        let c = in_force();
        if bytes >= c.stream_from {
            c.stream
        } else {
            c.temporal
        }
    }
}

/// Fills of at least this many bytes stream; smaller ones store through the caches.
pub fn stream_from() -> usize {
    in_force().stream_from
}

/// The template choice of the profile file this process follows, if it has
/// one (the template functions use the built-in choice otherwise).
pub fn active_template_choice() -> Option<TemplateChoice> {
    super::choice::tuning()
}
