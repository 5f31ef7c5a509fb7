//! The HTML report of `prezero bench all --report`: one self-contained file,
//! charts drawn by plotters as inline SVG, every number also in a table, the
//! raw JSON embedded.

use std::fmt::Write;

use plotters::prelude::*;
use serde_json::Value;

use crate::units::fmt_size;

/// `prezero report`: the HTML report again, from a `bench all --json-out` file.
#[derive(clap::Args)]
pub struct Args {
    /// JSON lines from `prezero bench all --json-out` (the first one `info`).
    from: std::path::PathBuf,
    /// Where to write the HTML.
    #[arg(long, default_value = "report.html")]
    out: std::path::PathBuf,
}

pub fn run(args: &Args) -> Result<(), String> {
    let text =
        std::fs::read_to_string(&args.from).map_err(|e| format!("{}: {e}", args.from.display()))?;
    let mut rows = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            serde_json::from_str::<Value>(l).map_err(|e| format!("{}: {e}", args.from.display()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let at = rows
        .iter()
        .position(|r| r["bench"] == "info")
        .ok_or("no `info` row: use a `bench all --json-out` file")?;
    let info = rows.remove(at);
    std::fs::write(&args.out, render(&info, &rows))
        .map_err(|e| format!("{}: {e}", args.out.display()))?;
    eprintln!("prezero: wrote the report to {}", args.out.display());
    Ok(())
}

const W: u32 = 760;
const H: u32 = 400;

fn rows<'a>(all: &'a [Value], bench: &str) -> Vec<&'a Value> {
    all.iter().filter(|r| r["bench"] == bench).collect()
}

fn s(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A line chart: one series per name, log x (and optionally log y).
struct Lines<'a> {
    title: &'a str,
    x_label: &'a str,
    y_label: &'a str,
    log_y: bool,
    series: Vec<(String, Vec<(f64, f64)>)>,
    x_fmt: &'a dyn Fn(f64) -> String,
}

fn line_chart(c: &Lines) -> String {
    let mut svg = String::new();
    // No chart without a point to draw (the table says what there is).
    if c.series.iter().all(|(_, p)| p.is_empty()) {
        return svg;
    }
    let pts = c.series.iter().flat_map(|(_, p)| p.iter().copied());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
    let mut y0 = f64::MAX;
    for (x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 >= x1 {
        x1 = x0 * 2.0 + 1.0;
    }
    let y_lo = if c.log_y { (y0 / 2.0).max(1e-6) } else { 0.0 };
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let palette = |i: usize| Palette99::pick(i).to_rgba();
        let draw = |root: &DrawingArea<SVGBackend, plotters::coord::Shift>| -> Result<(), Box<dyn std::error::Error>> {
            let mut b = ChartBuilder::on(root);
            b.caption(c.title, ("sans-serif", 18)).margin(10).x_label_area_size(40).y_label_area_size(60);
            macro_rules! finish {
                ($chart:expr) => {{
                    let mut chart = $chart;
                    chart
                        .configure_mesh()
                        .x_desc(c.x_label)
                        .y_desc(c.y_label)
                        .x_label_formatter(&|x| (c.x_fmt)(*x))
                        .draw()?;
                    for (i, (name, p)) in c.series.iter().enumerate() {
                        let color = palette(i);
                        chart
                            .draw_series(LineSeries::new(p.iter().copied(), color.stroke_width(2)))?
                            .label(name.as_str())
                            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
                        chart.draw_series(p.iter().map(|&xy| Circle::new(xy, 3, color.filled())))?;
                    }
                    chart
                        .configure_series_labels()
                        .background_style(WHITE.mix(0.8))
                        .border_style(BLACK)
                        .position(SeriesLabelPosition::UpperRight)
                        .draw()?;
                }};
            }
            if c.log_y {
                finish!(b.build_cartesian_2d((x0..x1).log_scale(), (y_lo..y1 * 2.0).log_scale())?);
            } else {
                finish!(b.build_cartesian_2d((x0..x1).log_scale(), y_lo..y1 * 1.15)?);
            }
            Ok(())
        };
        let _ = draw(&root);
        let _ = root.present();
    }
    svg
}

/// A grouped bar chart: groups along x, one bar per series in each group.
fn bar_chart(
    title: &str,
    y_label: &str,
    log_y: bool,
    groups: &[String],
    series: &[(String, Vec<Option<f64>>)],
) -> String {
    let mut svg = String::new();
    if series.iter().all(|(_, v)| v.iter().all(Option::is_none)) {
        return svg;
    }
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let draw = || -> Result<(), Box<dyn std::error::Error>> {
            let vals = series.iter().flat_map(|(_, v)| v.iter().flatten().copied());
            let (lo, hi) = vals.fold((f64::MAX, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
            let n = groups.len().max(1) as f64;
            let k = series.len().max(1) as f64;
            let mut b = ChartBuilder::on(&root);
            b.caption(title, ("sans-serif", 18))
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(60);
            let labels = |x: &f64| groups.get(x.floor() as usize).cloned().unwrap_or_default();
            macro_rules! bars {
                ($chart:expr, $base:expr) => {{
                    let mut chart = $chart;
                    chart
                        .configure_mesh()
                        .disable_x_mesh()
                        .y_desc(y_label)
                        .x_labels(groups.len() * 2 + 1)
                        .x_label_formatter(&|x| {
                            if (x.fract() - 0.5).abs() < 0.01 {
                                labels(x)
                            } else {
                                String::new()
                            }
                        })
                        .draw()?;
                    for (j, (name, v)) in series.iter().enumerate() {
                        let color = Palette99::pick(j).to_rgba();
                        chart
                            .draw_series(v.iter().enumerate().filter_map(|(g, y)| {
                                let y = (*y)?;
                                let x = g as f64 + 0.1 + 0.8 * j as f64 / k;
                                Some(Rectangle::new(
                                    [(x, $base), (x + 0.8 / k, y)],
                                    color.filled(),
                                ))
                            }))?
                            .label(name.as_str())
                            .legend(move |(x, y)| {
                                Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                            });
                    }
                    chart
                        .configure_series_labels()
                        .background_style(WHITE.mix(0.8))
                        .border_style(BLACK)
                        .draw()?;
                }};
            }
            if log_y {
                let base = (lo / 2.0).max(1e-6);
                bars!(
                    b.build_cartesian_2d(0.0..n, (base..hi * 3.0).log_scale())?,
                    base
                );
            } else {
                bars!(b.build_cartesian_2d(0.0..n, 0.0..hi * 1.2)?, 0.0);
            }
            Ok(())
        };
        let _ = draw();
        let _ = root.present();
    }
    svg
}

/// Axis ticks of a log-scale byte axis: 10000 -> "9.8K".
fn approx_size(x: f64) -> String {
    let (v, unit) = [(1u64 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")]
        .into_iter()
        .map(|(m, u)| (x / m as f64, u))
        .find(|(v, _)| *v >= 1.0)
        .unwrap_or((x, ""));
    let t = format!("{v:.1}");
    format!("{}{unit}", t.trim_end_matches(".0"))
}

fn table(head: &[&str], body: Vec<Vec<String>>) -> String {
    let mut t = String::from("<table><tr>");
    for h in head {
        let _ = write!(t, "<th>{}</th>", esc(h));
    }
    t.push_str("</tr>");
    for r in body {
        t.push_str("<tr>");
        for c in r {
            let _ = write!(t, "<td>{}</td>", esc(&c));
        }
        t.push_str("</tr>");
    }
    t.push_str("</table>");
    t
}

fn distinct(rs: &[&Value], key: &str) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for r in rs {
        let x = s(&r[key]);
        if !v.contains(&x) {
            v.push(x);
        }
    }
    v
}

fn num(v: &Value) -> String {
    match v.as_f64() {
        Some(x) => format!("{x}"),
        None => s(v),
    }
}

/// Bytes as whole MiB.
fn mib(v: &Value) -> String {
    match v.as_f64() {
        Some(b) => format!("{:.0} MiB", b / (1u64 << 20) as f64),
        None => s(v),
    }
}

/// What each step of the run did (the `bench all` row): failures first, then
/// a table of every step, then each failed step's last lines of stderr.
fn steps(run: &Value) -> String {
    let steps: Vec<&Value> = run["steps"].as_array().into_iter().flatten().collect();
    let failed: Vec<&Value> = steps
        .iter()
        .copied()
        .filter(|st| st["status"] == "failed")
        .collect();
    let mut h = String::new();
    if !failed.is_empty() {
        let names: Vec<String> = failed.iter().map(|st| s(&st["step"])).collect();
        let _ = writeln!(
            h,
            "<p class=\"failed\"><b>{} of {} steps failed: {}.</b> Their sections are missing or partial; see Steps.</p>",
            failed.len(),
            steps.iter().filter(|st| st["status"] != "skipped").count(),
            esc(&names.join(", "))
        );
    }
    let _ = write!(
        h,
        "<h2>Steps</h2>\n<p>A {} run.</p>\n",
        esc(&s(&run["scale"]))
    );
    h.push_str(&table(
        &["step", "rows", "outcome", "command"],
        steps
            .iter()
            .map(|st| {
                let outcome = match st["reason"].as_str() {
                    Some(why) => format!("{}: {why}", s(&st["status"])),
                    None => s(&st["status"]),
                };
                vec![s(&st["step"]), num(&st["rows"]), outcome, s(&st["command"])]
            })
            .collect(),
    ));
    for st in failed {
        let tail: Vec<String> = st["stderr_tail"]
            .as_array()
            .into_iter()
            .flatten()
            .map(s)
            .collect();
        let _ = write!(
            h,
            "<p class=\"failed\">{} failed; the last lines of its stderr:</p>\n<pre>{}</pre>\n",
            esc(&s(&st["step"])),
            esc(&tail.join("\n"))
        );
    }
    h
}

/// The report for `info` (from `prezero info --json`) and the rows of `bench
/// all` (its own row, listing the steps, among them).
pub fn render(info: &Value, all: &[Value]) -> String {
    let mut h = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>prezero report</title>\
         <style>body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}\
         table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}\
         th{background:#f0f0f0}h2{border-bottom:1px solid #ccc;margin-top:2em}svg{display:block;margin:1em 0}\
         .failed{color:#a00}pre{white-space:pre-wrap}</style></head><body>\n<h1>prezero report</h1>\n",
    );
    let cpu = &info["cpu"];
    if cpu.is_object() {
        let _ = write!(
            h,
            "<p>{} ({}, family {} model {}), {} logical CPUs; caches {}; THP {}; kernel {}.</p>\n\
             <p>Auto profile: {}.</p>\n",
            esc(&s(&cpu["model_name"])),
            esc(&s(&cpu["vendor"])),
            esc(&cpu["family"].to_string()),
            esc(&cpu["model"].to_string()),
            esc(&cpu["logical_cpus"].to_string()),
            esc(&cpu["caches"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| format!(
                    "L{} {}",
                    c["level"],
                    fmt_size(c["size"].as_u64().unwrap_or(0) as usize)
                ))
                .collect::<Vec<_>>()
                .join(", ")),
            esc(&s(&info["memory"]["thp_mode"])),
            esc(&s(&info["memory"]["kernel_release"])),
            esc(&s(&info["profile"]["source"])),
        );
        let on = |key: &str| -> Vec<String> {
            cpu[key]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(_, v)| v.as_bool() == Some(true))
                .map(|(k, _)| k.clone())
                .collect()
        };
        let used = on("features");
        let _ = writeln!(h, "<p>CPU features in use: {}.</p>", esc(&used.join(" ")));
        // A run under PREZERO_CPU measured a narrower CPU than this one: say so.
        if let Some(mask) = cpu["mask"].as_str() {
            let hidden: Vec<String> = on("detected")
                .into_iter()
                .filter(|f| !used.contains(f))
                .collect();
            let _ = writeln!(
                h,
                "<p class=\"failed\"><b>Measured as PREZERO_CPU={} asks</b>: the features {} were hidden.</p>",
                esc(mask),
                esc(&hidden.join(" "))
            );
        }
    } else {
        h.push_str(
            "<p>The machine is not described: <code>prezero info</code> gave nothing.</p>\n",
        );
    }
    if let Some(run) = all.iter().find(|r| r["bench"] == "all") {
        h.push_str(&steps(run));
    }

    let clear = rows(all, "clear");
    if !clear.is_empty() {
        h.push_str("<h2>Clearing: GB/s by size and strategy</h2>\n<p>hot: the same buffer again and again; cold: memory not in cache. Medians; every cleared byte was verified zero.</p>\n");
        for mode in ["hot", "cold"] {
            let rs: Vec<&Value> = clear
                .iter()
                .copied()
                .filter(|r| r["mode"] == mode)
                .collect();
            if rs.is_empty() {
                continue;
            }
            let series = distinct(&rs, "strategy")
                .into_iter()
                .map(|st| {
                    let p = rs
                        .iter()
                        .filter(|r| s(&r["strategy"]) == st)
                        .filter_map(|r| {
                            Some((
                                r["size"].as_f64()?,
                                r["median_gbps"].as_f64().or(r["gbps"].as_f64())?,
                            ))
                        })
                        .collect();
                    (st, p)
                })
                .collect();
            h.push_str(&line_chart(&Lines {
                title: &format!("clear, {mode}"),
                x_label: "bytes",
                y_label: "GB/s",
                log_y: false,
                series,
                x_fmt: &approx_size,
            }));
            h.push_str(&table(
                &[
                    "mode",
                    "size",
                    "strategy",
                    "GB/s (mean)",
                    "stdev %",
                    "GB/s (median)",
                ],
                rs.iter()
                    .map(|r| {
                        vec![
                            s(&r["mode"]),
                            fmt_size(r["size"].as_u64().unwrap_or(0) as usize),
                            s(&r["strategy"]),
                            num(&r["gbps"]),
                            num(&r["stdev_pct"]),
                            num(&r["median_gbps"]),
                        ]
                    })
                    .collect(),
            ));
        }
    }

    let mmap = rows(all, "mmap");
    if !mmap.is_empty() {
        h.push_str("<h2>Populating memory: mmap + fault-in GB/s by page size</h2>\n<p>perf's <code>bench mem mmap</code>: the kernel's demand faults and populate against prezero's parallel prefault and pool (log scale).</p>\n");
        let pages = distinct(&mmap, "page");
        let series: Vec<(String, Vec<Option<f64>>)> = distinct(&mmap, "function")
            .into_iter()
            .map(|f| {
                let v = pages
                    .iter()
                    .map(|p| {
                        mmap.iter()
                            .find(|r| s(&r["page"]) == *p && s(&r["function"]) == f)
                            .and_then(|r| r["gbps"].as_f64())
                    })
                    .collect();
                (f, v)
            })
            .collect();
        h.push_str(&bar_chart("mmap + populate", "GB/s", true, &pages, &series));
        h.push_str(&table(
            &[
                "page", "function", "threads", "bytes", "GB/s", "stdev %", "host",
            ],
            mmap.iter()
                .map(|r| {
                    vec![
                        s(&r["page"]),
                        s(&r["function"]),
                        num(&r["threads"]),
                        num(&r["size"]),
                        num(&r["gbps"]),
                        num(&r["stdev_pct"]),
                        s(&r["host"]),
                    ]
                })
                .collect(),
        ));
    }

    let faults = rows(all, "faults");
    if !faults.is_empty() {
        h.push_str("<h2>Seed 003's fault tables</h2>\n<p>Faults per wall second by cache lines touched per 4 KiB: fresh kernel pages against memory prezero keeps and clears.</p>\n");
        let one_thread: Vec<&Value> = faults
            .iter()
            .copied()
            .filter(|r| r["threads"] == 1)
            .collect();
        let mut series = Vec::new();
        for page in distinct(&one_thread, "page") {
            for src in distinct(&one_thread, "source") {
                let p: Vec<(f64, f64)> = one_thread
                    .iter()
                    .filter(|r| s(&r["page"]) == page && s(&r["source"]) == src)
                    .filter_map(|r| Some((r["lines"].as_f64()?, r["faults_per_wall_s"].as_f64()?)))
                    .collect();
                if !p.is_empty() {
                    series.push((format!("{page} {src}"), p));
                }
            }
        }
        h.push_str(&line_chart(&Lines {
            title: "faults per wall second",
            x_label: "cache lines touched per 4 KiB",
            y_label: "faults/s",
            log_y: true,
            series,
            x_fmt: &|x| format!("{}", x.round()),
        }));
        h.push_str(&table(
            &[
                "page",
                "source",
                "Gb",
                "Rep",
                "Threads",
                "CLine",
                "User s",
                "System s",
                "Wall s",
                "faults",
                "flt/cpu/s",
                "fault/wsec",
                "GB/s",
            ],
            faults
                .iter()
                .map(|r| {
                    vec![
                        s(&r["page"]),
                        s(&r["source"]),
                        fmt_size(r["size"].as_u64().unwrap_or(0) as usize),
                        num(&r["reps"]),
                        num(&r["threads"]),
                        num(&r["lines"]),
                        num(&r["user_s"]),
                        num(&r["system_s"]),
                        num(&r["wall_s"]),
                        num(&r["faults"]),
                        num(&r["flt_per_cpu_s"]),
                        num(&r["faults_per_wall_s"]),
                        num(&r["gbps"]),
                    ]
                })
                .collect(),
        ));
    }

    let pool = rows(all, "pool");
    let handout: Vec<&Value> = pool
        .iter()
        .copied()
        .filter(|r| r["case"] == "handout")
        .collect();
    if !handout.is_empty() {
        h.push_str("<h2>Pool: 2 MiB hand-out latency</h2>\n<p>Cumulative distribution of the time to get 2 MiB of zeroed, usable memory.</p>\n");
        let series = handout
            .iter()
            .map(|r| {
                (
                    s(&r["source"]),
                    r["cdf"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|p| Some((p[0].as_f64()?.max(1e-3), p[1].as_f64()?)))
                        .collect(),
                )
            })
            .collect();
        h.push_str(&line_chart(&Lines {
            title: "hand-out latency CDF",
            x_label: "microseconds",
            y_label: "fraction of hand-outs",
            log_y: false,
            series,
            x_fmt: &|x| format!("{x:.2}"),
        }));
        h.push_str(&table(
            &["source", "p50 us", "p99 us", "max us"],
            handout
                .iter()
                .map(|r| {
                    vec![
                        s(&r["source"]),
                        num(&r["p50_us"]),
                        num(&r["p99_us"]),
                        num(&r["max_us"]),
                    ]
                })
                .collect(),
        ));
    }
    let sustained: Vec<&Value> = pool
        .iter()
        .copied()
        .filter(|r| r["case"] == "sustained")
        .collect();
    if !sustained.is_empty() {
        h.push_str("<h2>Pool: sustained zeroed-memory throughput</h2>\n<p>alloc, touch k lines per 4 KiB, free, with W chunks in flight.</p>\n");
        for w in distinct(&sustained, "inflight") {
            let rs: Vec<&Value> = sustained
                .iter()
                .copied()
                .filter(|r| s(&r["inflight"]) == w)
                .collect();
            let mut series = Vec::new();
            for src in distinct(&rs, "source") {
                for host in ["warm", "cold", "null"] {
                    let p: Vec<(f64, f64)> = rs
                        .iter()
                        .filter(|r| s(&r["source"]) == src && s(&r["host"]) == host)
                        .filter_map(|r| Some((r["lines"].as_f64()?, r["gbps"].as_f64()?)))
                        .collect();
                    if p.len() > 1 {
                        let label = if host == "null" {
                            src.clone()
                        } else {
                            format!("{src} host-{host}")
                        };
                        series.push((label, p));
                    }
                }
            }
            h.push_str(&line_chart(&Lines {
                title: &format!("sustained, W = {w}"),
                x_label: "cache lines touched per 4 KiB",
                y_label: "GB/s",
                log_y: false,
                series,
                x_fmt: &|x| format!("{}", x.round()),
            }));
        }
        h.push_str(&table(
            &["source", "host", "W", "k", "GB/s", "stdev %"],
            sustained
                .iter()
                .map(|r| {
                    vec![
                        s(&r["source"]),
                        s(&r["host"]),
                        num(&r["inflight"]),
                        num(&r["lines"]),
                        num(&r["gbps"]),
                        num(&r["stdev_pct"]),
                    ]
                })
                .collect(),
        ));
    }
    let interference: Vec<&Value> = pool
        .iter()
        .copied()
        .filter(|r| r["case"] == "interference")
        .collect();
    if !interference.is_empty() {
        h.push_str("<h2>Pool: interference</h2>\n<p>A CPU-bound foreground on every core, alone and with the scrubber holding a backlog.</p>\n");
        h.push_str(&table(
            &[
                "scrubber",
                "alone s",
                "with s",
                "slowdown %",
                "bytes scrubbed meanwhile",
            ],
            interference
                .iter()
                .map(|r| {
                    vec![
                        s(&r["scrubber"]),
                        num(&r["alone_s"]),
                        num(&r["with_s"]),
                        num(&r["slowdown_pct"]),
                        num(&r["scrubbed_bytes_during"]),
                    ]
                })
                .collect(),
        ));
    }

    let template = rows(all, "template");
    if !template.is_empty() {
        h.push_str("<h2>Template fill (seed 004)</h2>\n<p>64-byte struct-page records: per-field initialisation, template copies, prezero's streaming fills, and the streaming-store ceiling.</p>\n");
        let layouts = distinct(&template, "layout");
        let series: Vec<(String, Vec<Option<f64>>)> = distinct(&template, "method")
            .into_iter()
            .map(|m| {
                let v = layouts
                    .iter()
                    .map(|l| {
                        template
                            .iter()
                            .find(|r| s(&r["layout"]) == *l && s(&r["method"]) == m)
                            .and_then(|r| r["ms"].as_f64())
                    })
                    .collect();
                (m, v)
            })
            .collect();
        h.push_str(&bar_chart(
            "template fill: time (lower is better)",
            "ms",
            false,
            &layouts,
            &series,
        ));
        h.push_str(&table(
            &[
                "layout",
                "method",
                "records",
                "ms",
                "median ms",
                "GB/s",
                "stdev %",
            ],
            template
                .iter()
                .map(|r| {
                    vec![
                        s(&r["layout"]),
                        s(&r["method"]),
                        num(&r["records"]),
                        num(&r["ms"]),
                        num(&r["median_ms"]),
                        num(&r["gbps"]),
                        num(&r["stdev_pct"]),
                    ]
                })
                .collect(),
        ));
    }

    let service = rows(all, "service");
    if !service.is_empty() {
        h.push_str("<h2>prezero serve: pre-zeroed hugetlb memory for whole machines</h2>\n");
        let of = |t: &str| -> Vec<&Value> {
            service
                .iter()
                .copied()
                .filter(|r| r["table"] == t)
                .collect()
        };
        let handout = of("handout");
        if !handout.is_empty() {
            h.push_str("<p>Hand-out latency: request to memory mapped, populated and zero in the client.</p>\n");
            h.push_str(&table(
                &[
                    "page",
                    "size",
                    "reps",
                    "p50 us",
                    "p99 us",
                    "max us",
                    "GB/s at p50",
                ],
                handout
                    .iter()
                    .map(|r| {
                        vec![
                            s(&r["page"]),
                            num(&r["size"]),
                            num(&r["reps"]),
                            num(&r["p50_us"]),
                            num(&r["p99_us"]),
                            num(&r["max_us"]),
                            num(&r["gbps_p50"]),
                        ]
                    })
                    .collect(),
            ));
        }
        let scrub = of("scrub");
        if !scrub.is_empty() {
            h.push_str("<p>The daemon's scrubber (a segment going back to the uid that released it: streaming stores at SCHED_IDLE, then every byte verified) beside the clearing engine on cold memory. Between uids the daemon gives fresh pages instead, which the kernel zeroes.</p>\n");
            h.push_str(&table(
                &[
                    "page",
                    "bytes",
                    "scrub GB/s",
                    "verify GB/s",
                    "both GB/s",
                    "engine cold GB/s",
                    "scrub / engine",
                ],
                scrub
                    .iter()
                    .map(|r| {
                        vec![
                            s(&r["page"]),
                            num(&r["bytes"]),
                            num(&r["scrub_gbps"]),
                            num(&r["verify_gbps"]),
                            num(&r["scrub_verify_gbps"]),
                            num(&r["engine_cold_gbps"]),
                            num(&r["ratio"]),
                        ]
                    })
                    .collect(),
            ));
        }
        let boot = of("vm-boot");
        if !boot.is_empty() {
            h.push_str("<p>VM boot: N GiB of zeroed, populated 2 MiB memory, from the service and from the kernel paths a VMM uses today.</p>\n");
            let hosts = distinct(&boot, "host");
            let series: Vec<(String, Vec<Option<f64>>)> = distinct(&boot, "path")
                .into_iter()
                .map(|p| {
                    let v = hosts
                        .iter()
                        .map(|host| {
                            boot.iter()
                                .find(|r| s(&r["host"]) == *host && s(&r["path"]) == p)
                                .and_then(|r| r["ms"].as_f64())
                        })
                        .collect();
                    (p, v)
                })
                .collect();
            let groups: Vec<String> = hosts.iter().map(|h| format!("host-{h}")).collect();
            h.push_str(&bar_chart(
                "VM boot: time to usable guest memory (lower is better)",
                "ms",
                true,
                &groups,
                &series,
            ));
            h.push_str(&table(
                &[
                    "host",
                    "path",
                    "bytes",
                    "ms",
                    "stdev %",
                    "GB/s",
                    "x best kernel",
                ],
                boot.iter()
                    .map(|r| {
                        vec![
                            s(&r["host"]),
                            s(&r["path"]),
                            num(&r["size"]),
                            num(&r["ms"]),
                            num(&r["stdev_pct"]),
                            num(&r["gbps"]),
                            num(&r["x_best_kernel"]),
                        ]
                    })
                    .collect(),
            ));
        }
        let vmm = of("vmm");
        if !vmm.is_empty() {
            h.push_str("<p>An unmodified QEMU ready (spawned, guest RAM allocated and populated, QMP answering, stopped with -S) on service memory through <code>prezero client exec</code>, against QEMU's own preallocation, same run.</p>\n");
            h.push_str(&table(
                &[
                    "path",
                    "guest RAM",
                    "accel",
                    "runs",
                    "median ms",
                    "min ms",
                    "max ms",
                    "stdev %",
                    "x service",
                ],
                vmm.iter()
                    .map(|r| {
                        vec![
                            s(&r["path"]),
                            num(&r["size"]),
                            s(&r["accel"]),
                            num(&r["runs"]),
                            num(&r["ms"]),
                            num(&r["min_ms"]),
                            num(&r["max_ms"]),
                            num(&r["stdev_pct"]),
                            num(&r["x_service"]),
                        ]
                    })
                    .collect(),
            ));
        }
    }

    let run = rows(all, "run");
    if !run.is_empty() {
        h.push_str("<h2>prezero run: unmodified programs</h2>\n<p>The same programs plainly and under <code>prezero run</code>, interleaved in one run; medians, speed-up = plain / prezero. Peak RSS per process (wait4); held: the most the preload kept populated beyond what the program used.</p>\n");
        h.push_str(&table(
            &[
                "program",
                "figure",
                "runs",
                "plain ms",
                "stdev %",
                "prezero ms",
                "stdev %",
                "speed-up",
                "goal",
                "peak RSS plain",
                "peak RSS prezero",
                "held GiB",
            ],
            run.iter()
                .map(|r| {
                    let goal = match (r["goal"].as_str(), r["goal_met"].as_bool()) {
                        (Some(g), Some(true)) => format!("{g}: met"),
                        (Some(g), _) => format!("{g}: NOT met"),
                        _ => String::new(),
                    };
                    vec![
                        s(&r["program"]),
                        s(&r["figure"]),
                        num(&r["runs"]),
                        num(&r["plain_ms"]),
                        num(&r["plain_stdev_pct"]),
                        num(&r["prezero_ms"]),
                        num(&r["prezero_stdev_pct"]),
                        num(&r["speedup"]),
                        goal,
                        mib(&r["plain_peak_rss_bytes"]),
                        mib(&r["prezero_peak_rss_bytes"]),
                        num(&r["prezero_held_beyond_use_gib"]),
                    ]
                })
                .collect(),
        ));
    }

    let raw: String = std::iter::once(info)
        .chain(all)
        .map(|r| format!("{r}\n"))
        .collect();
    let _ = write!(
        h,
        "<h2>Raw data</h2>\n<p>Every row as <code>prezero bench ... --json</code> printed it.</p>\n<pre id=\"raw\">{}</pre>\n</body></html>\n",
        esc(&raw)
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = include_str!("../tests/fixtures/bench-all.jsonl");

    fn fixture() -> (Value, Vec<Value>) {
        let mut rows: Vec<Value> = FIXTURE
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let info = rows.remove(0);
        (info, rows)
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
            html.matches("<table>").count(),
            html.matches("</table>").count()
        );
        assert!(
            !html.contains("http://")
                || html.matches("http://").count()
                    == html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count(),
            "no network references"
        );
        let tables = html.split("<h2>Raw data</h2>").next().unwrap();
        for r in &rows {
            for (k, v) in r.as_object().unwrap() {
                if let Some(x) = v.as_f64() {
                    if k == "size" || k == "cdf" {
                        continue;
                    }
                    assert!(
                        tables.contains(&format!(">{x}<")),
                        "{k} = {x} of {r} missing from the tables"
                    );
                }
            }
        }
    }

    #[test]
    fn failed_steps_are_named_and_their_sections_left_out() {
        let (info, mut rows) = fixture();
        rows.retain(|r| r["bench"] != "mmap" && r["bench"] != "service");
        rows.insert(
            0,
            serde_json::json!({"bench": "all", "scale": "quick", "steps": [
                {"step": "info", "command": "prezero info --json", "rows": 1, "status": "ok"},
                {"step": "clear", "command": "prezero bench clear --json", "rows": 12, "status": "ok"},
                {"step": "mmap", "command": "prezero bench mmap --json", "rows": 0, "status": "failed",
                 "reason": "page 2MB: 2048 hugetlb pages needed, 0 free",
                 "stderr_tail": ["prezero: page 2MB: 2048 hugetlb pages needed, 0 free <&>"]},
                {"step": "service", "command": "prezero bench service --json", "rows": 0,
                 "status": "skipped", "reason": "needs --reserve"},
            ]}),
        );
        let html = render(&info, &rows);
        assert!(html.contains("1 of 3 steps failed: mmap."), "{html}");
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
        let html = render(&info, &rows);
        assert!(html.contains("<h2>prezero run: unmodified programs</h2>"));
        assert!(html.contains(
            "<td>numpy</td><td>first_pass</td><td>5</td><td>120.5</td><td>2</td><td>40.1</td>\
             <td>3</td><td>3.005</td><td>&gt;= 2x: met</td><td>600 MiB</td><td>610 MiB</td><td>0.5</td>"
        ));
        assert!(!render(&info, &rows[..rows.len() - 1]).contains("prezero run: unmodified"));
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
