//! The profile file's format: every field of `profile.json`, how it is read
//! and checked, and how it is written, in rows of names and numbers as the
//! file has them. What they mean is not this module's: the size classes are
//! `clear/classes.rs`'s, the template choice `template/choice.rs`'s (each
//! checks and converts its rows), and what calibrate measured beside them
//! `measured.rs`'s.

use std::path::Path;

use serde_json::Value;

use super::json::{as_count, count, object};
use super::measured::{figures_json, Measured, TEMPLATE_FIGURE_BY};
use crate::error::{Error, Result};

/// The profile file format this library reads and writes (`"format"` in the
/// file). Format 2 added `"cpu_id"`: format 1 matched on the brand string
/// alone, which a VM often reduces to "AMD EPYC" for Zen 3 and Zen 4 alike.
pub const PROFILE_FORMAT: u32 = 2;

/// A calibration profile as `prezero calibrate` stores it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileFile {
    /// `"format"`: must equal [`PROFILE_FORMAT`].
    pub format: u32,
    /// `"cpu_model"`: the CPU's name, for people.
    pub cpu_model: String,
    /// `"cpu_id"`: [`Cpu::identity`](crate::cpu::Cpu::identity) where it was
    /// measured (vendor, family, model, stepping or MIDR, and the features in
    /// force, so what a `PREZERO_CPU` mask hid); any other CPU, or this one
    /// under another mask, ignores the profile.
    pub cpu_id: String,
    /// `"date"`, as written.
    pub date: String,
    /// `"profile"`: the clearing kernels' size classes per temperature.
    pub classes: ClassRows,
    /// `"template"`: the template fills' store choice; profiles written
    /// before calibrate measured it have none.
    pub template: Option<TemplateRow>,
    /// Everything else calibrate recorded.
    pub measured: Measured,
}

/// `"profile"`: per temperature, the size classes in the file's order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClassRows {
    /// `"unknown"`
    pub unknown: Vec<ClassRow>,
    /// `"hot"`
    pub hot: Vec<ClassRow>,
    /// `"cold"`
    pub cold: Vec<ClassRow>,
}

/// One size class: `{"below", "kernel"}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassRow {
    /// `"below"`: sizes below this many bytes; `None` (`null`): every size.
    pub below: Option<usize>,
    /// `"kernel"`: a clearing kernel's name.
    pub kernel: String,
}

/// `"template"`: `{"stream", "temporal", "stream_from"}` (and the figures,
/// which [`Measured`] holds).
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateRow {
    /// `"stream"`: a template kernel's name, for large fills.
    pub stream: String,
    /// `"temporal"`: a template kernel's name, for fills below `stream_from`.
    pub temporal: String,
    /// `"stream_from"`: the size from which fills stream; `None` (`null`): never.
    pub stream_from: Option<usize>,
}

impl ClassRows {
    /// The three lists under the file's names for them, in the file's order.
    pub fn by_name(&self) -> [(&'static str, &[ClassRow]); 3] {
        [
            ("unknown", &self.unknown),
            ("hot", &self.hot),
            ("cold", &self.cold),
        ]
    }
}

impl ProfileFile {
    /// Reads and checks a profile file. The error says what is wrong, in words.
    pub fn read(path: &Path) -> Result<ProfileFile> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::invalid(format!("cannot read it: {e}")))?;
        ProfileFile::parse(&text)
    }

    /// Checks and reads the text of a profile file: its layout, not what the
    /// names in it mean.
    pub fn parse(text: &str) -> Result<ProfileFile> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| Error::invalid(format!("not valid JSON: {e}")))?;
        let field = |k: &str| {
            v.get(k)
                .ok_or_else(|| Error::invalid(format!("missing field \"{k}\"")))
        };
        let format = as_count(field("format")?)
            .ok_or_else(|| Error::invalid("\"format\" is not a whole number"))?;
        let format = u32::try_from(format).unwrap_or(u32::MAX);
        let text_of = |k: &str| -> Result<String> {
            Ok(field(k)?
                .as_str()
                .ok_or_else(|| Error::invalid(format!("\"{k}\" is not a string")))?
                .to_owned())
        };
        let cpu_model = text_of("cpu_model")?;
        let date = text_of("date")?;
        if format != PROFILE_FORMAT {
            // The rest may be laid out differently: do not read it.
            return Err(Error::invalid(format!(
                "it has format {format}, this library reads format {PROFILE_FORMAT}"
            )));
        }
        let cpu_id = text_of("cpu_id")?;
        let classes = read_classes(field("profile")?)?;
        let template = v.get("template").map(read_template).transpose()?;
        Ok(ProfileFile {
            format,
            cpu_model,
            cpu_id,
            date,
            classes,
            template,
            measured: Measured::read(&v),
        })
    }

    /// The file's text, as calibrate writes it: pretty JSON, keys in order,
    /// a final newline. A profile without a template choice has no
    /// `"template"` section (and so no template figures).
    pub fn to_json(&self) -> String {
        let classes = self.classes.by_name().map(|(name, rows)| {
            let list = rows.iter().map(|c| {
                object(vec![
                    ("below", bound_json(c.below)),
                    ("kernel", c.kernel.as_str().into()),
                ])
            });
            (name, Value::Array(list.collect()))
        });
        let mut members = vec![
            ("format", self.format.into()),
            ("cpu_model", self.cpu_model.as_str().into()),
            ("cpu_id", self.cpu_id.as_str().into()),
            ("date", self.date.as_str().into()),
            ("profile", object(classes.into())),
        ];
        if let Some(t) = &self.template {
            let section = vec![
                ("stream", t.stream.as_str().into()),
                ("temporal", t.temporal.as_str().into()),
                ("stream_from", bound_json(t.stream_from)),
                (
                    "figures",
                    figures_json(&self.measured.template_figures, TEMPLATE_FIGURE_BY),
                ),
            ];
            members.push(("template", object(section)));
        }
        members.extend(self.measured.members());
        // Writing a `Value` to a `String` cannot fail: its keys are strings.
        serde_json::to_string_pretty(&object(members)).expect("a JSON value") + "\n"
    }
}

/// A size bound: a byte count, or `null` for "no bound".
fn read_bound(v: Option<&Value>, missing: &str, not_a_count: &str) -> Result<Option<usize>> {
    match v {
        Some(Value::Null) => Ok(None),
        Some(b) => as_count(b)
            .map(Some)
            .ok_or_else(|| Error::invalid(not_a_count)),
        None => Err(Error::invalid(missing)),
    }
}

fn bound_json(below: Option<usize>) -> Value {
    below.map_or(Value::Null, count)
}

/// `"profile"`: per temperature, a list of `{"below", "kernel"}`.
fn read_classes(p: &Value) -> Result<ClassRows> {
    let classes = |name: &str| -> Result<Vec<ClassRow>> {
        let arr = p.get(name).and_then(Value::as_array).ok_or_else(|| {
            Error::invalid(format!("\"profile.{name}\" is missing or not a list"))
        })?;
        arr.iter()
            .map(|c| {
                let below = read_bound(
                    c.get("below"),
                    "a size class has no \"below\"",
                    "a \"below\" is not a byte count",
                )?;
                let kernel = c
                    .get("kernel")
                    .and_then(Value::as_str)
                    .ok_or_else(|| Error::invalid("a size class has no \"kernel\""))?
                    .to_owned();
                Ok(ClassRow { below, kernel })
            })
            .collect()
    };
    Ok(ClassRows {
        unknown: classes("unknown")?,
        hot: classes("hot")?,
        cold: classes("cold")?,
    })
}

/// `"template"`: `{"stream", "temporal", "stream_from"}` (and the figures,
/// which [`Measured`] reads).
fn read_template(v: &Value) -> Result<TemplateRow> {
    let kernel = |k: &str| -> Result<String> {
        Ok(v.get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| Error::invalid(format!("\"template.{k}\" is missing or not a string")))?
            .to_owned())
    };
    let (stream, temporal) = (kernel("stream")?, kernel("temporal")?);
    let stream_from = read_bound(
        v.get("stream_from"),
        "\"template.stream_from\" is missing",
        "\"template.stream_from\" is not a byte count",
    )?;
    Ok(TemplateRow {
        stream,
        temporal,
        stream_from,
    })
}

/// A profile file's text for the tests of this module and of the sections'
/// readers: `body` is its `"profile"` section.
#[cfg(test)]
pub(crate) fn test_file_text(format: u32, body: &str) -> String {
    let cpu = crate::cpu::cpu();
    format!(
        r#"{{"format": {format}, "cpu_model": "{}", "cpu_id": "{}", "date": "2026-11-22", "profile": {body}}}"#,
        cpu.model_name.replace('"', ""),
        cpu.identity()
    )
}

/// A good `"profile"` section for [`test_file_text`].
#[cfg(test)]
pub(crate) const TEST_CLASSES: &str = r#"{"unknown": [{"below": 4096, "kernel": "portable"}, {"below": null, "kernel": "portable"}],
        "hot": [{"below": null, "kernel": "portable"}], "cold": [{"below": null, "kernel": "movnti"}]}"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_files_and_directories_are_errors_not_panics() {
        let dir = std::env::temp_dir();
        assert!(ProfileFile::read(&dir)
            .unwrap_err()
            .to_string()
            .contains("cannot read"));
        assert!(ProfileFile::read(Path::new("/proc/self/mem")).is_err());
        assert!(ProfileFile::read(Path::new("/nonexistent/profile.json")).is_err());
    }

    /// The profiles calibrate wrote with serde_json, in `machines/`, read and
    /// written again: the same bytes, so the format (2) is unchanged.
    #[test]
    fn recorded_profiles_are_written_back_byte_for_byte() {
        let machines = Path::new(env!("CARGO_MANIFEST_DIR")).join("../machines");
        let mut seen = 0;
        for dir in std::fs::read_dir(&machines).unwrap().flatten() {
            let path = dir.path().join("profile.json");
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            match ProfileFile::parse(&text) {
                Ok(f) => {
                    assert!(!f.measured.figures.is_empty(), "{}", path.display());
                    let written = f.to_json();
                    let first_difference = written
                        .lines()
                        .zip(text.lines())
                        .enumerate()
                        .find(|(_, (w, t))| w != t);
                    assert!(
                        written == text,
                        "{}: line {first_difference:?}",
                        path.display()
                    );
                    seen += 1;
                }
                // Format 1, before cpu_id: refused as it always was.
                Err(e) => assert!(e.to_string().contains("format 1"), "{e}"),
            }
        }
        assert!(seen >= 2, "{seen} format-2 profiles under machines/");
    }

    /// A figure past f64's range was read as infinity and written back as
    /// `null`, so the profile read back lost the figure: refused instead.
    #[test]
    fn a_number_past_f64_is_refused_not_written_back_as_null() {
        let text = test_file_text(PROFILE_FORMAT, TEST_CLASSES).replace(
            "\"date\"",
            r#""figures": [{"mode": "cold", "size": 4096, "method": "movnti", "gbps_median": 1e400, "stdev_pct": 2.0}], "date""#,
        );
        let e = ProfileFile::parse(&text).unwrap_err();
        assert!(e.to_string().contains("number out of range"), "{e}");
    }

    #[test]
    fn what_calibrate_measured_is_optional_and_read_as_far_as_it_can_be() {
        let bare = ProfileFile::parse(&test_file_text(PROFILE_FORMAT, TEST_CLASSES)).unwrap();
        assert_eq!(bare.measured, Measured::default());
        let text = test_file_text(PROFILE_FORMAT, TEST_CLASSES).replace(
            "\"date\"",
            r#""figures": [{"mode": "cold", "size": 4096, "method": "movnti", "gbps_median": 1.5, "stdev_pct": 2.0},
                {"mode": "cold"}], "elision_knee": {"rep-stosb": null, "avx2": 33554432, "x": "y"}, "date""#,
        );
        let f = ProfileFile::parse(&text).unwrap();
        assert_eq!(f.measured.figures.len(), 1);
        assert_eq!(f.measured.figures[0].size, 4096);
        assert_eq!(f.measured.elision_knee.len(), 2);
        assert_eq!(f.measured.elision_knee["avx2"], Some(32 << 20));
        // Written and read again, nothing is lost.
        assert_eq!(ProfileFile::parse(&f.to_json()).unwrap(), f);
    }
}
