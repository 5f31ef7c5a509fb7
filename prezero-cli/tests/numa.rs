//! Placement, as a user on a host of several NUMA nodes sees it: what
//! `prezero serve` hands out for node N is on node N (asked by node, by
//! `numactl --cpunodebind=N --membind=N prezero client exec`, or `--node N`),
//! and a block `prezero run` hands out is placed as the kernel would have
//! placed it (a thread's own node, `numactl --membind`, `--interleave`). On a
//! machine of one node these skip with a reason; `scripts/guest-tests.sh` runs
//! them in guests of 2 and 4 nodes, and prints each scenario's placement,
//! prezero's beside the kernel's.

mod common;

/// Says why a test checks nothing here; in a NUMA guest of
/// `scripts/guest-tests.sh` (`PREZERO_REQUIRE=numa`) that is a failure,
/// whatever the reason (nodes, numactl, pages on each).
fn skip(why: &str) {
    prezero_testkit::skip("numa", why);
}

use std::process::Command;

use common::{bin, Daemon, MB, PAGE};
use prezero::numa::{placement, run_on_node, Placement, Topology};
use prezero::{HugetlbReservation, PageKind};
use prezero_service::{AllocOptions, NodeChoice, Source};

/// Nodes with memory and CPUs, if there are two or more; else why not.
fn nodes() -> Result<Vec<u32>, String> {
    let t = Topology::read();
    let v: Vec<u32> = t
        .nodes
        .iter()
        .filter(|n| n.has_memory && !n.cpus.is_empty())
        .map(|n| n.id)
        .collect();
    if v.len() < 2 {
        return Err(format!(
            "{} NUMA node(s) with memory and CPUs here (the guests of scripts/guest-tests.sh have more)",
            v.len()
        ));
    }
    Ok(v)
}

fn numactl() -> bool {
    Command::new("numactl")
        .arg("--show")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// "node:pages node:pages ... absent:N hidden:N", as the roles print placements.
fn show(p: &Placement) -> String {
    let mut s: Vec<String> = p.on.iter().map(|(n, c)| format!("{n}:{c}")).collect();
    s.push(format!("absent:{}", p.absent));
    s.push(format!("hidden:{}", p.hidden));
    s.join(" ")
}

fn parse(line: &str) -> Placement {
    let mut p = Placement::default();
    for w in line.split_whitespace() {
        let (k, v) = w.split_once(':').expect("node:pages");
        let v: usize = v.parse().unwrap();
        match k {
            "absent" => p.absent = v,
            "hidden" => p.hidden = v,
            n => p.on.push((n.parse().unwrap(), v)),
        }
    }
    p
}

const BLOCK: usize = 128 * MB;

/// The program of the `prezero run` scenarios (run by the tests below, as
/// itself): a thread on node FROM callocs, touches and frees 128 MiB ROUNDS
/// times (3 unless said), then a thread on node TO callocs and touches 128
/// MiB; it prints where that block's pages are.
#[test]
#[ignore = "the program of prezero_run_places_a_block_as_the_kernel_would"]
fn calloc_role() {
    let Ok(spec) = std::env::var("PREZERO_NUMA_ROLE") else {
        return;
    };
    let mut words = spec.split(' ').map(|w| w.parse::<u32>().unwrap());
    let (from, to) = (words.next().unwrap(), words.next().unwrap());
    let rounds = words.next().unwrap_or(3);
    let t = Topology::read();
    let t2 = t.clone();
    std::thread::spawn(move || {
        run_on_node(&t2, from).unwrap();
        for _ in 0..rounds {
            let mut v = vec![0u8; BLOCK];
            for i in (0..BLOCK).step_by(4096) {
                v[i] = 1;
            }
            drop(std::hint::black_box(v));
        }
    })
    .join()
    .unwrap();
    let line = std::thread::spawn(move || {
        run_on_node(&t, to).unwrap();
        let mut v = vec![0u8; BLOCK];
        assert!(v.iter().all(|&b| b == 0), "calloc'd memory not zero");
        for i in (0..BLOCK).step_by(4096) {
            v[i] = 2;
        }
        // The block need not start on a page: its last page too.
        v[BLOCK - 1] = 2;
        show(&placement(v.as_ptr(), BLOCK, 4096).unwrap())
    })
    .join()
    .unwrap();
    // On a line of its own: the harness's "test ... " has no newline yet.
    println!("\nplacement {line}");
}

/// The program of the `--lazy` scenario the kernel's own fault is measured
/// by: the main thread stays on node FROM for 2 s (where the lazy mode's
/// reserve fills from start-up), then a thread on node TO maps 128 MiB with
/// `mmap` and touches it; it prints where the pages are.
#[test]
#[ignore = "the program of prezero_run_lazy_places_blocks_as_the_kernel_would"]
fn mmap_role() {
    let Ok(spec) = std::env::var("PREZERO_NUMA_ROLE") else {
        return;
    };
    let (from, to) = spec.split_once(' ').unwrap();
    let (from, to): (u32, u32) = (from.parse().unwrap(), to.parse().unwrap());
    let t = Topology::read();
    run_on_node(&t, from).unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let line = std::thread::spawn(move || {
        run_on_node(&t, to).unwrap();
        // SAFETY: a new private anonymous mapping, ours alone.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BLOCK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: the mapping above, BLOCK bytes, read and written by this
        // thread only.
        let v = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), BLOCK) };
        assert!(v.iter().all(|&b| b == 0), "mapped memory not zero");
        for i in (0..BLOCK).step_by(4096) {
            v[i] = 3;
        }
        show(&placement(v.as_ptr(), BLOCK, 4096).unwrap())
    })
    .join()
    .unwrap();
    println!("\nplacement {line}");
}

/// How a role runs.
#[derive(Clone, Copy, PartialEq)]
enum Arm {
    Kernel,
    Run,
    Lazy,
}

/// Runs `role` (`calloc_role`, `mmap_role`) with `spec` under `wrap` (a
/// numactl prefix, or none), as `arm` says, and returns where the block
/// landed, and what it printed on stderr.
fn role_placement(role: &str, spec: &str, wrap: &[&str], arm: Arm) -> (Placement, String) {
    let me = std::env::current_exe().unwrap();
    let mut argv: Vec<String> = wrap.iter().map(|s| s.to_string()).collect();
    match arm {
        Arm::Kernel => {}
        Arm::Run => argv.extend([bin().into(), "run".into(), "--".into()]),
        Arm::Lazy => argv.extend([bin(), "run", "--lazy", "--"].map(String::from)),
    }
    argv.push(me.to_string_lossy().into_owned());
    argv.extend(["--exact", role, "--ignored", "--nocapture"].map(String::from));
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .env("PREZERO_NUMA_ROLE", spec)
        .env("PREZERO_STATS", "1")
        // No history: what an earlier run took must not change this one.
        .env("PREZERO_HISTORY", "0")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{argv:?}: {text}{err}");
    let line = text
        .lines()
        .find_map(|l| l.split_once("placement ").map(|(_, p)| p))
        .unwrap_or_else(|| panic!("{argv:?} printed no placement: {text}"));
    (parse(line), err)
}

fn calloc_placement(wrap: &[&str], prezero: bool, from: u32, to: u32) -> Placement {
    let arm = if prezero { Arm::Run } else { Arm::Kernel };
    role_placement("calloc_role", &format!("{from} {to}"), wrap, arm).0
}

#[test]
fn prezero_run_places_a_block_as_the_kernel_would() {
    let nodes = match nodes() {
        Ok(n) => n,
        Err(why) => return skip(&format!("prezero run placement ({why})")),
    };
    if !numactl() {
        return skip("prezero run placement (no numactl)");
    }
    let (from, to) = (nodes[0], nodes[nodes.len() - 1]);
    let all = nodes.len();
    let bind = format!("--membind={to}");
    let prefer = format!("--preferred={to}");
    let scenarios: [(&str, Vec<&str>); 4] = [
        ("default", vec![]),
        ("membind", vec!["numactl", bind.as_str()]),
        ("preferred", vec!["numactl", prefer.as_str()]),
        ("interleave", vec!["numactl", "--interleave=all"]),
    ];
    for (name, wrap) in &scenarios {
        let kernel = calloc_placement(wrap, false, from, to);
        let ours = calloc_placement(wrap, true, from, to);
        println!(
            "scenario {name} (free on node {from}, calloc on node {to}): kernel [{}], prezero run [{}]",
            show(&kernel),
            show(&ours)
        );
        for (arm, p) in [("kernel", &kernel), ("prezero run", &ours)] {
            let pages = p.present();
            assert_eq!(p.absent, 0, "{name}, {arm}: pages absent after a touch");
            match *name {
                "interleave" => {
                    // Spread page by page: every node gets about its share.
                    for &n in &nodes {
                        let share = p.pages_on(n) as f64 / pages as f64;
                        assert!(
                            share > 0.5 / all as f64,
                            "{name}, {arm}: node {n} has {share:.2} of the pages: [{}]",
                            show(p)
                        );
                    }
                }
                _ => assert!(p.all_on(to), "{name}, {arm}: [{}]", show(p)),
            }
        }
    }
}

/// What a scenario's pages should be: all on one node, or spread over all.
#[derive(Clone, Copy)]
enum Expect {
    On(u32),
    Spread,
}

/// Under `prezero run --lazy` a fault is served from the reserve's lane for
/// the node the kernel would have placed its page on: blocks from `mmap`
/// and calloc, a process's first and recycled ones, under the default
/// policy, `--membind`, `--preferred` and `--interleave`, and a thread on a
/// node without memory (the nearest node's). Each beside the kernel's own
/// placement; on 6.12 (`PREZERO_REQUIRE=uffd`) the lazy mode must run.
#[test]
fn prezero_run_lazy_places_blocks_as_the_kernel_would() {
    let nodes = match nodes() {
        Ok(n) => n,
        Err(why) => return skip(&format!("--lazy placement ({why})")),
    };
    if !numactl() {
        return skip("--lazy placement (no numactl)");
    }
    let required = prezero_testkit::required("uffd");
    let (from, to) = (nodes[0], nodes[nodes.len() - 1]);
    let (bind, prefer) = (format!("--membind={to}"), format!("--preferred={to}"));
    let (ft, first) = (format!("{from} {to}"), format!("{to} {to} 0"));
    let mut scenarios: Vec<(String, Vec<&str>, &str, String, Expect)> = vec![
        (
            "default, mmap".into(),
            vec![],
            "mmap_role",
            ft.clone(),
            Expect::On(to),
        ),
        (
            "default, calloc first".into(),
            vec![],
            "calloc_role",
            first,
            Expect::On(to),
        ),
        (
            "default, calloc recycled".into(),
            vec![],
            "calloc_role",
            ft.clone(),
            Expect::On(to),
        ),
        (
            "membind, mmap".into(),
            vec!["numactl", &bind],
            "mmap_role",
            ft.clone(),
            Expect::On(to),
        ),
        (
            "membind, calloc recycled".into(),
            vec!["numactl", &bind],
            "calloc_role",
            ft.clone(),
            Expect::On(to),
        ),
        (
            "preferred, mmap".into(),
            vec!["numactl", &prefer],
            "mmap_role",
            ft.clone(),
            Expect::On(to),
        ),
        (
            "interleave, mmap".into(),
            vec!["numactl", "--interleave=all"],
            "mmap_role",
            ft.clone(),
            Expect::Spread,
        ),
        (
            "interleave, calloc recycled".into(),
            vec!["numactl", "--interleave=all"],
            "calloc_role",
            ft.clone(),
            Expect::Spread,
        ),
    ];
    let t = Topology::read();
    if let Some(c) = t.nodes.iter().find(|n| !n.has_memory && !n.cpus.is_empty()) {
        let near = t.nearest_memory_node(c.id).expect("a node with memory");
        let spec = format!("{from} {}", c.id);
        scenarios.push((
            format!("CPU-only node {}, mmap", c.id),
            vec![],
            "mmap_role",
            spec.clone(),
            Expect::On(near),
        ));
        scenarios.push((
            format!("CPU-only node {}, calloc recycled", c.id),
            vec![],
            "calloc_role",
            spec,
            Expect::On(near),
        ));
    }
    for (name, wrap, role, spec, expect) in &scenarios {
        let (kernel, _) = role_placement(role, spec, wrap, Arm::Kernel);
        let (ours, err) = role_placement(role, spec, wrap, Arm::Lazy);
        let line = err
            .lines()
            .find(|l| l.starts_with("prezero-preload: lazy: pid "));
        let fell_back = err.lines().find(|l| l.starts_with("prezero: --lazy:"));
        println!(
            "lazy scenario {name} (nodes {spec}): kernel [{}], prezero run --lazy [{}]: {}",
            show(&kernel),
            show(&ours),
            fell_back.or(line).unwrap_or("no lazy line")
        );
        if required {
            assert!(
                line.is_some() && fell_back.is_none(),
                "{name}: the lazy mode did not run: {err}"
            );
        }
        for (arm, p) in [("kernel", &kernel), ("--lazy", &ours)] {
            assert_eq!(p.absent, 0, "{name}, {arm}: pages absent after a touch");
            match *expect {
                Expect::Spread => {
                    for &n in &nodes {
                        let share = p.pages_on(n) as f64 / p.present() as f64;
                        assert!(
                            share > 0.5 / nodes.len() as f64,
                            "{name}, {arm}: node {n} has {share:.2} of the pages: [{}]",
                            show(p)
                        );
                    }
                }
                Expect::On(n) => assert!(p.all_on(n), "{name}, {arm}: [{}]", show(p)),
            }
        }
    }
}

/// The program `client exec` runs in the test below: maps the file it was
/// given, and says where its pages are.
#[test]
#[ignore = "the program of client_exec_gets_the_callers_node"]
fn exec_role() {
    let Ok(spec) = std::env::var("PREZERO_NUMA_EXEC") else {
        return;
    };
    let (fd, size) = spec.split_once(' ').unwrap();
    let (fd, size): (i32, usize) = (fd.parse().unwrap(), size.parse().unwrap());
    // SAFETY: a shared read-only mapping of the descriptor we were given.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    let line = show(&placement(p.cast(), size, PAGE).unwrap());
    // On a line of its own: the harness's "test ... " has no newline yet.
    println!("\nplacement {line}");
}

/// A daemon with the default pools (one per node) on hugetlb pages reserved
/// on every node.
fn numa_daemon(nodes: &[u32]) -> Option<Daemon> {
    let want: Vec<(u32, usize)> = nodes.iter().map(|&n| (n, 16 + 8)).collect();
    let pages = match HugetlbReservation::ensure_free_on_nodes(PAGE, &want) {
        Ok(r) => r,
        Err(e) => {
            skip(&format!("cannot reserve 2 MiB pages on every node: {e}"));
            return None;
        }
    };
    Some(Daemon::start_with(
        PageKind::Huge2M,
        &["target=16M,cap=32M,segment=8M"],
        &[],
        pages,
    ))
}

#[test]
fn serve_hands_each_node_its_own_pages() {
    let nodes = match nodes() {
        Ok(n) => n,
        Err(why) => return skip(&format!("serve placement ({why})")),
    };
    let Some(d) = numa_daemon(&nodes) else { return };
    let stats = d.stats();
    let mut pool_nodes: Vec<u32> = stats.pools.iter().filter_map(|p| p.node).collect();
    pool_nodes.sort_unstable();
    assert_eq!(pool_nodes, nodes, "one pool per node by default");
    let c = d.client();
    for &n in &nodes {
        // The daemon's word (the source) and the kernel's (move_pages).
        let opts = AllocOptions {
            node: NodeChoice::Node(n),
            ..common::NO_FALLBACK
        };
        let m = common::from_service_opts(&c, 16 * MB, opts);
        assert!(
            matches!(m.source(), Source::Service { node: Some(x), .. } if *x == n),
            "{:?}",
            m.source()
        );
        let p = placement(m.as_ptr(), m.len(), PAGE).unwrap();
        println!("serve node {n}: [{}]", show(&p));
        assert!(p.all_on(n), "node {n}: [{}]", show(&p));
        common::assert_all_zero(&m);
    }
    // A node that does not exist; other nodes allowed with no node asked.
    let far = AllocOptions {
        node: NodeChoice::Node(9999),
        ..common::NO_FALLBACK
    };
    let e = c.alloc_with(2 * MB, PageKind::Huge2M, far).err().unwrap();
    assert!(e.to_string().contains("9999"), "{e}");
    let anywhere = AllocOptions {
        node: NodeChoice::Any,
        other_nodes: true,
        ..common::NO_FALLBACK
    };
    assert!(c.alloc_with(2 * MB, PageKind::Huge2M, anywhere).is_err());
}

/// A daemon with a pool on one node only: a request for another node is
/// refused, unless it allows others: then the nearest node's, said so.
#[test]
fn a_node_without_a_pool_is_served_by_the_nearest_when_allowed() {
    let nodes = match nodes() {
        Ok(n) => n,
        Err(why) => return skip(&format!("another node's pool ({why})")),
    };
    let (has, lacks) = (nodes[0], nodes[1]);
    let pages = match HugetlbReservation::ensure_free_on_nodes(PAGE, &[(has, 16)]) {
        Ok(r) => r,
        Err(e) => return skip(&format!("cannot reserve 2 MiB pages on node {has}: {e}")),
    };
    let pool = format!("target=8M,cap=16M,segment=8M,node={has}");
    let d = Daemon::start_with(PageKind::Huge2M, &[&pool], &[], pages);
    let c = d.client();
    let want = |other_nodes| AllocOptions {
        node: NodeChoice::Node(lacks),
        other_nodes,
        ..common::NO_FALLBACK
    };
    let e = c
        .alloc_with(8 * MB, PageKind::Huge2M, want(false))
        .err()
        .unwrap();
    assert!(e.to_string().contains(&format!("node {lacks}")), "{e}");
    let m = common::from_service_opts(&c, 8 * MB, want(true));
    assert!(
        matches!(m.source(), Source::Service { node: Some(x), .. } if *x == has),
        "{:?}",
        m.source()
    );
    let p = placement(m.as_ptr(), m.len(), PAGE).unwrap();
    println!(
        "node {lacks} without a pool, others allowed: [{}]",
        show(&p)
    );
    assert!(p.all_on(has), "[{}]", show(&p));
}

#[test]
fn client_exec_gets_the_callers_node() {
    let nodes = match nodes() {
        Ok(n) => n,
        Err(why) => return skip(&format!("client exec placement ({why})")),
    };
    if !numactl() {
        return skip("client exec placement (no numactl)");
    }
    let Some(d) = numa_daemon(&nodes) else { return };
    let me = std::env::current_exe().unwrap();
    let me = me.to_str().unwrap();
    let sock = d.socket.to_str().unwrap();
    for &n in &nodes {
        let bind = [format!("--cpunodebind={n}"), format!("--membind={n}")];
        let explicit = ["--node".to_string(), n.to_string()];
        for (how, pre, flags) in [
            ("numactl", &bind[..], &[][..]),
            ("--node", &[][..], &explicit[..]),
        ] {
            // The placeholders are the exec'd program's arguments, not its
            // environment: pass them through a shell.
            let script = format!(
                "PREZERO_NUMA_EXEC=\"$1 $2\" exec {me} --exact exec_role --ignored --nocapture"
            );
            let mut cmd = if pre.is_empty() {
                Command::new(bin())
            } else {
                let mut c = Command::new("numactl");
                c.args(pre).arg(bin());
                c
            };
            // One segment, which `{fd}` names.
            cmd.args([
                "client",
                "exec",
                "--socket",
                sock,
                "--size",
                "8M",
                "--no-fallback",
            ])
            .args(flags)
            .args(["--", "sh", "-c", &script, "sh", "{fd}", "{size}"]);
            let out = cmd.output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{how} node {n}: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let p = parse(
                text.lines()
                    .find_map(|l| l.split_once("placement ").map(|(_, p)| p))
                    .unwrap_or_else(|| panic!("no placement: {text}")),
            );
            println!("client exec ({how}) node {n}: [{}]", show(&p));
            assert!(p.all_on(n), "{how} node {n}: [{}]", show(&p));
        }
    }
}

/// `bench mmap -f populate-parallel --nodes` populates a part on each node
/// and checks every page landed there before it counts a figure.
#[test]
fn bench_mmap_populates_each_part_on_its_node() {
    let t = Topology::read();
    let nodes: Vec<String> = t.memory_nodes().iter().rev().map(u32::to_string).collect();
    let out = Command::new(bin())
        .args([
            "bench",
            "mmap",
            "-p",
            "4KB",
            "-f",
            "populate-parallel",
            "-s",
            "64M",
            "-l",
            "1",
        ])
        .args(["--json", "--nodes", &nodes.join(",")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("bench mmap --nodes {}: {text}", nodes.join(","));
    assert!(text.contains("\"nodes\":["), "{text}");
    let bad = Command::new(bin())
        .args([
            "bench",
            "mmap",
            "-f",
            "populate-parallel",
            "-s",
            "4M",
            "-l",
            "1",
            "--nodes",
            "9999",
        ])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("9999"));
}

/// A thread on a node of CPUs only (no memory: its pages come from the
/// nearest node that has) asks the service for its own node's memory and
/// gets the nearest node's, or local memory there: never a refusal.
#[test]
fn a_thread_on_a_node_without_memory_gets_the_nearest_nodes() {
    let t = Topology::read();
    let Some(cpu_only) = t.nodes.iter().find(|n| !n.has_memory && !n.cpus.is_empty()) else {
        // Only the numa3m guest has one, and requires it.
        return prezero_testkit::skip("topology", "no NUMA node with CPUs and no memory here");
    };
    let nearest = t
        .nearest_memory_node(cpu_only.id)
        .expect("a node with memory");
    let nodes = t.memory_nodes();
    let Some(d) = numa_daemon(&nodes) else { return };
    let c = d.client();
    let (id, t2) = (cpu_only.id, t.clone());
    let (source, placed) = std::thread::spawn(move || {
        run_on_node(&t2, id).unwrap();
        let m = c
            .alloc_with(8 * MB, PageKind::Huge2M, common::NO_FALLBACK)
            .unwrap();
        let p = placement(m.as_ptr(), m.len(), PAGE).unwrap();
        (m.source().clone(), p)
    })
    .join()
    .unwrap();
    println!("CPU-only node {id}: {source:?}, [{}]", show(&placed));
    assert!(
        placed.all_on(nearest),
        "node {nearest}: [{}]",
        show(&placed)
    );
}
