//! What the daemon reports: pools by shape in STATS, and the metrics file.

use super::*;
use prezero_testkit::TempDir;

#[test]
fn pools_by_shape_give_exact_fits_first_then_the_fewest_segments_under_concurrency() {
    // One pool of 16 MiB segments (a "VM" of 16 MiB gets one file) and one of 4 MiB.
    let pools = [
        "target=32M,cap=32M,segment=16M",
        "target=16M,cap=16M,segment=4M",
    ];
    let Some(d) = Daemon::start_pools(PageKind::Huge2M, &pools, &[]) else {
        return;
    };
    d.wait_all_ready();
    let c = d.client();
    // With everything ready: exact fits, then the fewest segments.
    for (bytes, want) in [
        (16 * MB, (1, 16 * MB)),
        (4 * MB, (1, 4 * MB)),
        (3 * MB, (1, 4 * MB)),
        (8 * MB, (1, 16 * MB)),
        (32 * MB, (2, 16 * MB)),
    ] {
        let m = from_service(&c, bytes).unwrap();
        let Source::Service {
            segments,
            segment_size,
            ..
        } = *m.source()
        else {
            panic!("{bytes}: not from the service");
        };
        assert_eq!((segments, segment_size), want, "a request of {bytes}");
        assert_all_zero(&m);
        drop(m);
        d.wait_all_ready();
    }
    // Four tenants' threads at once, each size served whole from one pool or refused.
    std::thread::scope(|s| {
        for t in 0..4usize {
            let d = &d;
            s.spawn(move || {
                let c = d.client();
                for i in 0..60 {
                    let bytes = [4 * MB, 16 * MB, 8 * MB, 2 * MB][(t + i) % 4];
                    match from_service(&c, bytes) {
                        Ok(mut m) => {
                            let Source::Service {
                                segments,
                                segment_size,
                                ..
                            } = *m.source()
                            else {
                                panic!("not from the service");
                            };
                            assert!(segment_size == 4 * MB || segment_size == 16 * MB);
                            assert!(segments * segment_size >= bytes);
                            assert!(segments == 1 || segment_size == 4 * MB, "{segments}");
                            assert_all_zero(&m);
                            m.as_mut_slice().fill(0xc3);
                        }
                        Err(prezero_service::Error::Refused { errno, .. })
                            if errno == libc::ENOMEM =>
                        {
                            std::thread::sleep(Duration::from_millis(1))
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });
    d.wait_all_ready();
    let s = d.stats();
    assert_eq!(s.pools.len(), 2, "STATS shows every pool");
    assert!(s.pools.iter().all(|p| p.handouts > 0), "{:?}", s.pools);
    assert_eq!(s.verify_failures, 0);
    let (ok, text) = client_stats(&d, &[]);
    assert!(ok, "{text}");
    assert!(text.contains("16M") && text.contains("4M"), "{text}");
}

fn client_stats(d: &Daemon, extra: &[&str]) -> (bool, String) {
    let out = Command::new(bin())
        .args(["client", "stats", "--socket", d.socket.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Samples of a Prometheus text exposition, `name{labels}` to value, after
/// checking every sample belongs to a family with a HELP and a TYPE line.
fn parse_exposition(text: &str) -> (std::collections::BTreeMap<String, f64>, Vec<String>) {
    let mut samples = std::collections::BTreeMap::new();
    let mut counters = Vec::new();
    let (mut helped, mut typed) = (Vec::new(), Vec::new());
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.push(rest.split(' ').next().unwrap().to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut w = rest.split(' ');
            let (name, kind) = (w.next().unwrap().to_owned(), w.next().unwrap());
            if kind == "counter" || kind == "histogram" {
                counters.push(name.clone());
            }
            typed.push(name);
        } else {
            let (key, value) = line.rsplit_once(' ').expect("name value");
            let name = key.split('{').next().unwrap();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|f| typed.iter().any(|t| t == f))
                .unwrap_or(name);
            assert!(typed.iter().any(|t| t == family), "{name}: no TYPE");
            assert!(helped.iter().any(|t| t == family), "{name}: no HELP");
            samples.insert(key.to_owned(), value.parse::<f64>().expect("a number"));
        }
    }
    (samples, counters)
}

#[test]
fn the_metrics_file_parses_and_its_counters_only_grow() {
    // A directory only root may write: the daemon refuses one others could.
    let dir = TempDir::new("metrics");
    let file = dir.join("prezero.prom");
    let Some(d) = Daemon::start(
        "target=32M,cap=32M,segment=16M",
        &[
            "--metrics-interval",
            "0.05",
            "--metrics-textfile",
            file.to_str().unwrap(),
        ],
    ) else {
        return;
    };
    let read = || {
        wait_for("the metrics file", Duration::from_secs(5), || {
            std::fs::read_to_string(&file).is_ok_and(|t| !t.is_empty())
        });
        std::fs::read_to_string(&file).unwrap()
    };
    let c = d.client();
    let mut last = parse_exposition(&read()).0;
    for round in 0..3 {
        let m = from_service(&c, 16 * MB).unwrap();
        drop(m);
        // Refused twice: more than the cap, and a page size not served.
        assert!(from_service(&c, 64 * MB).is_err());
        let raw = Raw::connect(&d.socket);
        let ask = Request::Alloc {
            bytes: 1,
            page_size: 4096,
            flags: 0,
            node: 0,
        };
        assert!(raw.send(&ask.encode(1), &[]));
        raw.drain(Duration::from_millis(200));
        d.wait_all_ready();
        std::thread::sleep(Duration::from_millis(150));
        let text = read();
        let (now, counters) = parse_exposition(&text);
        for (key, &v) in &now {
            let name = key.split('{').next().unwrap();
            let is_counter = counters.iter().any(|c| name.starts_with(c.as_str()));
            if let (true, Some(&before)) = (is_counter, last.get(key)) {
                assert!(
                    v >= before,
                    "round {round}: {key} went from {before} to {v}"
                );
            }
        }
        let get = |k: &str| *now.get(k).unwrap_or_else(|| panic!("no {k} in\n{text}"));
        // One node here: the daemon's pool is on node 0, and says so.
        let pool = "page=\"2MiB\",segment=\"16MiB\",node=\"0\"";
        assert!(get(&format!("prezero_handouts_total{{{pool}}}")) >= (round + 1) as f64);
        assert!(get("prezero_refusals_total{reason=\"pool_cap\"}") >= (round + 1) as f64);
        assert!(get("prezero_refusals_total{reason=\"bad_request\"}") >= (round + 1) as f64);
        assert_eq!(
            get("prezero_handout_latency_seconds_count"),
            get(&format!("prezero_handouts_total{{{pool}}}"))
        );
        assert_eq!(
            get(&format!("prezero_pool_bytes{{{pool},state=\"ready\"}}")),
            (32 * MB) as f64
        );
        assert!(
            get("prezero_cleaned_bytes_total{how=\"in_place\"}") >= ((round + 1) * 16 * MB) as f64
        );
        last = now;
    }
    // What `client stats --prometheus` prints is the same format.
    let (ok, text) = client_stats(&d, &["--prometheus"]);
    assert!(ok, "{text}");
    parse_exposition(&text);
    // promtool, where Debian's prometheus package put it, has the last word on the format.
    match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => prezero_testkit::skip(
            "tool",
            format!("promtool check metrics ({e}; apt-get install prometheus)"),
        ),
    }
}

#[test]
fn a_metrics_file_in_the_place_of_the_socket_or_in_a_shared_directory_is_refused() {
    let dir = TempDir::new("metrics-bad");
    std::fs::create_dir_all(dir.join("shared")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.join("shared"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let sock = dir.join("s.sock");
    let s = sock.to_str().unwrap();
    for (metrics, why) in [
        (s.to_owned(), "socket or the ledger"),
        (format!("{s}.ledger"), "socket or the ledger"),
        (format!("{s}.ledger.tmp"), "socket or the ledger"),
        (
            dir.join("shared/m.prom").to_str().unwrap().to_owned(),
            "writable by every user",
        ),
    ] {
        let out = Command::new(bin())
            .args([
                "serve",
                "--socket",
                s,
                "--pool",
                "2MB:target=2M,cap=2M,segment=2M",
            ])
            .args(["--metrics-textfile", &metrics])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(why),
            "{metrics}: {err}"
        );
    }
    for interval in ["0", "1e19", "nan"] {
        let out = Command::new(bin())
            .args(["serve", "--socket", s, "--metrics-interval", interval])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("interval"),
            "{interval}: {err}"
        );
    }
}
