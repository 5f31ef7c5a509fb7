//! `prezero info`: everything detected, and what Auto does with it.

use anyhow::Result;
use serde_json::{json, Value};

use prezero::{Kernel, Streamer, Temperature, TemplateChoice};

use crate::table::Table;
use crate::units::{fmt_size, human_size};

#[derive(clap::Args)]
pub struct Args {
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// The size classes `info` reports the Auto choice for.
const CLASSES: [usize; 9] = [
    4 << 10,
    64 << 10,
    1 << 20,
    2 << 20,
    8 << 20,
    32 << 20,
    64 << 20,
    256 << 20,
    1 << 30,
];

pub fn run(args: &Args) -> Result<()> {
    let v = collect();
    if args.json {
        println!("{v}");
    } else {
        print_text(&v);
    }
    Ok(())
}

fn collect() -> Value {
    let c = prezero::cpu();
    let m = prezero::memory();
    let size_classes = prezero::active_size_classes();
    let template = template_in_force();
    let classes = |t: Temperature| -> Value {
        size_classes
            .classes(t)
            .iter()
            .map(|s| json!({"below": if s.below == usize::MAX { Value::Null } else { json!(s.below) }, "kernel": s.kernel.name()}))
            .collect()
    };
    json!({
        "service": service(),
        "cpu": {
            "vendor": c.vendor,
            "model_name": c.model_name,
            "family": c.family,
            "model": c.model,
            "stepping": c.stepping,
            "logical_cpus": c.logical_cpus,
            "features": feature_map(&c.features),
            "detected": feature_map(&c.detected),
            "mask": c.mask,
            "identity": c.identity(),
            "dc_zva_block": c.dc_zva_block,
            "caches": c.caches.iter().map(|k| json!({"level": k.level, "type": k.kind, "size": k.size})).collect::<Vec<_>>(),
            "cache_source": c.cache_source,
        },
        "memory": {
            "page_size": c.page_size,
            "thp_mode": m.thp.mode,
            "thp_pmd_size": m.thp.pmd_size,
            "hugetlb": m.hugetlb.iter().map(|p| json!({"page_size": p.page_size, "total": p.total, "free": p.free,
                                                       "reserved": p.reserved, "surplus": p.surplus})).collect::<Vec<_>>(),
            "numa_nodes": m.numa_nodes,
            "kernel_release": m.kernel_release,
        },
        "numa": prezero::numa::Topology::read().nodes.iter().map(|n| json!({
            "node": n.id, "cpus": n.cpus, "has_memory": n.has_memory,
            "mem_total": n.mem_total, "mem_free": n.mem_free,
            "hugetlb": n.hugetlb.iter().map(|h| json!({"page_size": h.page_size, "total": h.total, "free": h.free,
                                                        "surplus": h.surplus})).collect::<Vec<_>>(),
            "distances": n.distances,
        })).collect::<Vec<_>>(),
        "kernels": Kernel::ALL.iter().map(|k| json!({
            "name": k.name(), "available": k.is_available(), "streaming": k.is_streaming(), "needs": k.needs(),
        })).collect::<Vec<_>>(),
        "forced": prezero::forced_kernel().map(|k| k.name()),
        "profile": {
            "source": prezero::profile_source(),
            "unknown": classes(Temperature::Unknown),
            "hot": classes(Temperature::Hot),
            "cold": classes(Temperature::Cold),
        },
        "template": {
            "stream": template.stream.name(),
            "temporal": template.temporal.name(),
            "stream_from": match template.stream_from { usize::MAX => Value::Null, b => json!(b) },
            "source": if prezero::active_template_choice().is_some() { "profile" } else { "built-in" },
            "kernels": prezero::CopyKernel::ALL.iter().map(|k| json!({
                "name": k.name(), "available": k.is_available(), "streaming": k.is_streaming(), "needs": k.needs(),
            })).collect::<Vec<_>>(),
        },
        "auto": CLASSES.iter().map(|&n| json!({
            "size": n,
            "unknown": prezero::auto_kernel(n, Temperature::Unknown).name(),
            "hot": prezero::auto_kernel(n, Temperature::Hot).name(),
            "cold": prezero::auto_kernel(n, Temperature::Cold).name(),
        })).collect::<Vec<_>>(),
    })
}

/// One line per NUMA node: its CPUs, memory, hugetlb pages and distances.
fn print_numa(nodes: &Value) {
    let size = |v: &Value| fmt_size(v.as_u64().unwrap_or(0) as usize);
    let human = |v: &Value| human_size(v.as_u64().unwrap_or(0) as usize);
    for n in nodes.as_array().into_iter().flatten() {
        let cpus: Vec<usize> = n["cpus"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.as_u64().map(|c| c as usize))
            .collect();
        let hugetlb: Vec<String> = n["hugetlb"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|h| {
                format!(
                    "{} (total {}, free {}, surplus {})",
                    size(&h["page_size"]),
                    h["total"],
                    h["free"],
                    h["surplus"]
                )
            })
            .collect();
        let distances: Vec<String> = n["distances"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| d.to_string())
            .collect();
        println!(
            "NUMA     node {}: CPUs {}, memory {} ({} free){}; hugetlb {}; distances {}",
            n["node"],
            if cpus.is_empty() {
                "none".to_string()
            } else {
                cpu_list(&cpus)
            },
            human(&n["mem_total"]),
            human(&n["mem_free"]),
            if n["has_memory"] == false {
                ", none usable"
            } else {
                ""
            },
            if hugetlb.is_empty() {
                "none".to_string()
            } else {
                hugetlb.join(", ")
            },
            distances.join(" ")
        );
    }
}

/// Ascending ids as the kernel writes lists: `0-3,8`.
fn cpu_list(ids: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            ids[i].to_string()
        } else {
            format!("{}-{}", ids[i], ids[j])
        });
        i = j + 1;
    }
    out.join(",")
}

fn feature_map(f: &prezero::cpu::Features) -> Value {
    f.list()
        .into_iter()
        .map(|(name, on)| (name.to_string(), Value::from(on)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn print_text(v: &Value) {
    print_cpu(&v["cpu"]);
    print_memory(&v["memory"]);
    print_numa(&v["numa"]);
    println!();
    print_kernels(&v["kernels"]);
    println!();
    print_auto(v);
    print_template(&v["template"]);
    print_service(&v["service"]);
}

/// The CPU: its model, its features (and those `PREZERO_CPU` hides), its caches.
fn print_cpu(cpu: &Value) {
    println!(
        "CPU      {} ({}, family {} model {} stepping {}), {} logical CPUs",
        cpu["model_name"].as_str().unwrap_or("?"),
        cpu["vendor"].as_str().unwrap_or("?"),
        cpu["family"],
        cpu["model"],
        cpu["stepping"],
        cpu["logical_cpus"]
    );
    let present = |key: &str, want: bool| -> Vec<String> {
        cpu[key]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(name, on)| {
                on.as_bool() == Some(want)
                    && (key == "features" || cpu["features"][name.as_str()] != true)
            })
            .map(|(name, _)| name.clone())
            .collect()
    };
    println!("Features {}", present("features", true).join(" "));
    if let Some(mask) = cpu["mask"].as_str() {
        let hidden = present("detected", true);
        println!(
            "         as PREZERO_CPU={mask} asks; hidden: {}",
            if hidden.is_empty() {
                "none".to_string()
            } else {
                hidden.join(" ")
            }
        );
    }
    let caches: Vec<String> = cpu["caches"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "L{} {} {}",
                c["level"],
                c["type"].as_str().unwrap_or(""),
                fmt_size(c["size"].as_u64().unwrap_or(0) as usize)
            )
        })
        .collect();
    println!(
        "Caches   {} (from {})",
        caches.join(", "),
        cpu["cache_source"].as_str().unwrap_or("?")
    );
}

/// Pages, NUMA nodes, the kernel and its hugetlb pools.
fn print_memory(mem: &Value) {
    println!(
        "Pages    base {}, THP {} ({}), NUMA nodes {}, kernel {}",
        fmt_size(mem["page_size"].as_u64().unwrap_or(0) as usize),
        mem["thp_mode"].as_str().unwrap_or("?"),
        fmt_size(mem["thp_pmd_size"].as_u64().unwrap_or(0) as usize),
        mem["numa_nodes"],
        mem["kernel_release"].as_str().unwrap_or("?")
    );
    // The kernel's words (/proc/meminfo's HugePages_*): "reserved" is its
    // Rsvd, free pages promised to mappings not yet faulted in.
    for p in mem["hugetlb"].as_array().into_iter().flatten() {
        println!(
            "Hugetlb  {:>5}: total {}, free {} (reserved {}), surplus {}",
            fmt_size(p["page_size"].as_u64().unwrap_or(0) as usize),
            p["total"],
            p["free"],
            p["reserved"].as_u64().map_or("?".into(), |r| r.to_string()),
            p["surplus"]
        );
    }
}

/// The clearing kernels: which this CPU has, and what each needs.
fn print_kernels(list: &Value) {
    println!("Kernels");
    let kernels = Table::new(" ")
        .gap("  ")
        .left(10)
        .left(13)
        .left(9)
        .gap(" needs ")
        .left(0);
    for k in list.as_array().into_iter().flatten() {
        kernels.print(&[
            k["name"].as_str().unwrap_or(""),
            if k["available"].as_bool() == Some(true) {
                "available"
            } else {
                "unavailable"
            },
            if k["streaming"].as_bool() == Some(true) {
                "streaming"
            } else {
                "temporal"
            },
            k["needs"].as_str().unwrap_or(""),
        ]);
    }
}

/// The strategy auto picks by size and temperature, and whence.
fn print_auto(v: &Value) {
    match v["forced"].as_str() {
        Some(k) => println!("Auto     forced to {k} by PREZERO_STRATEGY"),
        None => println!(
            "Auto     profile: {}",
            v["profile"]["source"].as_str().unwrap_or("")
        ),
    }
    let auto = Table::new(" ")
        .gap("  ")
        .right(6)
        .gap("  ")
        .left(10)
        .left(10)
        .left(10);
    auto.print(&["size", "unknown", "hot", "cold"]);
    for a in v["auto"].as_array().into_iter().flatten() {
        auto.print(&[
            fmt_size(a["size"].as_u64().unwrap_or(0) as usize).as_str(),
            a["unknown"].as_str().unwrap_or(""),
            a["hot"].as_str().unwrap_or(""),
            a["cold"].as_str().unwrap_or(""),
        ]);
    }
}

/// The template kernel in force, and those this CPU has.
fn print_template(t: &Value) {
    let available: Vec<&str> = t["kernels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|k| k["available"].as_bool() == Some(true))
        .filter_map(|k| k["name"].as_str())
        .collect();
    println!(
        "\nTemplate {} ({}); kernels here: {}",
        template_choice(&template_in_force()),
        t["source"].as_str().unwrap_or(""),
        available.join(" ")
    );
}

/// The tenant cgroups of the `prezero serve` at `$PREZERO_SOCKET` (or the
/// default socket), if one answers: what each holds and what its cleaning
/// cost (`null` without a daemon).
fn service() -> Value {
    let Ok(client) = prezero_service::Client::connect_default() else {
        return Value::Null;
    };
    match client.stats() {
        Ok(s) => json!({
            "socket": client.path().display().to_string(),
            "cgroups": crate::client::cgroups::json_rows(&s),
        }),
        Err(_) => Value::Null,
    }
}

/// The service's tenant cgroups, a line each.
fn print_service(v: &Value) {
    let Some(socket) = v["socket"].as_str() else {
        return;
    };
    let rows = v["cgroups"].as_array().cloned().unwrap_or_default();
    println!("\nService  {socket}: {} tenant cgroups", rows.len());
    let b = |r: &Value, k: &str| fmt_size(r[k].as_u64().unwrap_or(0) as usize);
    let ms = |r: &Value, k: &str| r[k].as_u64().unwrap_or(0) as f64 / 1e6;
    for r in &rows {
        println!(
            "  {}: {} charged to it, {} lent, {} prepared; cleaned {} with {:.1} ms of CPU \
             in it, {:.1} ms in the daemon's",
            r["cgroup"].as_str().unwrap_or("").escape_debug(),
            b(r, "placed"),
            b(r, "lent"),
            b(r, "prepared"),
            b(r, "cleaned_bytes"),
            ms(r, "cpu_in_ns"),
            ms(r, "cpu_daemon_ns")
        );
    }
}

/// "avx2 below 8M, avx2-nt from there": the template kernels a choice (in
/// force, or a calibrated profile's) uses.
pub fn template_choice(t: &TemplateChoice) -> String {
    format!(
        "{} below {}, {} from there",
        t.temporal.name(),
        match t.stream_from {
            usize::MAX => "every size".into(),
            b => fmt_size(b),
        },
        t.stream.name()
    )
}

/// The template kernels this process uses: the profile's choice or the
/// built-in one, each as this CPU runs it.
fn template_in_force() -> TemplateChoice {
    TemplateChoice {
        stream: Streamer::auto().kernel(),
        temporal: Streamer::auto_temporal().kernel(),
        stream_from: prezero::template::stream_from(),
    }
}
