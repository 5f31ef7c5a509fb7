//! [`PoolBuilder`]: a pool's settings, each checked when it is built, and
//! the building (the kernels chosen for its chunk size, the prefill, the
//! scrubbers started).

use std::sync::Arc;

use super::scrubber::{self, ScrubPriority};
use super::{Kernels, Pool, Settings, Shared};
use crate::clear::{Strategy, Temperature};
use crate::cpu::cpu;
use crate::error::{Error, Result};
use crate::region::{PageKind, Region};

/// How a [`Pool`] is built. Every setting is checked by [`PoolBuilder::build`].
#[derive(Debug, Clone)]
pub struct PoolBuilder {
    chunk_size: usize,
    backing: PageKind,
    capacity: usize,
    low: Option<usize>,
    high: Option<usize>,
    scrubbers: usize,
    priority: ScrubPriority,
    prefill: usize,
    verify: bool,
    hot_window: Option<usize>,
}

impl Default for PoolBuilder {
    fn default() -> Self {
        PoolBuilder {
            chunk_size: 2 << 20,
            backing: PageKind::Thp,
            capacity: 1 << 30,
            low: None,
            high: None,
            scrubbers: 1,
            priority: ScrubPriority::Idle,
            prefill: 0,
            verify: std::env::var("PREZERO_VERIFY").is_ok_and(|v| v == "1"),
            hot_window: None,
        }
    }
}

impl PoolBuilder {
    /// Bytes per chunk (default 2 MiB); a multiple of the backing's page size.
    pub fn chunk_size(mut self, bytes: usize) -> Self {
        self.chunk_size = bytes;
        self
    }

    /// The pages behind the chunks (default THP).
    pub fn backing(mut self, kind: PageKind) -> Self {
        self.backing = kind;
        self
    }

    /// Most bytes the pool will ever map (default 1 GiB); at least one chunk.
    pub fn capacity(mut self, bytes: usize) -> Self {
        self.capacity = bytes;
        self
    }

    /// Zeroed chunks below which the scrubber starts ("Prezeroing V2"'s `scrub_start`;
    /// default: the high watermark, i.e. scrub whenever below it).
    pub fn low_watermark(mut self, chunks: usize) -> Self {
        self.low = Some(chunks);
        self
    }

    /// Zeroed chunks at which the scrubber stops (`scrub_stop`; default: all of capacity).
    pub fn high_watermark(mut self, chunks: usize) -> Self {
        self.high = Some(chunks);
        self
    }

    /// Scrubber threads (default 1; 0 = no background scrubbing: every
    /// `alloc_zeroed` of a dirty chunk clears it on the spot).
    pub fn scrubbers(mut self, n: usize) -> Self {
        self.scrubbers = n;
        self
    }

    /// Scrubber scheduling (default `SCHED_IDLE`, falling back to nice 19).
    pub fn scrub_priority(mut self, p: ScrubPriority) -> Self {
        self.priority = p;
        self
    }

    /// Chunks to map and prefault at build time, ready zeroed.
    pub fn prefill(mut self, chunks: usize) -> Self {
        self.prefill = chunks;
        self
    }

    /// Check every chunk handed out by `alloc_zeroed` is all zero (panics if
    /// not). Also on with `PREZERO_VERIFY=1`.
    pub fn verify(mut self, on: bool) -> Self {
        self.verify = on;
        self
    }

    /// How much recently handed-out memory counts as still in cache (default:
    /// [`Cpu::hot_capacity`](crate::cpu::Cpu::hot_capacity)). A chunk freed within this many bytes of
    /// hand-outs after it was taken is "hot": kept out of the scrubber's queue and
    /// cleared in cache when reused. 0 sends every freed chunk to the scrubber.
    pub fn hot_window(mut self, bytes: usize) -> Self {
        self.hot_window = Some(bytes);
        self
    }

    /// Checks the configuration, maps the prefill, starts the scrubbers.
    pub fn build(self) -> Result<Pool> {
        let page = self.backing.page_size();
        if self.chunk_size == 0 || !self.chunk_size.is_multiple_of(page) {
            return Err(Error::invalid(format!(
                "pool chunk size {} is not a positive multiple of the {} page size ({page})",
                self.chunk_size, self.backing
            )));
        }
        let max_chunks = self.capacity / self.chunk_size;
        if max_chunks == 0 {
            return Err(Error::invalid(format!(
                "pool capacity {} is smaller than one chunk ({})",
                self.capacity, self.chunk_size
            )));
        }
        let high = self.high.unwrap_or(max_chunks);
        let low = self.low.unwrap_or(high);
        if high > max_chunks || low > high {
            return Err(Error::invalid(format!(
                "pool watermarks must satisfy low <= high <= capacity in chunks ({low} <= {high} <= {max_chunks})"
            )));
        }
        if self.prefill > max_chunks {
            return Err(Error::invalid(format!(
                "pool prefill of {} chunks exceeds capacity of {max_chunks}",
                self.prefill
            )));
        }
        let kernels = Kernels {
            hot: Strategy::Auto(Temperature::Hot).kernel_for(self.chunk_size)?,
            cold: Strategy::Auto(Temperature::Cold).kernel_for(self.chunk_size)?,
        };
        let shared = Arc::new(Shared::new(Settings {
            chunk_size: self.chunk_size,
            backing: self.backing,
            max_chunks,
            low,
            high,
            verify: self.verify,
            hot_chunks: (self.hot_window.unwrap_or_else(|| cpu().hot_capacity()) / self.chunk_size)
                as u64,
            kernels,
            multi_node: crate::numa::Topology::read().memory_nodes().len() > 1,
        }));
        // On this thread's node, bound there: the thread may move meanwhile.
        let node = shared.caller_node();
        for _ in 0..self.prefill {
            let r = Region::new(self.chunk_size, self.backing)?;
            if let Some(n) = node.filter(|&n| n != super::SPREAD) {
                crate::numa::bind(r.as_ptr(), r.len(), n, false)?;
            }
            crate::prefault::prefault(&r, 1)?;
            shared.adopt(r, false, node);
        }
        let scrubbers = (0..self.scrubbers)
            .map(|i| scrubber::spawn(Arc::clone(&shared), self.priority, i))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| Error::os("spawn scrubber thread", e))?;
        Ok(Pool { shared, scrubbers })
    }
}
