//! The template fills' part of a profile: [`TemplateChoice`], streaming or
//! temporal stores by size, what it means and the built-in one with the
//! figures behind it. A profile file's `"template"` section is read and
//! written as a row in `profile/file.rs`; [`tuning`] is where the template
//! fills take it, checked, and `in_force.rs` makes the process's choice.

use std::sync::OnceLock;

use super::CopyKernel;
use crate::cpu::Cpu;
use crate::error::{Error, Result};
use crate::profile::{self, TemplateRow};

/// The template choice a profile records (`"template"` in the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplateChoice {
    /// `"stream"`: the streaming kernel for large fills.
    pub stream: CopyKernel,
    /// `"temporal"`: the kernel for fills below `stream_from`.
    pub temporal: CopyKernel,
    /// `"stream_from"`: fills of at least this many bytes stream (`null`:
    /// never, stored as `usize::MAX`).
    pub stream_from: usize,
}

impl TemplateChoice {
    /// The built-in choice for `cpu`, checked against every machine recorded
    /// in `machines/` (the `defaults` test): the widest streaming and temporal
    /// kernels, streaming from where a hot fill stops fitting in cache
    /// ([`Cpu::hot_capacity`]; on Intel the L2, see below).
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
    pub fn builtin(cpu: &Cpu) -> TemplateChoice {
        let first = |streaming: bool| {
            CopyKernel::ALL
                .into_iter()
                .filter(|k| k.is_streaming() == streaming)
                .find(|k| k.is_available_with(&cpu.features))
                .unwrap_or(CopyKernel::Portable)
        };
        TemplateChoice {
            stream: first(true),
            temporal: first(false),
            stream_from: if cold_stores_read_dearly(cpu) {
                ZEN1_STREAM_FROM
            } else if cpu.vendor != "GenuineIntel" {
                cpu.hot_capacity()
            } else {
                // Intel (a Xeon with AVX-512 and AMX under KVM,
                // `machines/intel-xeon-avx512-amx`): a temporal fill of cold
                // memory pays the read-for-ownership at every size, and a hot
                // one runs at cache speed only while it fits the L2. GB/s,
                // avx512 / avx512-nt: cold 8.4-9.4 / 18-25 (2.2-2.6x); hot
                // 58-69 / 19-25 up to 1 MiB (2.5-3.7x), 27-28 / 24.6 at 4 and
                // 16 MiB (1.14x), 10.8 / 24.3 at 64 MiB. The worst cases tie
                // near 2.5x up to 1 MiB; from 4 MiB streaming's is 1.14x and
                // temporal's 2.6x. So: from the L2's size, not from a quarter
                // of the LLC (the guest is told 480 MiB). An x86 store's
                // read-for-ownership: not assumed of other vendors' cores.
                cpu.l2()
            },
        }
    }

    /// Checks the kernels' kinds: `stream` streams (or is `portable`, what a
    /// CPU without streaming stores, or masked to none, calibrates to for
    /// large fills) and `temporal` does not.
    pub fn validate(&self) -> Result<()> {
        if !(self.stream.is_streaming() || self.stream == CopyKernel::Portable)
            || self.temporal.is_streaming()
        {
            return Err(Error::invalid(
                "\"template.stream\" must name a streaming kernel (or portable) and \"template.temporal\" a temporal one",
            ));
        }
        Ok(())
    }
}

impl TemplateChoice {
    /// The choice a profile file's `"template"` row names, checked: both
    /// kernels known and of the kind [`validate`](Self::validate) requires.
    pub fn from_row(row: &TemplateRow) -> Result<TemplateChoice> {
        let t = TemplateChoice {
            stream: row.stream.parse()?,
            temporal: row.temporal.parse()?,
            stream_from: row.stream_from.unwrap_or(usize::MAX),
        };
        t.validate()?;
        Ok(t)
    }

    /// The row a profile file keeps for this choice (never streaming as `null`).
    pub fn to_row(&self) -> TemplateRow {
        TemplateRow {
            stream: self.stream.name().into(),
            temporal: self.temporal.name().into(),
            stream_from: Some(self.stream_from).filter(|&b| b != usize::MAX),
        }
    }
}

/// The template choice of the profile file this process follows, checked
/// once: the one point where the template fills take their tuning from the
/// file. `None`: no file with one is followed, or it cannot be used (said
/// once on stderr).
pub(crate) fn tuning() -> Option<TemplateChoice> {
    static TUNING: OnceLock<Option<TemplateChoice>> = OnceLock::new();
    *TUNING.get_or_init(|| {
        let row = profile::loaded().template.as_ref()?;
        TemplateChoice::from_row(row)
            .map_err(|e| profile::refuse_section("template", e))
            .ok()
    })
}

/// AMD family 17h (Zen 1 recorded; Zen+ and Zen 2 share the family and are
/// assumed alike): storing through the caches into cold memory costs far more
/// than the at most 1.05x that [`TemplateChoice::builtin`]'s rule relies on. Zen 1, 16 KiB to 4 MiB records (GB/s, avx2 /
/// avx2-nt): cold 7.0 / 10.7-12.2 (1.5-1.8x), hot 12.8-14.0 / 11.4-12.5
/// (1.1-1.2x): the smaller worst case is streaming from 16 KiB.
fn cold_stores_read_dearly(cpu: &Cpu) -> bool {
    cpu.vendor == "AuthenticAMD" && cpu.family == 0x17
}

/// Where such a CPU's fills start streaming (where calibrate put it on Zen 1).
const ZEN1_STREAM_FROM: usize = 16 << 10;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::cpu;
    use crate::profile::{test_file_text, ProfileFile, PROFILE_FORMAT, TEST_CLASSES};
    use crate::template::Streamer;

    /// A profile file's template choice as the process takes it: the file
    /// (with `section` as its `"template"`) read, then its row converted.
    fn read_template(section: &str) -> Result<TemplateChoice> {
        let text = test_file_text(PROFILE_FORMAT, TEST_CLASSES)
            .replace("\"date\"", &format!("\"template\": {section}, \"date\""));
        let f = ProfileFile::parse(&text)?;
        TemplateChoice::from_row(f.template.as_ref().expect("a template section"))
    }

    #[test]
    fn sections_parse_and_refuse_what_is_wrong() {
        let p = read_template;
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
        let row = TemplateChoice::builtin(cpu()).to_row();
        assert_eq!(TemplateChoice::from_row(&row).unwrap().to_row(), row);
    }

    #[test]
    fn the_builtin_choice_runs_here() {
        let b = TemplateChoice::builtin(cpu());
        assert!(b.stream.is_streaming() || b.stream == CopyKernel::Portable);
        assert!(Streamer::new(b.temporal).is_ok());
        assert!(b.stream_from > 0);
    }
}
