//! The HTML report of `prezero bench all --report`: one self-contained file.
//! First the answer (headline.rs: prezero against the kernel and glibc, the
//! machine beside it), then one section per bench (sections.rs) with charts
//! drawn by plotters as inline SVG (chart.rs) and every number in a table
//! (fmt.rs: three significant figures and a unit), the raw JSON at the end.
//! The rows are read (`crate::rows::read_rows`, as `bench compare` reads
//! them) into the types the benches write them from (`rows/`), and gathered
//! by kind in rows.rs.

mod chart;
mod fmt;
mod headline;
mod programs;
mod rows;
mod sections;

use std::fmt::Write;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::rows::read_rows;
use crate::rows::{AllRun, Status};
use fmt::esc;
use rows::{Info, Rows};

/// `prezero report`: the HTML report again, from a `bench all --json-out` file.
#[derive(clap::Args)]
pub struct Args {
    /// JSON lines from `prezero bench all --json-out` (the first one `info`).
    from: std::path::PathBuf,
    /// Where to write the HTML.
    #[arg(long, default_value = "report.html")]
    out: std::path::PathBuf,
}

pub fn run(args: &Args) -> Result<()> {
    crate::output::check_writable(&args.out, "the report")?;
    let mut rows = read_rows(&args.from)?;
    let at = rows
        .iter()
        .position(|r| r["bench"] == "info")
        .context("no `info` row: use a `bench all --json-out` file")?;
    let info = rows.remove(at);
    std::fs::write(&args.out, render(&info, &rows))
        .with_context(|| format!("cannot write the report to {}", args.out.display()))?;
    eprintln!("prezero: wrote the report to {}", args.out.display());
    Ok(())
}

const STYLE: &str = "\
body{font-family:sans-serif;max-width:1060px;margin:2em auto;padding:0 1em;color:#222}\
h1{margin-bottom:.2em}h2{border-bottom:1px solid #ccc;margin-top:2em}h3{margin:.2em 0;font-size:15px}\
table{border-collapse:collapse;margin:1em 0;font-size:13px}\
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f0f0f0}\
.headline{display:flex;gap:20px;align-items:flex-start}.headline>div{flex:1}\
table.headline{font-size:15px;margin:0;width:100%}table.headline td,table.headline th{padding:5px 8px;vertical-align:top;white-space:nowrap}\
table.headline .what{text-align:left;white-space:normal}\
table.headline small{display:block;color:#777;font-size:11px;white-space:normal;max-width:160px;margin-left:auto}\
td.ours{font-weight:bold}td.x{font-weight:bold;font-size:17px}\
.win{color:#17732e;background:#eaf6ec}.loss{color:#a00;background:#fbeaea}.even{color:#555}\
td.none{color:#aaa;text-align:center}\
.note{font-size:12px;color:#555}\
aside.machine{flex:0 0 250px;font-size:13px;background:#f7f7f7;border:1px solid #ddd;padding:10px}\
aside.machine p{margin:.3em 0 .8em}table.profile{margin:0;font-size:12px}table.profile td{border:0;text-align:left;padding:1px 4px}\
figure{margin:1.2em 0}figcaption{font-weight:bold;margin-bottom:4px}\
.chart{display:flex;align-items:flex-start;gap:12px}.chart svg{flex:none}\
ul.legend{list-style:none;padding:0;margin:12px 0 0;font-size:13px}\
ul.legend li{margin:3px 0;display:flex;align-items:center;gap:6px}ul.legend i{display:inline-block;width:18px;flex:none}\
.failed{color:#a00}pre{white-space:pre-wrap}details pre{font-size:11px}";

/// What each step of the run did (the `bench all` row): the failures, said
/// at the top, and a table of every step with each failed step's last lines
/// of stderr.
fn failures(run: &AllRun) -> String {
    let failed: Vec<&str> = (run.steps.iter())
        .filter(|st| matches!(st.status, Status::Failed { .. }))
        .map(|st| st.step.as_str())
        .collect();
    if failed.is_empty() {
        return String::new();
    }
    format!(
        "<p class=\"failed\"><b>{} of {} steps failed: {}.</b> Their sections are missing or partial; see Steps.</p>\n",
        failed.len(),
        (run.steps.iter())
            .filter(|st| !matches!(st.status, Status::Skipped { .. }))
            .count(),
        esc(&failed.join(", "))
    )
}

fn steps(run: &AllRun) -> String {
    let mut h = format!("<h2>Steps</h2>\n<p>A {} run.</p>\n", esc(&run.scale));
    h += &fmt::table(
        &["step", "rows", "outcome", "command"],
        run.steps.iter().map(|st| {
            let outcome = match &st.status {
                Status::Ok => "ok".to_string(),
                Status::Skipped { reason } => format!("skipped: {reason}"),
                Status::Failed { reason, .. } => format!("failed: {reason}"),
            };
            vec![
                st.step.clone(),
                st.rows.to_string(),
                outcome,
                st.command.clone(),
            ]
        }),
    );
    let left: Vec<(&str, &str)> = (run.steps.iter())
        .flat_map(|st| {
            st.not_measured
                .iter()
                .map(move |n| (st.step.as_str(), n.as_str()))
        })
        .collect();
    if !left.is_empty() {
        h += "<p>Not measured on this machine:</p>\n<ul>\n";
        for (step, what) in left {
            let _ = writeln!(h, "<li>{}: {}</li>", esc(step), esc(what));
        }
        h += "</ul>\n";
    }
    for st in &run.steps {
        if let Status::Failed { stderr_tail, .. } = &st.status {
            let _ = write!(
                h,
                "<p class=\"failed\">{} failed; the last lines of its stderr:</p>\n<pre>{}</pre>\n",
                esc(&st.step),
                esc(&stderr_tail.join("\n"))
            );
        }
    }
    h
}

/// The report for `info` (from `prezero info --json`) and the rows of `bench
/// all` (its own row, listing the steps, among them).
pub fn render(info: &Value, all: &[Value]) -> String {
    let rows = Rows::read(all);
    let mut h = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>prezero report</title><style>{STYLE}</style></head><body>\n<h1>prezero report</h1>\n"
    );
    if let Some(run) = &rows.all {
        h += &failures(run);
    }
    // The real programs first: what a user trying prezero will see.
    h += &programs::render(&rows.programs);
    h += &headline::render(&Info::read(info), &rows);
    if let Some(run) = &rows.all {
        h += &steps(run);
    }
    for section in [
        sections::clear,
        sections::mmap,
        sections::faults,
        sections::pool,
        sections::template,
        sections::service,
        sections::run,
    ] {
        h += &section(&rows);
    }
    if !rows.unread.is_empty() {
        let _ = writeln!(
            h,
            "<h2>Rows not read</h2>\n<p class=\"failed\">{} rows lack fields their bench writes; they are in the raw data.</p>",
            rows.unread.len()
        );
        h += &fmt::table(
            &["row", "why"],
            rows.unread
                .iter()
                .map(|(row, why)| vec![row.clone(), why.clone()]),
        );
    }
    let raw: String = std::iter::once(info)
        .chain(all)
        .map(|r| format!("{r}\n"))
        .collect();
    let _ = write!(
        h,
        "<h2>Raw data</h2>\n<details><summary>Every row as <code>prezero bench ... --json</code> printed it ({} rows)</summary><pre id=\"raw\">{}</pre></details>\n</body></html>\n",
        all.len() + 1,
        esc(&raw)
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = include_str!("../../tests/fixtures/bench-all.jsonl");

    fn fixture() -> (Value, Vec<Value>) {
        let mut rows: Vec<Value> = FIXTURE
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let info = rows.remove(0);
        (info, rows)
    }

    /// How the report shows the value of the field `key`.
    fn shown(key: &str, x: f64) -> String {
        use fmt::*;
        match key {
            "faults_per_wall_s" | "flt_per_cpu_s" => si(x, "/s"),
            "x_best_kernel" | "x_service" | "ratio" => times(x),
            "size" | "bytes" | "scrubbed_bytes_during" => crate::units::human_size(x as usize),
            "threads" | "lines" | "reps" | "runs" | "records" | "inflight" | "faults" => count(x),
            k if k.ends_with("gbps") || k.starts_with("gbps") => gbps(x),
            k if k.ends_with("_pct") => pct(x),
            k if k.ends_with("_us") => us(x),
            k if k == "ms" || k.ends_with("_ms") => ms(x),
            k if k.ends_with("_s") => secs(x),
            k => panic!("the test does not know how {k} is shown"),
        }
    }

    /// The report up to its raw data, which holds every row as the benches
    /// printed it.
    fn visible(html: &str) -> &str {
        html.split("<h2>Raw data</h2>").next().unwrap()
    }

    #[test]
    fn the_report_holds_every_chart_and_every_number() {
        let (info, rows) = fixture();
        let html = render(&info, &rows);
        assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
        // One SVG per chart: clear hot + cold, mmap, faults, hand-out CDF, sustained W=1 and
        // W=64, template, VM boot.
        assert_eq!(html.matches("<svg").count(), 9, "charts");
        assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count());
        assert_eq!(
            html.matches("<table").count(),
            html.matches("</table>").count()
        );
        assert!(
            !html.contains("http://")
                || html.matches("http://").count()
                    == html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count(),
            "no network references"
        );
        let tables = visible(&html);
        for r in &rows {
            for (k, v) in r.as_object().unwrap() {
                if let Some(x) = v.as_f64() {
                    let cell = format!(">{}<", shown(k, x));
                    assert!(
                        tables.contains(&cell),
                        "{k} = {x} of {r} missing from the tables as {cell}"
                    );
                }
            }
        }
        assert!(
            html.contains(&format!("{} rows)", rows.len() + 1)),
            "raw data"
        );
        for r in &rows {
            assert!(
                html.contains(&esc(&r.to_string())),
                "{r} not in the raw data"
            );
        }
    }

    /// Where `text` has a number a person should not have to read: more than
    /// four decimals (`2.1839384198345777`) or an exponent (`9e6`, `1e+7`).
    fn raw_number(text: &str) -> Option<&str> {
        let b = text.as_bytes();
        (0..b.len()).find_map(|i| {
            let digits = |from: usize| {
                b[from.min(b.len())..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .count()
            };
            let long = b[i].is_ascii_digit() && b.get(i + 1) == Some(&b'.') && digits(i + 2) >= 5;
            let sign = usize::from(matches!(b.get(i + 2), Some(b'+' | b'-')));
            let exponent =
                b[i].is_ascii_digit() && b.get(i + 1) == Some(&b'e') && digits(i + 2 + sign) >= 1;
            (long || exponent).then(|| &text[i.saturating_sub(30)..(i + 30).min(text.len())])
        })
    }

    #[test]
    fn the_headline_comes_first_and_no_raw_number_shows() {
        let (info, rows) = fixture();
        let html = render(&info, &rows);
        let headline = html
            .find("<h2>What prezero gives on this machine</h2>")
            .expect("headline");
        assert!(
            headline < html.find("<h2>Clearing").unwrap(),
            "the headline first"
        );
        let end = html.find("</section>").unwrap();
        let section = &html[headline..end];
        // Against the kernel and glibc: clear (cold 1 GiB: auto 23.37, best kernel-like
        // 6.73, memset 9.61), first touch, populate, hand-out (p50 0.195 against 310.803
        // and 875.537 us), template, VM boot and QEMU; the machine and profile beside.
        for x in [
            "3.47×", "2.43×", "8.7×", "1.68×", "1590×", "4490×", "4.91×", "183×", "6.83×",
        ] {
            assert!(
                section.contains(&format!(">{x}<")),
                "{x} not in the headline"
            );
        }
        assert!(section.contains("23.4 GB/s<small>auto</small>"));
        assert!(section.contains("Intel(R) Xeon(R) Processor"));
        assert!(section.contains("rep-stosb &lt; 65 MiB"), "the profile");
        // Axis ticks, table cells and the headline: three figures, no exponent.
        assert_eq!(raw_number(visible(&html)), None);
        assert!(raw_number("gbps 2.1839384198345777").is_some());
        assert!(raw_number("<text>9e6</text>").is_some() && raw_number("1e+7").is_some());
        assert_eq!(raw_number("x86-64 avx512 4.66 % #4269d0 L2"), None);
    }

    #[test]
    fn rows_without_their_fields_are_listed_not_dropped() {
        let (info, mut rows) = fixture();
        rows.push(serde_json::json!({"bench": "clear", "mode": "hot", "strategy": "auto"}));
        rows.push(serde_json::json!({"bench": "template-stores", "size": 4096}));
        let html = render(&info, &rows);
        assert!(html.contains("<h2>Rows not read</h2>"));
        assert!(
            html.contains("1 rows lack fields"),
            "template-stores has no section"
        );
        assert!(html.contains("missing field `size`"));
    }

    #[test]
    fn failed_steps_are_named_and_their_sections_left_out() {
        let (info, mut rows) = fixture();
        rows.retain(|r| r["bench"] != "mmap" && r["bench"] != "service");
        rows.insert(
            0,
            serde_json::json!({"bench": "all", "scale": "quick", "steps": [
                {"step": "info", "command": "prezero info --json", "rows": 1, "status": "ok"},
                {"step": "clear", "command": "prezero bench clear --json", "rows": 12, "status": "ok",
                 "not_measured": ["the hugetlb rows: 72 hugetlb pages needed, 1 free"]},
                {"step": "mmap", "command": "prezero bench mmap --json", "rows": 0, "status": "failed",
                 "reason": "page 2MB: 2048 hugetlb pages needed, 0 free",
                 "stderr_tail": ["prezero: page 2MB: 2048 hugetlb pages needed, 0 free <&>"]},
                {"step": "service", "command": "prezero bench service --json", "rows": 0,
                 "status": "skipped", "reason": "needs --reserve"},
            ]}),
        );
        let html = render(&info, &rows);
        assert!(html.contains("1 of 3 steps failed: mmap."), "{html}");
        assert!(
            html.contains("<li>clear: the hugetlb rows: 72 hugetlb pages needed, 1 free</li>"),
            "{html}"
        );
        assert!(html.contains("failed: page 2MB: 2048 hugetlb pages needed, 0 free"));
        assert!(html.contains(
            "<pre>prezero: page 2MB: 2048 hugetlb pages needed, 0 free &lt;&amp;&gt;</pre>"
        ));
        assert!(html.contains("<td>service</td><td>0</td><td>skipped: needs --reserve</td>"));
        assert!(!html.contains("mmap + populate") && !html.contains("<h2>prezero serve"));
        // The nine charts of the full fixture less mmap's and the VM boot's.
        assert_eq!(html.matches("<svg").count(), 7, "charts");
    }

    #[test]
    fn a_run_under_a_cpu_mask_says_so() {
        let (mut info, rows) = fixture();
        assert!(!render(&info, &rows).contains("PREZERO_CPU"));
        info["cpu"]["detected"] = info["cpu"]["features"].clone();
        info["cpu"]["detected"]["avx512f"] = true.into();
        info["cpu"]["features"]["avx512f"] = false.into();
        info["cpu"]["mask"] = "x86-64-v3".into();
        let html = render(&info, &rows);
        assert!(html.contains("PREZERO_CPU=x86-64-v3"), "no mask line");
        assert!(html.contains("the features avx512f were hidden"));
    }

    #[test]
    fn prezero_run_rows_make_a_table() {
        let (info, mut rows) = fixture();
        rows.push(
            serde_json::json!({"bench": "run", "program": "numpy", "figure": "first_pass",
            "runs": 5, "plain_ms": 120.5, "plain_stdev_pct": 2.0, "prezero_ms": 40.1,
            "prezero_stdev_pct": 3.0, "speedup": 3.005, "goal": ">= 2x", "goal_met": true,
            "plain_peak_rss_bytes": 600u64 << 20, "prezero_peak_rss_bytes": 610u64 << 20,
            "prezero_held_beyond_use_gib": 0.5}),
        );
        // A row with the lazy arm, of a memory figure.
        rows.push(
            serde_json::json!({"bench": "run", "program": "sparse", "figure": "rss_anon",
            "runs": 5, "plain_ms": 512.0, "plain_stdev_pct": 0.0, "prezero_ms": 512.0,
            "prezero_stdev_pct": 0.0, "speedup": 1.0, "plain_peak_rss_bytes": 600u64 << 20,
            "prezero_peak_rss_bytes": 610u64 << 20, "unit": "MiB", "lazy_ms": 1536.0,
            "lazy_stdev_pct": 1.0, "lazy_speedup": 0.333, "lazy_goal": "<= 1690 MiB",
            "lazy_goal_met": true, "lazy_peak_rss_bytes": 1600u64 << 20}),
        );
        let html = render(&info, &rows);
        assert!(html.contains("<h2>prezero run: unmodified programs</h2>"));
        // A row without the lazy arm (recorded before it): its cells blank.
        assert!(html.contains(
            "<td>numpy</td><td>first_pass</td><td>5</td><td>121 ms</td><td>2 %</td><td>40.1 ms</td>\
             <td>3 %</td><td>3.01×</td><td>&gt;= 2x: met</td><td></td><td></td><td></td><td></td>\
             <td>600 MiB</td><td>610 MiB</td><td></td><td>512 MiB</td>"
        ));
        assert!(html.contains(
            "<td>sparse</td><td>rss_anon</td><td>5</td><td>512 MiB</td><td>0 %</td><td>512 MiB</td>\
             <td>0 %</td><td>1×</td><td></td><td>1.5 GiB</td><td>1 %</td><td>0.333×</td>\
             <td>&lt;= 1690 MiB: met</td><td>600 MiB</td><td>610 MiB</td><td>1.56 GiB</td><td></td>"
        ));
        assert!(!render(&info, &rows[..rows.len() - 2]).contains("prezero run: unmodified"));
    }

    #[test]
    fn the_real_programs_come_first_with_their_goals() {
        let (info, mut rows) = fixture();
        assert!(!render(&info, &rows).contains("Real programs"));
        let row = |arm: &str, ms: f64, speedup: f64, met: Option<bool>| {
            let mut r = serde_json::json!({"bench": "programs", "program": "java-pretouch",
                "command": "java -Xms2048m -version", "arm": arm, "runs": 5, "time_ms": ms,
                "time_min_ms": ms - 10.0, "time_max_ms": ms + 20.0,
                "peak_rss_bytes": 2095u64 << 20, "peak_rss_min_bytes": 2090u64 << 20,
                "peak_rss_max_bytes": 2100u64 << 20, "speedup": speedup, "rss_ratio": 1.0,
                "first_touch": true, "scale": 1.0});
            if let Some(met) = met {
                r["time_goal"] = ">= 2x".into();
                r["time_goal_met"] = met.into();
                r["rss_goal"] = "RSS <= 1.1x + 16 MiB".into();
                r["rss_goal_met"] = true.into();
            }
            r
        };
        rows.push(row("plain", 730.0, 1.0, None));
        rows.push(row("lazy", 924.0, 0.79, Some(false)));
        rows.last_mut().unwrap()["notes"] = serde_json::json!(["prezero: --lazy: <no uffd>"]);
        let html = render(&info, &rows);
        let programs = html.find("<h2>Real programs</h2>").expect("the section");
        assert!(
            programs < html.find("<h2>What prezero gives").unwrap(),
            "first"
        );
        assert!(html.contains("1 of 1 rows miss a goal"), "{html}");
        assert!(html.contains(
            "<td>java-pretouch</td><td>lazy</td><td>924 ms</td><td>914 ms</td><td>944 ms</td>\
             <td>0.79×</td><td>2.05 GiB</td><td>2.04 GiB</td><td>2.05 GiB</td><td>1×</td>\
             <td>&gt;= 2x: NOT met</td><td>RSS &lt;= 1.1x + 16 MiB: met</td>"
        ));
        assert!(html.contains("<li>java-pretouch lazy: prezero: --lazy: &lt;no uffd&gt;</li>"));
        assert!(!html.contains("Rows not read"));
    }

    #[test]
    fn no_rows_no_machine_no_charts_and_no_panic() {
        let html = render(&serde_json::json!({"bench": "info"}), &[]);
        assert!(html.contains("The machine is not described"));
        assert!(!html.contains("<svg") && html.trim_end().ends_with("</html>"));
        // Rows that give a chart nothing to draw (one line count: no line) keep
        // their table and draw no empty chart.
        let (info, mut rows) = fixture();
        rows.retain(|r| r["case"] == "sustained" && r["lines"] == 1);
        let html = render(&info, &rows);
        assert!(html.contains("<h2>Pool: sustained") && !html.contains("<svg"));
    }
}
