//! The answer first: what prezero gives on this machine, one line per
//! mechanism, as how many times faster it is than the kernel's way and
//! glibc's, with the machine and the profile in force beside it.

use std::fmt::Write;

use super::fmt::{count, esc, gbps, ms, times, us};
use super::rows::{Class, Info, Rows};
use crate::units::human_size;

/// One measurement and what made it (a strategy, a source, a path).
struct Figure {
    value: f64,
    by: String,
}

/// The figure of the best of `candidates`.
fn best<'a>(
    candidates: impl Iterator<Item = (&'a str, f64)>,
    higher_is_better: bool,
) -> Option<Figure> {
    candidates
        .map(|(by, value)| Figure {
            value,
            by: by.to_string(),
        })
        .reduce(|a, b| {
            if (b.value > a.value) == higher_is_better && b.value != a.value {
                b
            } else {
                a
            }
        })
}

/// One line of the headline: prezero's figure and the baselines'.
struct Line {
    what: String,
    show: fn(f64) -> String,
    higher_is_better: bool,
    prezero: Figure,
    kernel: Option<Figure>,
    glibc: Option<Figure>,
}

impl Line {
    /// How many times faster prezero is than `base` (above 1: prezero wins).
    fn speedup(&self, base: &Figure) -> f64 {
        if self.higher_is_better {
            self.prezero.value / base.value
        } else {
            base.value / self.prezero.value
        }
    }
}

/// The clearing strategies that do what the kernel does: a 4 KiB clear per
/// page, or its extent clear in resched batches (`rep-stosb-8m`, `-32m`).
fn kernel_like(strategy: &str) -> bool {
    strategy == "page-at-a-time" || strategy.ends_with("-8m") || strategy.ends_with("-32m")
}

/// Clearing in `mode` at the largest (or smallest) size Auto was measured at.
fn clear(r: &Rows, mode: &str, largest: bool) -> Option<Line> {
    let rs: Vec<_> = r.clear.iter().filter(|c| c.mode == mode).collect();
    let auto = rs.iter().filter(|c| c.strategy == "auto");
    let at = if largest {
        auto.max_by_key(|c| c.size)
    } else {
        auto.min_by_key(|c| c.size)
    }?;
    let same = || rs.iter().filter(|c| c.size == at.size);
    let temperature = if mode == "hot" {
        "in cache"
    } else {
        "not in cache"
    };
    Some(Line {
        what: format!(
            "clear {} ({mode}: {temperature})",
            human_size(at.size as usize)
        ),
        show: gbps,
        higher_is_better: true,
        prezero: Figure {
            value: at.median_gbps,
            by: "auto".into(),
        },
        kernel: best(
            same()
                .filter(|c| kernel_like(&c.strategy))
                .map(|c| (c.strategy.as_str(), c.median_gbps)),
            true,
        ),
        glibc: best(
            same()
                .filter(|c| c.strategy == "memset")
                .map(|c| ("memset", c.median_gbps)),
            true,
        ),
    })
}

/// The first of `values` that is `preferred`, else the first.
fn prefer<T: PartialEq + Clone>(values: impl Iterator<Item = T>, preferred: T) -> Option<T> {
    let v: Vec<T> = values.collect();
    v.iter().find(|x| **x == preferred).or(v.first()).cloned()
}

/// First touch of fresh memory: kernel faults against memory prezero keeps
/// mapped and clears (prezeroing), one thread, fewest lines touched.
fn first_touch(r: &Rows) -> Option<Line> {
    let page = prefer(r.faults.iter().map(|f| f.page.as_str()), "4KB")?;
    let rs: Vec<_> = (r.faults.iter())
        .filter(|f| f.page == page && f.threads == 1)
        .collect();
    let lines = rs.iter().map(|f| f.lines).min()?;
    let of = |source: &str| {
        best(
            (rs.iter())
                .filter(|f| f.lines == lines && f.source == source)
                .map(|f| (f.source.as_str(), f.gbps)),
            true,
        )
    };
    let size = rs.first().map_or(0, |f| f.size);
    Some(Line {
        what: format!(
            "first touch of {} in {page} pages ({lines} line/page)",
            human_size(size as usize)
        ),
        show: gbps,
        higher_is_better: true,
        prezero: of("prezero")?,
        kernel: of("kernel"),
        glibc: None,
    })
}

/// mmap + populate: prezero's prefault on every core against the kernel's
/// demand faults and MADV_POPULATE_WRITE.
fn populate(r: &Rows) -> Option<Line> {
    let page = prefer(r.mmap.iter().map(|m| m.page.as_str()), "4KB")?;
    let rs: Vec<_> = r.mmap.iter().filter(|m| m.page == page).collect();
    let ours = rs.iter().find(|m| m.function == "populate-parallel")?;
    Some(Line {
        what: format!(
            "mmap + populate {} of {page} pages ({} threads)",
            human_size(ours.size as usize),
            ours.threads
        ),
        show: gbps,
        higher_is_better: true,
        prezero: Figure {
            value: ours.gbps,
            by: "prefault".into(),
        },
        kernel: best(
            (rs.iter())
                .filter(|m| m.function == "demand" || m.function == "populate")
                .map(|m| (m.function.as_str(), m.gbps)),
            true,
        ),
        glibc: None,
    })
}

/// 2 MiB of zeroed memory, median hand-out time.
fn handout(r: &Rows) -> Option<Line> {
    let of = |pick: fn(&str) -> bool| {
        best(
            (r.pool_handout.iter())
                .filter(|p| pick(&p.source))
                .map(|p| (p.source.as_str(), p.p50_us)),
            false,
        )
    };
    Some(Line {
        what: "hand out 2 MiB of zeroed memory (median)".into(),
        show: us,
        higher_is_better: false,
        prezero: of(|s| s.starts_with("pool"))?,
        kernel: of(|s| s.starts_with("mmap")),
        glibc: of(|s| s == "calloc"),
    })
}

/// Initialising struct-page records: prezero's template fills against the
/// kernel's per-field way.
fn template(r: &Rows) -> Option<Line> {
    let layout = prefer(r.template.iter().map(|t| t.layout.as_str()), "4k")?;
    let rs: Vec<_> = r.template.iter().filter(|t| t.layout == layout).collect();
    let of = |pick: fn(&str) -> bool| {
        best(
            (rs.iter())
                .filter(|t| pick(&t.method))
                .map(|t| (t.method.as_str(), t.median_ms)),
            false,
        )
    };
    let records = rs.first().map_or(0, |t| t.records);
    Some(Line {
        what: format!(
            "initialise {} struct pages ({layout})",
            count(records as f64)
        ),
        show: ms,
        higher_is_better: false,
        prezero: of(|m| m == "template-words" || m == "template-stream")?,
        kernel: of(|m| m == "per-field"),
        glibc: None,
    })
}

/// A VM's memory from `prezero serve` against the kernel paths a VMM uses.
fn vm_boot(r: &Rows) -> Option<Line> {
    let host = prefer(r.vm_boot.iter().map(|b| b.host.as_str()), "warm")?;
    let rs: Vec<_> = r.vm_boot.iter().filter(|b| b.host == host).collect();
    let ours = rs.iter().find(|b| b.path == "prezero serve")?;
    Some(Line {
        what: format!(
            "VM boot: {} of guest memory ready (host-{host})",
            human_size(ours.size as usize)
        ),
        show: ms,
        higher_is_better: false,
        prezero: Figure {
            value: ours.ms,
            by: "prezero serve".into(),
        },
        kernel: best(
            (rs.iter())
                .filter(|b| b.path != ours.path)
                .map(|b| (b.path.as_str(), b.ms)),
            false,
        ),
        glibc: None,
    })
}

/// An unmodified QEMU on service memory against its own preallocation.
fn qemu(r: &Rows) -> Option<Line> {
    let ours = r.vmm.iter().find(|v| v.path.starts_with("prezero"))?;
    Some(Line {
        what: format!("QEMU ready with {} of RAM", human_size(ours.size as usize)),
        show: ms,
        higher_is_better: false,
        prezero: Figure {
            value: ours.ms,
            by: "prezero client exec".into(),
        },
        kernel: best(
            (r.vmm.iter())
                .filter(|v| v.path != ours.path)
                .map(|v| (v.path.as_str(), v.ms)),
            false,
        ),
        glibc: None,
    })
}

fn figure_cell(show: fn(f64) -> String, f: &Figure) -> String {
    format!("{}<small>{}</small>", esc(&show(f.value)), esc(&f.by))
}

fn ratio_cell(x: f64) -> String {
    let class = if x >= 1.1 {
        "win"
    } else if x <= 0.9 {
        "loss"
    } else {
        "even"
    };
    format!("<td class=\"x {class}\">{}</td>", esc(&times(x)))
}

/// The headline section.
pub fn render(info: &Info, r: &Rows) -> String {
    let lines: Vec<Line> = [
        clear(r, "cold", true),
        clear(r, "hot", false),
        first_touch(r),
        populate(r),
        handout(r),
        template(r),
        vm_boot(r),
        qemu(r),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut h = String::from(
        "<section id=\"headline\"><h2>What prezero gives on this machine</h2><div class=\"headline\"><div>\n",
    );
    if lines.is_empty() {
        h += "<p>No row of this run compares prezero with the kernel or glibc.</p>\n";
    } else {
        h += "<table class=\"headline\"><tr><th class=\"what\">task</th><th>prezero</th><th>kernel</th><th>× kernel</th><th>glibc</th><th>× glibc</th></tr>\n";
        for l in &lines {
            let _ = write!(
                h,
                "<tr><td class=\"what\">{}</td><td class=\"ours\">{}</td>",
                esc(&l.what),
                figure_cell(l.show, &l.prezero)
            );
            for base in [&l.kernel, &l.glibc] {
                match base {
                    Some(b) => {
                        let _ = write!(h, "<td>{}</td>", figure_cell(l.show, b));
                        h += &ratio_cell(l.speedup(b));
                    }
                    None => h += "<td class=\"none\">–</td><td class=\"none\"></td>",
                }
            }
            h += "</tr>\n";
        }
        h += "</table>\n<p class=\"note\">× : how many times faster prezero is than the baseline \
              (by time or by rate; above 1, prezero is faster). The baseline is the best of the \
              kernel's ways measured; glibc's is <code>memset</code> or <code>calloc</code>. \
              Medians; the sections below hold every row.</p>\n";
    }
    h += "</div>\n";
    h += &machine(info, r);
    h += "</div></section>\n";
    h
}

/// The classes of one temperature: "avx512 < 2 KiB, rep-stosb < 65 MiB, avx512-nt".
fn classes(cs: &[Class]) -> String {
    cs.iter()
        .map(|c| match c.below {
            Some(b) => format!("{} &lt; {}", esc(&c.kernel), human_size(b as usize)),
            None => esc(&c.kernel),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The machine, the profile and the run, beside the headline table.
fn machine(info: &Info, r: &Rows) -> String {
    let mut h = String::from("<aside class=\"machine\">\n");
    let Some(cpu) = &info.cpu else {
        h += "<p>The machine is not described: <code>prezero info</code> gave nothing.</p>\n";
        h += "</aside>\n";
        return h;
    };
    let caches: Vec<String> = (cpu.caches.iter())
        .map(|c| format!("L{} {}", c.level, human_size(c.size as usize)))
        .collect();
    let on = |m: &std::collections::BTreeMap<String, bool>| -> Vec<String> {
        m.iter()
            .filter(|(_, v)| **v)
            .map(|(k, _)| k.clone())
            .collect()
    };
    let used = on(&cpu.features);
    let _ = writeln!(
        h,
        "<h3>Machine</h3>\n<p><b>{}</b><br>{}, family {} model {}, {} logical CPUs<br>caches {}<br>kernel {}, THP {}<br>features in use: {}</p>",
        esc(&cpu.model_name),
        esc(&cpu.vendor),
        cpu.family,
        cpu.model,
        cpu.logical_cpus,
        esc(&caches.join(", ")),
        esc(info.memory.kernel_release.as_deref().unwrap_or("?")),
        esc(info.memory.thp_mode.as_deref().unwrap_or("?")),
        esc(&used.join(" ")),
    );
    // A run under PREZERO_CPU measured a narrower CPU than this one: say so.
    if let Some(mask) = &cpu.mask {
        let hidden: Vec<String> = (on(&cpu.detected).into_iter())
            .filter(|f| !used.contains(f))
            .collect();
        let _ = writeln!(
            h,
            "<p class=\"failed\"><b>Measured as PREZERO_CPU={} asks</b>: the features {} were hidden.</p>",
            esc(mask),
            esc(&hidden.join(" "))
        );
    }
    let p = &info.profile;
    let _ = writeln!(
        h,
        "<h3>Auto profile</h3>\n<p>{}</p>\n<table class=\"profile\"><tr><td>hot</td><td>{}</td></tr><tr><td>cold</td><td>{}</td></tr><tr><td>unknown</td><td>{}</td></tr></table>",
        esc(p.source.as_deref().unwrap_or("?")),
        classes(&p.hot),
        classes(&p.cold),
        classes(&p.unknown),
    );
    if let Some(run) = &r.all {
        let _ = writeln!(
            h,
            "<p>A <code>bench all</code> run at {} scale.</p>",
            esc(&run.scale)
        );
    }
    h += "</aside>\n";
    h
}
