//! Which template kernels the free functions use: a streaming one for large
//! fills, a temporal one below `stream_from` bytes (seed 003's rule: memory
//! about to be touched is best written hot, memory not in cache streamed).
//! `prezero calibrate` measures all three and stores them in the profile's
//! `"template"` section; without one, the built-in choice holds.

use std::sync::OnceLock;

use super::{CopyKernel, Streamer};
use crate::cpu::{cpu, Cpu};
use crate::error::{Error, Result};
use crate::json::Json;

/// The template choice a profile records (`"template"` in the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplateProfile {
    /// `"stream"`: the streaming kernel for large fills.
    pub stream: CopyKernel,
    /// `"temporal"`: the kernel for fills below `stream_from`.
    pub temporal: CopyKernel,
    /// `"stream_from"`: fills of at least this many bytes stream (`null`:
    /// never, stored as `usize::MAX`).
    pub stream_from: usize,
}

impl TemplateProfile {
    /// The built-in choice for `cpu`, checked against every machine recorded
    /// in `machines/` (the `defaults` test): the widest streaming and temporal
    /// kernels, streaming from where a hot fill stops fitting in cache
    /// ([`Cpu::hot_capacity`]: the LLC on AMD, a quarter of it elsewhere).
    ///
    /// A fill does not say whether its destination is in cache, so the choice
    /// is the one whose worse case, hot or cold, loses least. Zen 4 under KVM,
    /// `bench template --stores` (`machines/amd-zen4-avx512-clzero-2`), GB/s,
    /// streaming / temporal (AVX-512): hot 16 KiB-16 MiB 23-27 / 48-56, cold
    /// 25-27 / 24-26: storing through the caches costs at most 1.05x on cold
    /// memory and streaming 2x on hot, so temporal up to the cache size. From
    /// 64 MiB hot and cold both stream at 26-27 while temporal stores fall to
    /// 24-26 and would flush the caller's working set. At the DRAM limit all vector widths tie (the `bench
    /// template` ceiling candidates are within 5%); the widest costs the fewest
    /// instructions per line.
    pub fn builtin(cpu: &Cpu) -> TemplateProfile {
        let first = |streaming: bool| {
            CopyKernel::ALL
                .into_iter()
                .filter(|k| k.is_streaming() == streaming)
                .find(|k| k.is_available_with(&cpu.features))
                .unwrap_or(CopyKernel::Portable)
        };
        TemplateProfile {
            stream: first(true),
            temporal: first(false),
            stream_from: if cold_stores_read_dearly(cpu) {
                ZEN1_STREAM_FROM
            } else {
                cpu.hot_capacity()
            },
        }
    }

    /// Reads a profile's `"template"` section.
    pub(crate) fn from_json(v: &Json) -> Result<TemplateProfile> {
        let kernel = |k: &str| -> Result<CopyKernel> {
            v.get(k)
                .and_then(Json::as_str)
                .ok_or_else(|| {
                    Error::invalid(format!("\"template.{k}\" is missing or not a string"))
                })?
                .parse()
        };
        let (stream, temporal) = (kernel("stream")?, kernel("temporal")?);
        // `portable` streams nothing, but is what a CPU without streaming
        // stores (or masked to none) calibrates to for large fills.
        if !(stream.is_streaming() || stream == CopyKernel::Portable) || temporal.is_streaming() {
            return Err(Error::invalid(
                "\"template.stream\" must name a streaming kernel (or portable) and \"template.temporal\" a temporal one",
            ));
        }
        let stream_from = match v.get("stream_from") {
            Some(Json::Null) => usize::MAX,
            Some(b) => b
                .as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                .ok_or_else(|| Error::invalid("\"template.stream_from\" is not a byte count"))?
                as usize,
            None => return Err(Error::invalid("\"template.stream_from\" is missing")),
        };
        Ok(TemplateProfile {
            stream,
            temporal,
            stream_from,
        })
    }
}

/// The template kernels in force in this process.
#[derive(Debug, Clone, Copy)]
pub(super) struct Choice {
    pub stream: Streamer,
    pub temporal: Streamer,
    pub stream_from: usize,
}

pub(super) fn choice() -> &'static Choice {
    static CHOICE: OnceLock<Choice> = OnceLock::new();
    CHOICE.get_or_init(|| {
        let builtin = TemplateProfile::builtin(cpu());
        let p = crate::clear::active_template_profile().unwrap_or(builtin);
        // A profile naming a kernel this CPU lacks cannot come from this CPU's
        // calibration (the identity matched): fall back kernel by kernel.
        let get = |k: CopyKernel, or: CopyKernel| {
            Streamer::new(k)
                .or_else(|_| Streamer::new(or))
                .expect("built-in kernels are available")
        };
        Choice {
            stream: get(p.stream, builtin.stream),
            temporal: get(p.temporal, builtin.temporal),
            stream_from: p.stream_from,
        }
    })
}

/// AMD family 17h (Zen 1 recorded; Zen+ and Zen 2 share the family and are
/// assumed alike): storing through the caches into cold memory costs far more
/// than the at most 1.05x that [`TemplateProfile::builtin`]'s rule relies on. Zen 1, 16 KiB to 4 MiB records (GB/s, avx2 /
/// avx2-nt): cold 7.0 / 10.7-12.2 (1.5-1.8x), hot 12.8-14.0 / 11.4-12.5
/// (1.1-1.2x): the smaller worst case is streaming from 16 KiB.
fn cold_stores_read_dearly(cpu: &Cpu) -> bool {
    cpu.vendor == "AuthenticAMD" && cpu.family == 0x17
}

/// Where such a CPU's fills start streaming (where calibrate put it on Zen 1).
const ZEN1_STREAM_FROM: usize = 16 << 10;

/// Fills of at least this many bytes stream; smaller ones store through the caches.
pub fn stream_from() -> usize {
    choice().stream_from
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_parse_and_refuse_what_is_wrong() {
        let p = |s: &str| TemplateProfile::from_json(&Json::parse(s).unwrap());
        let ok = p(r#"{"stream": "movnti", "temporal": "portable", "stream_from": 4096}"#).unwrap();
        assert_eq!(ok.stream, CopyKernel::Movnti);
        assert_eq!(ok.stream_from, 4096);
        let never = p(r#"{"stream": "movnti", "temporal": "portable", "stream_from": null}"#);
        assert_eq!(never.unwrap().stream_from, usize::MAX);
        let none = p(r#"{"stream": "portable", "temporal": "portable", "stream_from": 1}"#);
        assert_eq!(
            none.unwrap().stream,
            CopyKernel::Portable,
            "a CPU with no streaming store"
        );
        for bad in [
            r#"{"stream": "avx2", "temporal": "portable", "stream_from": 1}"#,
            r#"{"stream": "movnti", "temporal": "movnti", "stream_from": 1}"#,
            r#"{"stream": "warp", "temporal": "portable", "stream_from": 1}"#,
            r#"{"stream": "movnti", "temporal": "portable", "stream_from": -1}"#,
            r#"{"stream": "movnti", "temporal": "portable"}"#,
            r#"{"temporal": "portable", "stream_from": 1}"#,
        ] {
            assert!(p(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_builtin_choice_runs_here() {
        let b = TemplateProfile::builtin(cpu());
        assert!(b.stream.is_streaming() || b.stream == CopyKernel::Portable);
        assert!(Streamer::new(b.temporal).is_ok());
        assert!(b.stream_from > 0);
    }
}
