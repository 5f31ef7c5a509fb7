//! One section per bench: what it measured, its charts, and every row in a
//! table (three significant figures; the raw data at the end has every digit).

use super::chart::{bar_chart, line_chart, Axis, BarChart, LineChart, Series};
use super::fmt::{count, gbps, ms, pct, secs, si, sig3, table, times, us};
use super::rows::{distinct, Rows};
use crate::units::human_size;

/// A byte-size axis with ticks at the sizes measured.
fn size_axis() -> Axis {
    Axis {
        desc: "bytes",
        log: true,
        label: |x| human_size(x as usize),
        at_data: true,
    }
}

/// "Cache lines touched per 4 KiB", ticks at the counts measured.
fn lines_axis() -> Axis {
    Axis {
        desc: "cache lines touched per 4 KiB",
        log: true,
        label: sig3,
        at_data: true,
    }
}

fn gbps_axis() -> Axis {
    Axis {
        desc: "GB/s",
        log: false,
        label: sig3,
        at_data: false,
    }
}

pub fn clear(r: &Rows) -> String {
    if r.clear.is_empty() {
        return String::new();
    }
    let mut h = String::from("<h2>Clearing: GB/s by size and strategy</h2>\n<p>hot: the same buffer again and again; cold: memory not in cache. Medians; every cleared byte was verified zero.</p>\n");
    for mode in ["hot", "cold"] {
        let rs: Vec<_> = r.clear.iter().filter(|c| c.mode == mode).collect();
        if rs.is_empty() {
            continue;
        }
        let series = distinct(&rs, |c| c.strategy.clone())
            .into_iter()
            .map(|name| Series {
                points: (rs.iter().filter(|c| c.strategy == name))
                    .map(|c| (c.size as f64, c.median_gbps))
                    .collect(),
                name,
            })
            .collect();
        h += &line_chart(&LineChart {
            title: &format!("clear, {mode}"),
            x: size_axis(),
            y: gbps_axis(),
            series,
        });
        h += &table(
            &["mode", "size", "strategy", "mean", "stdev", "median"],
            rs.iter().map(|c| {
                vec![
                    c.mode.clone(),
                    human_size(c.size as usize),
                    c.strategy.clone(),
                    gbps(c.gbps),
                    pct(c.stdev_pct),
                    gbps(c.median_gbps),
                ]
            }),
        );
    }
    h
}

pub fn mmap(r: &Rows) -> String {
    if r.mmap.is_empty() {
        return String::new();
    }
    let mut h = String::from("<h2>Populating memory: mmap + fault-in GB/s by page size</h2>\n<p>perf's <code>bench mem mmap</code>: the kernel's demand faults and populate against prezero's parallel prefault and pool (log scale).</p>\n");
    let pages = distinct(&r.mmap, |m| m.page.clone());
    let series = distinct(&r.mmap, |m| m.function.clone())
        .into_iter()
        .map(|f| {
            let v = (pages.iter())
                .map(|p| {
                    (r.mmap.iter())
                        .find(|m| m.page == *p && m.function == f)
                        .map(|m| m.gbps)
                })
                .collect();
            (f, v)
        })
        .collect();
    h += &bar_chart(&BarChart {
        title: "mmap + populate",
        y: Axis {
            desc: "rate",
            log: true,
            label: gbps,
            at_data: false,
        },
        groups: pages,
        series,
    });
    h += &table(
        &[
            "page", "function", "threads", "size", "rate", "stdev", "host",
        ],
        r.mmap.iter().map(|m| {
            vec![
                m.page.clone(),
                m.function.clone(),
                count(m.threads as f64),
                human_size(m.size as usize),
                gbps(m.gbps),
                pct(m.stdev_pct),
                m.host.clone(),
            ]
        }),
    );
    h
}

pub fn faults(r: &Rows) -> String {
    if r.faults.is_empty() {
        return String::new();
    }
    let mut h = String::from("<h2>Fault tables (as Linux's \"Prezeroing V2\" gives them)</h2>\n<p>Faults per wall second by cache lines touched per 4 KiB: fresh kernel pages against memory prezero keeps and clears.</p>\n");
    let one_thread: Vec<_> = r.faults.iter().filter(|f| f.threads == 1).collect();
    let mut series = Vec::new();
    for page in distinct(&one_thread, |f| f.page.clone()) {
        for src in distinct(&one_thread, |f| f.source.clone()) {
            let points: Vec<(f64, f64)> = (one_thread.iter())
                .filter(|f| f.page == page && f.source == src)
                .map(|f| (f.lines as f64, f.faults_per_wall_s))
                .collect();
            if !points.is_empty() {
                let name = format!("{page} {src}");
                series.push(Series { name, points });
            }
        }
    }
    h += &line_chart(&LineChart {
        title: "faults per wall second",
        x: lines_axis(),
        y: Axis {
            desc: "faults/s",
            log: true,
            label: |x| si(x, ""),
            at_data: false,
        },
        series,
    });
    h += &table(
        &[
            "page",
            "source",
            "size",
            "reps",
            "threads",
            "lines",
            "user",
            "system",
            "wall",
            "faults",
            "faults/CPU s",
            "faults/wall s",
            "rate",
        ],
        r.faults.iter().map(|f| {
            vec![
                f.page.clone(),
                f.source.clone(),
                human_size(f.size as usize),
                count(f.reps as f64),
                count(f.threads as f64),
                count(f.lines as f64),
                secs(f.user_s),
                secs(f.system_s),
                secs(f.wall_s),
                count(f.faults as f64),
                si(f.flt_per_cpu_s, "/s"),
                si(f.faults_per_wall_s, "/s"),
                gbps(f.gbps),
            ]
        }),
    );
    h
}

pub fn pool(r: &Rows) -> String {
    let mut h = String::new();
    if !r.pool_handout.is_empty() {
        h += "<h2>Pool: 2 MiB hand-out latency</h2>\n<p>Cumulative distribution of the time to get 2 MiB of zeroed, usable memory.</p>\n";
        let series = (r.pool_handout.iter())
            .map(|p| Series {
                name: p.source.clone(),
                points: p.cdf.iter().map(|&(t, f)| (t.max(1e-3), f)).collect(),
            })
            .collect();
        h += &line_chart(&LineChart {
            title: "hand-out latency CDF",
            x: Axis {
                desc: "time to hand out 2 MiB",
                log: true,
                label: us,
                at_data: false,
            },
            y: Axis {
                desc: "fraction of hand-outs",
                log: false,
                label: sig3,
                at_data: false,
            },
            series,
        });
        h += &table(
            &["source", "p50", "p99", "max"],
            (r.pool_handout.iter())
                .map(|p| vec![p.source.clone(), us(p.p50_us), us(p.p99_us), us(p.max_us)]),
        );
    }
    if !r.pool_sustained.is_empty() {
        h += "<h2>Pool: sustained zeroed-memory throughput</h2>\n<p>alloc, touch k lines per 4 KiB, free, with W chunks in flight.</p>\n";
        for w in distinct(&r.pool_sustained, |p| p.inflight) {
            let rs: Vec<_> = (r.pool_sustained.iter())
                .filter(|p| p.inflight == w)
                .collect();
            let mut series = Vec::new();
            for src in distinct(&rs, |p| p.source.clone()) {
                for host in distinct(&rs, |p| p.host.clone()) {
                    let points: Vec<(f64, f64)> = (rs.iter())
                        .filter(|p| p.source == src && p.host == host)
                        .map(|p| (p.lines as f64, p.gbps))
                        .collect();
                    if points.len() > 1 {
                        let name = match &host {
                            Some(host) => format!("{src} host-{host}"),
                            None => src.clone(),
                        };
                        series.push(Series { name, points });
                    }
                }
            }
            h += &line_chart(&LineChart {
                title: &format!("sustained, W = {w}"),
                x: lines_axis(),
                y: gbps_axis(),
                series,
            });
        }
        h += &table(
            &["source", "host", "W", "k", "rate", "stdev"],
            r.pool_sustained.iter().map(|p| {
                vec![
                    p.source.clone(),
                    p.host.clone().unwrap_or_default(),
                    count(p.inflight as f64),
                    count(p.lines as f64),
                    gbps(p.gbps),
                    pct(p.stdev_pct),
                ]
            }),
        );
    }
    if !r.interference.is_empty() {
        h += "<h2>Pool: interference</h2>\n<p>A CPU-bound foreground on every core, alone and with the scrubber holding a backlog.</p>\n";
        h += &table(
            &[
                "scrubber",
                "alone",
                "with",
                "slowdown",
                "scrubbed meanwhile",
            ],
            r.interference.iter().map(|i| {
                vec![
                    i.scrubber.clone(),
                    secs(i.alone_s),
                    secs(i.with_s),
                    pct(i.slowdown_pct),
                    human_size(i.scrubbed_bytes_during as usize),
                ]
            }),
        );
    }
    h
}

pub fn template(r: &Rows) -> String {
    if r.template.is_empty() {
        return String::new();
    }
    let mut h = String::from("<h2>Template fill (memmap initialisation)</h2>\n<p>64-byte struct-page records: per-field initialisation, template copies, prezero's streaming fills, and the streaming-store ceiling.</p>\n");
    let layouts = distinct(&r.template, |t| t.layout.clone());
    let series = distinct(&r.template, |t| t.method.clone())
        .into_iter()
        .map(|m| {
            let v = (layouts.iter())
                .map(|l| {
                    (r.template.iter())
                        .find(|t| t.layout == *l && t.method == m)
                        .map(|t| t.ms)
                })
                .collect();
            (m, v)
        })
        .collect();
    h += &bar_chart(&BarChart {
        title: "template fill: time (lower is better)",
        y: Axis {
            desc: "time",
            log: false,
            label: ms,
            at_data: false,
        },
        groups: layouts,
        series,
    });
    h += &table(
        &[
            "layout", "method", "records", "mean", "median", "rate", "stdev",
        ],
        r.template.iter().map(|t| {
            vec![
                t.layout.clone(),
                t.method.clone(),
                count(t.records as f64),
                ms(t.ms),
                ms(t.median_ms),
                gbps(t.gbps),
                pct(t.stdev_pct),
            ]
        }),
    );
    h
}

pub fn service(r: &Rows) -> String {
    if r.service_handout.is_empty()
        && r.scrub.is_empty()
        && r.vm_boot.is_empty()
        && r.vmm.is_empty()
    {
        return String::new();
    }
    let mut h =
        String::from("<h2>prezero serve: pre-zeroed hugetlb memory for whole machines</h2>\n");
    h += &service_handout(r);
    h += &scrub(r);
    h += &vm_boot(r);
    h += &vmm(r);
    h
}

/// The hand-out latencies.
fn service_handout(r: &Rows) -> String {
    if r.service_handout.is_empty() {
        return String::new();
    }
    let mut h = String::new();
    h += "<p>Hand-out latency: request to memory mapped, populated and zero in the client.</p>\n";
    h += &table(
        &["page", "size", "reps", "p50", "p99", "max", "rate at p50"],
        r.service_handout.iter().map(|s| {
            vec![
                s.page.clone(),
                human_size(s.size as usize),
                count(s.reps as f64),
                us(s.p50_us),
                us(s.p99_us),
                us(s.max_us),
                gbps(s.gbps_p50),
            ]
        }),
    );
    h
}

/// The scrubber beside the clearing engine.
fn scrub(r: &Rows) -> String {
    if r.scrub.is_empty() {
        return String::new();
    }
    let mut h = String::new();
    h += "<p>The daemon's scrubber (a segment going back to the uid that released it: streaming stores at SCHED_IDLE, then every byte verified) beside the clearing engine on cold memory. Between uids the daemon gives fresh pages instead, which the kernel zeroes.</p>\n";
    h += &table(
        &[
            "page",
            "bytes",
            "scrub",
            "verify",
            "both",
            "engine cold",
            "scrub / engine",
        ],
        r.scrub.iter().map(|s| {
            vec![
                s.page.clone(),
                human_size(s.bytes as usize),
                gbps(s.scrub_gbps),
                gbps(s.verify_gbps),
                gbps(s.scrub_verify_gbps),
                gbps(s.engine_cold_gbps),
                times(s.ratio),
            ]
        }),
    );
    h
}

/// VM boots: the chart by host and the table.
fn vm_boot(r: &Rows) -> String {
    if r.vm_boot.is_empty() {
        return String::new();
    }
    let mut h = String::new();
    h += "<p>VM boot: N GiB of zeroed, populated 2 MiB memory, from the service and from the kernel paths a VMM uses today.</p>\n";
    let hosts = distinct(&r.vm_boot, |b| b.host.clone());
    let series = distinct(&r.vm_boot, |b| b.path.clone())
        .into_iter()
        .map(|p| {
            let v = (hosts.iter())
                .map(|host| {
                    (r.vm_boot.iter())
                        .find(|b| b.host == *host && b.path == p)
                        .map(|b| b.ms)
                })
                .collect();
            (p, v)
        })
        .collect();
    h += &bar_chart(&BarChart {
        title: "VM boot: time to usable guest memory (lower is better)",
        y: Axis {
            desc: "time",
            log: true,
            label: ms,
            at_data: false,
        },
        groups: hosts.iter().map(|h| format!("host-{h}")).collect(),
        series,
    });
    h += &table(
        &[
            "host",
            "path",
            "size",
            "time",
            "stdev",
            "rate",
            "× best kernel",
        ],
        r.vm_boot.iter().map(|b| {
            vec![
                b.host.clone(),
                b.path.clone(),
                human_size(b.size as usize),
                ms(b.ms),
                pct(b.stdev_pct),
                gbps(b.gbps),
                times(b.x_best_kernel),
            ]
        }),
    );
    h
}

/// QEMU ready on service memory against its own preallocation.
fn vmm(r: &Rows) -> String {
    if r.vmm.is_empty() {
        return String::new();
    }
    let mut h = String::new();
    h += "<p>An unmodified QEMU ready (spawned, guest RAM allocated and populated, QMP answering, stopped with -S) on service memory through <code>prezero client exec</code>, against QEMU's own preallocation, same run.</p>\n";
    h += &table(
        &[
            "path",
            "guest RAM",
            "accel",
            "runs",
            "median",
            "min",
            "max",
            "stdev",
            "× service",
        ],
        r.vmm.iter().map(|v| {
            vec![
                v.path.clone(),
                human_size(v.size as usize),
                v.accel.clone(),
                count(v.runs as f64),
                ms(v.ms),
                ms(v.min_ms),
                ms(v.max_ms),
                pct(v.stdev_pct),
                times(v.x_service),
            ]
        }),
    );
    h
}

pub fn run(r: &Rows) -> String {
    if r.run.is_empty() {
        return String::new();
    }
    let mut h = String::from("<h2>prezero run: unmodified programs</h2>\n<p>The same programs plainly, under <code>prezero run</code> and under <code>prezero run --lazy</code> (where the row has that arm), interleaved in one run; medians, speed-up = plain / the arm (for a memory figure: plain / the arm's, above 1 is less). Peak RSS per process (wait4); held: the most the preload kept populated beyond what the program used.</p>\n");
    let goal = |g: &Option<String>, met: Option<bool>| match (g, met) {
        (Some(g), Some(true)) => format!("{g}: met"),
        (Some(g), _) => format!("{g}: NOT met"),
        _ => String::new(),
    };
    h += &table(
        &[
            "program",
            "figure",
            "runs",
            "plain",
            "stdev",
            "prezero",
            "stdev",
            "speed-up",
            "goal",
            "lazy",
            "stdev",
            "speed-up",
            "goal",
            "peak RSS plain",
            "peak RSS prezero",
            "peak RSS lazy",
            "held",
        ],
        r.run.iter().map(|p| {
            // The `_ms` fields hold mebibytes for a memory figure.
            let value = |v: f64| match p.unit.as_deref() {
                Some("MiB") => human_size((v * (1u64 << 20) as f64) as usize),
                _ => ms(v),
            };
            let or_blank = |v: Option<String>| v.unwrap_or_default();
            vec![
                p.program.clone(),
                p.figure.clone(),
                count(p.runs as f64),
                value(p.plain_ms),
                pct(p.plain_stdev_pct),
                value(p.prezero_ms),
                pct(p.prezero_stdev_pct),
                times(p.speedup),
                goal(&p.goal, p.goal_met),
                or_blank(p.lazy_ms.map(value)),
                or_blank(p.lazy_stdev_pct.map(pct)),
                or_blank(p.lazy_speedup.map(times)),
                goal(&p.lazy_goal, p.lazy_goal_met),
                human_size(p.plain_peak_rss_bytes as usize),
                human_size(p.prezero_peak_rss_bytes as usize),
                or_blank(p.lazy_peak_rss_bytes.map(|b| human_size(b as usize))),
                (p.prezero_held_beyond_use_gib).map_or_else(String::new, |g| {
                    human_size((g * (1u64 << 30) as f64) as usize)
                }),
            ]
        }),
    );
    h
}
