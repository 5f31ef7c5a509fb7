//! Every recorded row reads as its kind and writes back as it was recorded:
//! the types hold every field the benches wrote, under the same names.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::*;

/// The report's fixture and every bench recording in `machines/`.
fn recordings() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("tests/fixtures/bench-all.jsonl")];
    for machine in std::fs::read_dir(root.join("../machines")).unwrap() {
        let machine = machine.unwrap().path();
        if !machine.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(machine).unwrap() {
            let f = f.unwrap().path();
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with("bench-") && name.ends_with(".jsonl") {
                files.push(f);
            }
        }
    }
    files
}

#[test]
fn every_recorded_row_reads_as_its_kind_and_writes_back_unchanged() {
    let mut read = 0;
    for file in recordings() {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines().filter(|l| l.starts_with('{')) {
            let v: Value = serde_json::from_str(line).unwrap();
            if v["bench"] == "info" {
                continue;
            }
            let row = if v["bench"] == "template-stores" {
                TemplateStores::deserialize(&v).map(Row::TemplateStores)
            } else {
                Row::deserialize(&v)
            };
            let row = row.unwrap_or_else(|e| panic!("{}: {e}: {line}", file.display()));
            assert!(!matches!(row, Row::Other), "{}: {line}", file.display());
            assert_eq!(row.to_value(), v, "{}", file.display());
            read += 1;
        }
    }
    assert!(read > 100, "{read} rows");
}

#[test]
fn bench_all_steps_say_how_they_ended() {
    let step = |status| Step {
        step: "mmap".into(),
        command: "prezero bench mmap --json".into(),
        rows: 0,
        not_measured: Vec::new(),
        status,
    };
    let run = Row::All(AllRun {
        scale: "smoke".into(),
        steps: vec![
            step(Status::Ok),
            step(Status::Skipped {
                reason: "needs --reserve".into(),
            }),
            step(Status::Failed {
                reason: "no pages".into(),
                stderr_tail: vec![],
            }),
        ],
    });
    let v = run.to_value();
    assert_eq!(
        v.to_string(),
        r#"{"bench":"all","scale":"smoke","steps":[{"command":"prezero bench mmap --json","rows":0,"status":"ok","step":"mmap"},{"command":"prezero bench mmap --json","reason":"needs --reserve","rows":0,"status":"skipped","step":"mmap"},{"command":"prezero bench mmap --json","reason":"no pages","rows":0,"status":"failed","stderr_tail":[],"step":"mmap"}]}"#
    );
    assert_eq!(Row::deserialize(&v).unwrap().to_value(), v);
}

#[test]
fn the_store_study_rows_and_unknown_benches_read_as_other() {
    for v in [
        serde_json::json!({"bench": "template-stores", "size": 4096}),
        serde_json::json!({"bench": "info", "cpu": {}}),
    ] {
        assert!(matches!(Row::deserialize(&v), Ok(Row::Other)), "{v}");
    }
}
