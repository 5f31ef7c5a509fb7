//! A machine profile obeyed or refused, and `calibrate` writing one.

use super::*;

fn prezero_env(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_prezero"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_synthetic_profile_is_obeyed_and_bad_ones_are_refused_once() {
    let model = prezero::cpu().model_name.clone();
    let identity = prezero::cpu().identity();
    let good = serde_json::json!({
        "format": prezero::PROFILE_FORMAT, "cpu_model": model, "cpu_id": identity,
        "date": "2026-11-22T00:00:00Z",
        "profile": {
            "unknown": [{"below": 100000, "kernel": "portable"}, {"below": null, "kernel": "movnti"}],
            "hot": [{"below": null, "kernel": "portable"}],
            "cold": [{"below": 5000, "kernel": "portable"}, {"below": null, "kernel": "movnti"}],
        },
        "template": {"stream": "movnti", "temporal": "portable", "stream_from": 12345},
    });
    let dir = tmp();
    let path = dir.join("good.json");
    std::fs::write(&path, good.to_string()).unwrap();
    let p = path.to_str().unwrap();
    let (ok, out, err) = prezero_env(&["info", "--json"], &[("PREZERO_PROFILE", p)]);
    assert!(ok && err.is_empty(), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["profile"]["source"].as_str().unwrap().contains(p));
    if cfg!(target_arch = "x86_64") {
        let auto = v["auto"].as_array().unwrap();
        assert_eq!(auto[0]["unknown"], "portable"); // 4K < 100000
        assert_eq!(auto[2]["unknown"], "movnti"); // 1M
        assert_eq!(auto[0]["cold"], "portable"); // 4K < 5000
        assert_eq!(auto[1]["cold"], "movnti");
        assert_eq!(v["template"]["stream"], "movnti");
    }
    assert_eq!(v["template"]["source"], "profile");
    assert_eq!(v["template"]["temporal"], "portable");
    assert_eq!(v["template"]["stream_from"], 12345);

    let mut cases = vec![
        (
            "wrong-version.json",
            serde_json::json!({"format": 999, "cpu_model": model, "date": "d", "profile": {}})
                .to_string(),
            "format 999",
            None,
        ),
        (
            "other-cpu.json",
            good.to_string().replace(&identity, "Some Other CPU"),
            "measured on",
            None,
        ),
        (
            "missing.json",
            serde_json::json!({"format": 1, "cpu_model": model}).to_string(),
            "missing field",
            None,
        ),
        (
            "bad-template.json",
            good.to_string()
                .replace("\"temporal\":\"portable\"", "\"temporal\":\"movnti\""),
            "template.temporal",
            Some("template"),
        ),
        (
            "bad-classes.json",
            good.to_string()
                .replace("\"kernel\":\"portable\"", "\"kernel\":\"warp-drive\""),
            "unknown kernel 'warp-drive'",
            Some("profile"),
        ),
        (
            "truncated.json",
            good.to_string()[..40].to_string(),
            "not valid JSON",
            None,
        ),
    ];
    let files = tmp();
    let dir = files.join("a-directory");
    std::fs::create_dir_all(&dir).unwrap();
    cases.push(("", String::new(), "cannot read", None));
    // `None`: the file as a whole is refused; a section's name: that section
    // alone, its choice built in, the rest of the file followed.
    for (name, text, why, section) in cases {
        let path = if name.is_empty() {
            dir.clone()
        } else {
            files.join(name)
        };
        if !name.is_empty() {
            std::fs::write(&path, text).unwrap();
        }
        let (ok, out, err) = prezero_env(
            &["info", "--json"],
            &[("PREZERO_PROFILE", path.to_str().unwrap())],
        );
        assert!(ok, "{name}: {err}");
        assert_eq!(
            err.matches("prezero: ignoring profile").count(),
            1,
            "{name}: one warning expected: {err}"
        );
        assert!(err.contains(why), "{name}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let source = v["profile"]["source"].as_str().unwrap();
        let Some(section) = section else {
            assert!(source.starts_with("built-in defaults"), "{name}: {source}");
            continue;
        };
        assert!(
            source.contains(name),
            "{name}: the file is followed: {source}"
        );
        assert!(
            err.contains(&format!("\"{section}\" section")),
            "{name}: {err}"
        );
        let template = if section == "template" {
            "built-in"
        } else {
            "profile"
        };
        assert_eq!(v["template"]["source"], template, "{name}");
        if section == "profile" && cfg!(target_arch = "x86_64") {
            // The built-in classes stream the largest hot clear; the file's
            // are portable at every hot size.
            let largest = v["auto"].as_array().unwrap().last().unwrap();
            assert_ne!(largest["hot"], "portable", "{name}");
        }
    }
    let (ok, out, _) = prezero_env(&["info", "--json"], &[("PREZERO_PROFILE", "none")]);
    assert!(ok && out.contains("PREZERO_PROFILE=none"));
}

#[test]
fn calibrate_writes_a_profile_the_library_loads() {
    let dir = tmp();
    let path = dir.join("calibrated.json");
    let p = path.to_str().unwrap();
    let (ok, out, err) = prezero(&[
        "calibrate",
        "--out",
        p,
        "--sizes",
        "4K,64K",
        "--reps",
        "1",
        "--large",
        "16M",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("wrote"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(v["format"], prezero::PROFILE_FORMAT);
    assert!(v["figures"].as_array().unwrap().len() > 4);
    let t = &v["template"];
    let kernel = |k: &str| {
        t[k].as_str()
            .unwrap()
            .parse::<prezero::CopyKernel>()
            .unwrap()
    };
    assert!(kernel("stream").is_streaming() && !kernel("temporal").is_streaming());
    assert!(t["stream_from"].is_null() || t["stream_from"].as_u64().unwrap() > 0);
    // The store study is bounded by --large.
    assert!(t["figures"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["size"].as_u64().unwrap() <= 16 << 20));
    let (ok, out, err) = prezero_env(&["info", "--json"], &[("PREZERO_PROFILE", p)]);
    assert!(ok && err.is_empty(), "{err}");
    assert!(out.contains("calibrated"));
    let info: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(info["template"]["source"], "profile");
    assert_eq!(info["template"]["stream"], t["stream"]);
    let (ok, out, err) = prezero(&[
        "calibrate",
        "--check",
        "--out",
        p,
        "--sizes",
        "4K,64K",
        "--reps",
        "1",
        // As above: the default large extent touches 1 GiB and 4 GiB regions
        // (half a minute of host faults on a VM).
        "--large",
        "16M",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("figures are off by more than 10%"));
}
