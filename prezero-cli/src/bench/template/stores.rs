//! `bench template --stores`: where streaming stores start to beat temporal
//! ones for `template_fill_words`, by size, hot and cold: what `calibrate`
//! records and the built-in choice is checked against.

use std::time::Instant;

use anyhow::{bail, Result};
use prezero::{CopyKernel, PageKind, Region, Streamer};

use super::model::{pages, templates, varying, Layout, Page, WORDS};
use super::{verify, Method};
use crate::bench::progress::Progress;
use crate::rows;
use crate::stats::{gbps, round2, Stats};
use crate::table::Table;
use crate::units::fmt_size;

/// The sizes of the store study: from well inside L2 to far past any LLC.
pub(crate) const STORE_SIZES: &str = "16K,64K,256K,1M,4M,16M,64M,256M";

/// One figure of the store study: `template_fill_words` with one kernel.
#[derive(Debug, Clone)]
pub(crate) struct StoreFigure {
    pub mode: &'static str,
    pub size: usize,
    pub kernel: CopyKernel,
    /// GB/s.
    pub stats: Stats,
}

/// The most bytes filled per timed repetition (small sizes are repeated).
const STORE_REP_BYTES: usize = 256 << 20;

/// `template_fill_words` (the bench's 4k records) with every template kernel
/// this CPU has, at every size, hot (one buffer filled again and again) and
/// cold (consecutive slices of a region of 8x LLC, as `bench clear` does).
pub(crate) fn store_study(sizes: &[usize], reps: usize) -> Result<Vec<StoreFigure>> {
    if reps == 0 || sizes.iter().any(|&s| s < 64 || !s.is_multiple_of(64)) {
        bail!("--reps must be at least 1 and every size a multiple of 64 bytes (whole records)");
    }
    let kernels: Vec<CopyKernel> = CopyKernel::ALL
        .into_iter()
        .filter(|k| k.is_available())
        .collect();
    let max = sizes.iter().copied().max().unwrap_or(64);
    let cold_len = (8 * prezero::cpu().llc()).max(4 * max);
    let mut cold = Region::new(cold_len, PageKind::Thp)?;
    cold.as_mut_slice().fill(0xcd);
    let mut progress = Progress::new((2 * sizes.len() * reps) as u64);
    let mut figs = Vec::new();
    for mode in ["hot", "cold"] {
        let mut cursor = 0;
        for &size in sizes {
            let records = size / 64;
            let mut hot = Region::new(size, PageKind::Thp)?;
            hot.as_mut_slice().fill(0xcd);
            let mut samples = vec![Vec::with_capacity(reps); kernels.len()];
            for rep in 0..reps {
                progress.step(format!("{mode} {}", fmt_size(size)));
                for j in 0..kernels.len() {
                    let i = (j + rep) % kernels.len();
                    let s = Streamer::new(kernels[i]).expect("available");
                    let inner = (STORE_REP_BYTES / size).max(1);
                    let g = if mode == "hot" {
                        let dst = pages(&mut hot, records);
                        fill_words(s, dst);
                        let t = Instant::now();
                        for _ in 0..inner {
                            fill_words(s, dst);
                        }
                        let g = gbps(records * 64 * inner, t.elapsed());
                        verify(Method::TemplateWords, Layout::Pages4k, dst)?;
                        g
                    } else {
                        let slices = cold_len / size;
                        let inner = inner.min(slices - 1);
                        let t = Instant::now();
                        for _ in 0..inner {
                            let at = cursor % slices * size;
                            // SAFETY: slice `at` lies inside the region (at + size <= cold_len).
                            let p = unsafe { cold.as_ptr().add(at) };
                            // SAFETY: `records` pages from p, all in the slice,
                            // which nothing else refers to meanwhile.
                            let dst: &mut [Page] =
                                unsafe { std::slice::from_raw_parts_mut(p.cast(), records) };
                            fill_words(s, dst);
                            cursor += 1;
                        }
                        let g = gbps(records * 64 * inner, t.elapsed());
                        let at = (cursor - 1) % slices * size;
                        // SAFETY: as above.
                        let p = unsafe { cold.as_ptr().add(at) };
                        // SAFETY: as above, read only.
                        let last: &[Page] =
                            unsafe { std::slice::from_raw_parts(p.cast(), records) };
                        verify(Method::TemplateWords, Layout::Pages4k, last)?;
                        g
                    };
                    samples[i].push(g);
                }
            }
            for (&kernel, g) in kernels.iter().zip(&samples) {
                figs.push(StoreFigure {
                    mode,
                    size,
                    kernel,
                    stats: Stats::of(g),
                });
            }
        }
    }
    progress.finish();
    Ok(figs)
}

fn fill_words(s: Streamer, dst: &mut [Page]) {
    let base = dst.as_ptr() as usize;
    let (head, _) = templates(Layout::Pages4k);
    s.fill_words(dst, &head, WORDS, |i| varying(Layout::Pages4k, base, i))
        .expect("offsets fit");
}

pub(super) fn print_stores(figs: &[StoreFigure], json: bool) {
    if json {
        for f in figs {
            rows::Row::TemplateStores(rows::TemplateStores {
                mode: f.mode.to_string(),
                size: f.size as u64,
                kernel: f.kernel.name().to_string(),
                streaming: f.kernel.is_streaming(),
                gbps: round2(f.stats.median),
                stdev_pct: round2(f.stats.stdev_pct),
            })
            .print();
        }
        return;
    }
    let kernels: Vec<CopyKernel> = {
        let mut v: Vec<CopyKernel> = figs.iter().map(|f| f.kernel).collect();
        v.dedup();
        v.truncate(
            figs.iter()
                .position(|f| f.size != figs[0].size)
                .unwrap_or(v.len()),
        );
        v
    };
    // Size, a column per kernel, and the kernel Auto picks.
    let table = kernels
        .iter()
        .fold(Table::new(" ").right(6), |t, _| t.right(10))
        .right(10);
    for mode in ["hot", "cold"] {
        println!("\n# template_fill_words, {mode}, GB/s (median), by kernel");
        let head: Vec<&str> = std::iter::once("size")
            .chain(kernels.iter().map(|k| k.name()))
            .chain(["auto"])
            .collect();
        table.print(&head);
        let mut sizes: Vec<usize> = figs.iter().map(|f| f.size).collect();
        sizes.sort_unstable();
        sizes.dedup();
        for size in sizes {
            let medians = kernels.iter().map(|k| {
                let g = figs
                    .iter()
                    .find(|f| f.mode == mode && f.size == size && f.kernel == *k)
                    .map_or(f64::NAN, |f| f.stats.median);
                format!("{g:.1}")
            });
            let row: Vec<String> = std::iter::once(fmt_size(size))
                .chain(medians)
                .chain([Streamer::for_bytes(size).kernel().name().to_string()])
                .collect();
            table.print(&row);
        }
    }
    let from = prezero::template::stream_from();
    println!(
        "(auto streams from {}; `prezero calibrate` measures where and records it)",
        if from == usize::MAX {
            "no size".to_string()
        } else {
            fmt_size(from)
        }
    );
}
