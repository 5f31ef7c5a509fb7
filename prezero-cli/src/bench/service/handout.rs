//! The service's hand-out latency table and its scrubber's rate against the
//! clearing engine, for one page kind (one daemon serves both).

use std::time::{Duration, Instant};

use anyhow::Result;
use prezero::{PageKind, Region, Temperature};
use prezero_service::Client;

use super::{memory_budget, Args};
use crate::bench::daemon::{alloc, wait_ready, Daemon};
use crate::bench::memory::verify_zero;
use crate::rows::{self, Row, ServiceTable};
use crate::stats::{gbps, round2, Sorted, Stats};
use crate::table::Table;
use crate::units::fmt_size;

/// The hand-out latency table and the scrub rate, for one page kind.
pub(super) fn latency_and_scrub(args: &Args, kind: PageKind, sizes: &[usize]) -> Result<()> {
    let budget = memory_budget();
    let mut fitting: Vec<usize> = sizes
        .iter()
        .map(|s| s.next_multiple_of(kind.page_size()))
        .filter(|&s| args.socket.is_some() || s <= budget)
        .collect();
    fitting.dedup();
    for s in sizes
        .iter()
        .filter(|&&s| s.next_multiple_of(kind.page_size()) > budget)
    {
        if args.socket.is_none() {
            super::super::not_measured(
                &format!("the hand-out rows of {} on {kind} pages", fmt_size(*s)),
                &format!(
                    "more than the available memory less 4 GiB ({})",
                    fmt_size(budget)
                ),
            );
        }
    }
    let Some(&largest) = fitting.last() else {
        return Ok(());
    };
    let daemon = Daemon::open(args.socket.as_deref(), kind, largest, args.reserve)?;
    let c = &daemon.client;
    let have = wait_ready(c, kind, largest)?;
    let table = Table::new(" ")
        .right(8)
        .right(6)
        .right(10)
        .right(10)
        .right(10)
        .right(10);
    if !args.json {
        println!(
            "# prezero serve: hand-out latency, page {kind} (request -> mapped, populated, zero)"
        );
        table.print(&["size", "reps", "p50 us", "p99 us", "max us", "GB/s p50"]);
    }
    for &size in &fitting {
        if size > have {
            super::super::not_measured(
                &format!("the hand-out rows of {}", fmt_size(size)),
                &format!(
                    "the service has {} ready (hugetlb shortage; see its log)",
                    fmt_size(have)
                ),
            );
            continue;
        }
        let reps = if size > 1 << 30 {
            args.reps.min(10)
        } else {
            args.reps
        };
        let mut us = Vec::with_capacity(reps);
        for _ in 0..reps {
            wait_ready(c, kind, size)?;
            let t = Instant::now();
            let m = alloc(c, size, kind)?;
            us.push(t.elapsed().as_secs_f64() * 1e6);
            // Check a sample per page (a full check of 16 GiB x reps would
            // dominate the run; the tests check every byte).
            for off in (0..m.len()).step_by(kind.page_size()) {
                verify_zero(&m.as_slice()[off..off + 64], "service hand-out")?;
            }
            drop(m);
        }
        let us = Sorted::new(us);
        let (p50, p99, max) = (us.percentile(0.5), us.percentile(0.99), us.percentile(1.0));
        let rate = size as f64 / (p50 / 1e6) / 1e9;
        if args.json {
            Row::Service(ServiceTable::Handout(rows::ServiceHandout {
                page: kind.name().to_string(),
                size: size as u64,
                reps: reps as u64,
                p50_us: round2(p50),
                p99_us: round2(p99),
                max_us: round2(max),
                gbps_p50: round2(rate),
            }))
            .print();
        } else {
            table.print(&[
                fmt_size(size),
                reps.to_string(),
                format!("{p50:.1}"),
                format!("{p99:.1}"),
                format!("{max:.1}"),
                format!("{rate:.0}"),
            ]);
        }
    }
    wait_ready(c, kind, largest)?;
    scrub_rate(args, kind, c, largest.min(have).min(4 << 30))
}

/// Rounds of this scrub-rate phase.
const SCRUB_ROUNDS: usize = 3;

/// The scrubber against the clearing engine on cold memory (Auto, cold, one
/// thread, in this process), in alternating rounds so both meet the same
/// machine: each round clears two cold GiB here, then hands `bytes` of the
/// service's memory back and waits, polling gently, until it is scrubbed and
/// verified (in place: the segments go back to this process's uid). Rates are
/// the worker's own timings; medians over the rounds.
fn scrub_rate(args: &Args, kind: PageKind, c: &Client, bytes: usize) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let half = 1 << 30;
    let mut cold = Region::new(2 * half, PageKind::Thp)?;
    prezero::prefault(&cold, prezero::cpu().logical_cpus)?;
    let (mut engine, mut scrub, mut verify, mut both) = (vec![], vec![], vec![], vec![]);
    let mut scrubbed = 0;
    for round in 0..SCRUB_ROUNDS {
        for i in 0..2 {
            let s = &mut cold.as_mut_slice()[((round + i) % 2) * half..][..half];
            let t = Instant::now();
            prezero::clear_with(s, Temperature::Cold)?;
            engine.push(gbps(half, t.elapsed()));
        }
        wait_ready(c, kind, bytes)?;
        let m = alloc(c, bytes, kind)?;
        let before = c.stats()?;
        drop(m);
        loop {
            std::thread::sleep(Duration::from_millis(20));
            let s = c.stats()?;
            if s.scrubbed_bytes - before.scrubbed_bytes >= bytes as u64
                && s.pools.iter().all(|p| p.scrubbing + p.quarantined == 0)
            {
                let (b, ns) = (
                    s.scrubbed_bytes - before.scrubbed_bytes,
                    s.scrub_ns - before.scrub_ns,
                );
                let (vb, vns) = (
                    s.verified_bytes - before.verified_bytes,
                    s.verify_ns - before.verify_ns,
                );
                scrub.push(b as f64 / ns.max(1) as f64);
                verify.push(vb as f64 / vns.max(1) as f64);
                both.push(b as f64 / (ns + vns).max(1) as f64);
                scrubbed += b;
                break;
            }
        }
    }
    verify_zero(cold.as_slice(), "cold clear")?;
    let m = |v: &[f64]| Stats::of(v).median;
    let (scrub, verify, both, cold) = (m(&scrub), m(&verify), m(&both), m(&engine));
    if args.json {
        Row::Service(ServiceTable::Scrub(rows::Scrub {
            page: kind.name().to_string(),
            bytes: scrubbed,
            scrub_gbps: round2(scrub),
            verify_gbps: round2(verify),
            scrub_verify_gbps: round2(both),
            engine_cold_gbps: round2(cold),
            ratio: round2(scrub / cold),
        }))
        .print();
    } else {
        println!(
            "# scrubber, same uid ({SCRUB_ROUNDS} rounds of {}, medians): cleared at {scrub:.1} GB/s, \
             verified at {verify:.1} GB/s ({both:.1} GB/s both); clearing engine, cold memory, 1 thread: \
             {cold:.1} GB/s; scrub/engine = {:.2}",
            fmt_size(bytes),
            scrub / cold
        );
    }
    Ok(())
}
