//! Each bench's rows and text, and the errors it explains.

use super::*;

#[test]
fn bench_clear_json_lines() {
    let (ok, out, err) = prezero(&[
        "bench",
        "clear",
        "--mode",
        "hot",
        "--sizes",
        "4K,64K",
        "--strategies",
        "auto,memset,page-at-a-time",
        "--reps",
        "2",
        "--json",
    ]);
    assert!(ok, "{err}");
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 6);
    for r in rows {
        assert_eq!(r["bench"], "clear");
        assert_eq!(r["mode"], "hot");
        assert!(r["gbps"].as_f64().unwrap() > 0.0);
        assert!(r["stdev_pct"].as_f64().is_some());
    }
}

#[test]
fn bench_clear_rejects_unknown_strategies_and_sizes() {
    let (ok, _, err) = prezero(&["bench", "clear", "--strategies", "nonsense"]);
    assert!(!ok && err.contains("unknown or unavailable strategy"));
    let (ok, _, err) = prezero(&["bench", "clear", "--sizes", "4X"]);
    assert!(!ok && err.contains("unknown unit"));
}

#[test]
fn bench_mmap_json_and_perf_text() {
    let (ok, out, err) = prezero(&[
        "bench", "mmap", "-p", "4KB,thp", "-s", "8M", "-l", "2", "--json",
    ]);
    assert!(ok, "{err}");
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 8, "4 functions x 2 page kinds");
    assert!(rows.iter().any(|r| r["function"] == "pool"));
    assert!(rows
        .iter()
        .all(|r| r["bench"] == "mmap" && r["host"] == "warm" && r["gbps"].as_f64().unwrap() > 0.0));
    let (ok, out, _) = prezero(&["bench", "mmap", "-f", "demand", "-s", "4M", "-l", "1"]);
    assert!(ok);
    assert!(out.contains("# function 'demand'") && out.contains("GB/sec +-"));
}

#[test]
fn bench_mmap_hugetlb_shortage_is_explained() {
    let Some(pool) = prezero::mm::hugetlb_pool(1 << 30) else {
        prezero_testkit::skip("hugetlb", "no 1 GiB hugetlb pool");
        return;
    };
    let size = format!("{}G", pool.free + 1);
    let (ok, _, err) = prezero(&["bench", "mmap", "-p", "1GB", "-s", &size, "-l", "1"]);
    assert!(!ok);
    assert!(
        err.contains("--reserve") && err.contains("nr_hugepages"),
        "{err}"
    );
}

#[test]
fn bench_faults_prints_both_tables() {
    let (ok, out, err) = prezero(&["bench", "faults", "-s", "8M", "-r", "1", "-p", "4KB"]);
    assert!(ok, "{err}");
    assert!(out.contains("Gb Rep Threads CLine   User    System   Wall  flt/cpu/s  fault/wsec"));
    assert!(out.contains("kernel (") && out.contains("prezero ("));
}

#[test]
fn bench_pool_json_rows() {
    let (ok, out, err) = prezero(&[
        "bench",
        "pool",
        "--cases",
        "handout,sustained",
        "--samples",
        "8",
        "--lines",
        "1",
        "--inflight",
        "1,4",
        "--volume",
        "32M",
        "--host-cold-wait",
        "0",
        "--json",
    ]);
    assert!(ok, "{err}");
    let rows = json_lines(&out);
    let handout: Vec<_> = rows.iter().filter(|r| r["case"] == "handout").collect();
    assert!(handout
        .iter()
        .any(|r| r["source"] == "pool-warm" && r["p99_us"].as_f64().unwrap() > 0.0));
    let sustained: Vec<_> = rows.iter().filter(|r| r["case"] == "sustained").collect();
    for src in ["pool-scrub", "pool-noscrub", "mmap-thp", "calloc"] {
        assert_eq!(
            sustained.iter().filter(|r| r["source"] == src).count(),
            2,
            "{src}"
        );
    }
    assert!(sustained
        .iter()
        .filter(|r| r["source"] == "mmap-thp")
        .all(|r| r["host"] == "warm"));
    let (ok, _, err) = prezero(&["bench", "pool", "--cases", "nonsense"]);
    assert!(!ok && err.contains("unknown case"));
}

#[test]
fn bench_template_json_rows() {
    let (ok, out, err) = prezero(&[
        "bench",
        "template",
        "--records",
        "5000",
        "--reps",
        "2",
        "--json",
    ]);
    assert!(ok, "{err}");
    let rows = json_lines(&out);
    // The C reference is built wherever gcc was (x86_64); elsewhere the bench says why not.
    let c_built = !err.contains("no c-reference row");
    let methods = [
        "per-field",
        "template-copy",
        "template-stream",
        "template-words",
        "c-reference",
        "ceiling",
    ];
    assert_eq!(rows.len(), 2 * (5 + usize::from(c_built)), "{out}");
    for m in methods {
        let want = if m == "c-reference" && !c_built { 0 } else { 2 };
        assert_eq!(
            rows.iter().filter(|r| r["method"] == m).count(),
            want,
            "{m}"
        );
    }
    assert!(rows
        .iter()
        .all(|r| r["records"] == 5000 && r["ms"].as_f64().unwrap() > 0.0));
    // The ceiling is the fastest streaming kernel, named, with every candidate's time.
    for r in rows.iter().filter(|r| r["method"] == "ceiling") {
        let k = r["kernel"].as_str().unwrap();
        let cands = r["candidates_median_ms"].as_object().unwrap();
        assert!(cands.contains_key(k), "{r}");
        let best = cands
            .values()
            .map(|v| v.as_f64().unwrap())
            .fold(f64::MAX, f64::min);
        assert_eq!(r["median_ms"].as_f64().unwrap(), best, "{r}");
        assert!(cands
            .keys()
            .all(|c| c.parse::<prezero::CopyKernel>().unwrap().is_streaming()));
    }
    // Filters, and the store study.
    let (ok, out, err) = prezero(&[
        "bench",
        "template",
        "--records",
        "3000",
        "--reps",
        "1",
        "--json",
        "--layout",
        "4k",
        "--method",
        "template-words",
    ]);
    assert!(ok, "{err}");
    let rows = json_lines(&out);
    assert!(rows.len() == 1 && rows[0]["method"] == "template-words" && rows[0]["layout"] == "4k");
    let (ok, _, err) = prezero(&["bench", "template", "--method", "nonsense"]);
    assert!(!ok && err.contains("unknown layout or method"), "{err}");
    let (ok, out, err) = prezero(&[
        "bench", "template", "--stores", "--sizes", "64K,1M", "--reps", "1", "--json",
    ]);
    assert!(ok, "{err}");
    let rows = json_lines(&out);
    let kernels = prezero::CopyKernel::ALL
        .iter()
        .filter(|k| k.is_available())
        .count();
    assert_eq!(
        rows.len(),
        2 * 2 * kernels,
        "hot and cold x 2 sizes x kernels"
    );
    assert!(rows
        .iter()
        .all(|r| r["bench"] == "template-stores" && r["gbps"].as_f64().unwrap() > 0.0));
}
