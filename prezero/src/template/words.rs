//! The register form of the template fill, written once over a store unit.
//!
//! A record is a row of units (a 64-byte AVX-512 vector, a 32-byte AVX2 vector
//! or NEON register pair, a 16-byte SSE2 vector, an 8-byte word). The fixed
//! part of the head and tail templates is loaded into units once; per record,
//! the produced words are inserted into the units that hold them and every
//! unit is stored in address order. Nothing is stored to a template or a
//! working copy, so no load ever waits on a store (the closure form's cost).
//!
//! Streaming units must be aligned to their size, and with the records stored
//! in order every cache line inside the destination is written whole, by
//! consecutive stores: the write-combining buffers flush full lines. Only a
//! line the destination covers in part (before its first 64-byte boundary or
//! after its last) is written with ordinary stores, since a streamed partial
//! line is a read-modify-write in memory.

/// One store unit of an instruction set: what the engine needs from it.
///
/// # Safety
/// Every method is only called from a function compiled for (and dispatched
/// on a CPU with) the instruction set the unit uses; each method's own
/// `# Safety` adds what it needs of its arguments.
pub(super) trait Unit: Copy {
    /// Size in bytes (a multiple of 8).
    const BYTES: usize;
    /// Whether records are built lane by lane ([`Picked`]) rather than by
    /// inserting every word into every unit: for units of at most two lanes,
    /// where a record is many units.
    const PICK: bool;
    /// Selects one 64-bit lane, or none, for [`Unit::insert`].
    type Lane: Copy;

    /// The selector of lane `lane`.
    ///
    /// # Safety
    /// The unit's instruction set is available; `lane < BYTES / 8`.
    unsafe fn lane(lane: usize) -> Self::Lane;
    /// The selector of no lane: [`Unit::insert`] leaves the unit as it is.
    ///
    /// # Safety
    /// The unit's instruction set is available.
    unsafe fn no_lane() -> Self::Lane;
    /// Reads BYTES bytes from `p` (any alignment).
    ///
    /// # Safety
    /// The unit's instruction set is available; `p` is readable for BYTES.
    unsafe fn load(p: *const u8) -> Self;
    /// This unit with the selected lane zeroed.
    ///
    /// # Safety
    /// The unit's instruction set is available.
    unsafe fn clear(self, lane: Self::Lane) -> Self;
    /// This unit with `word` in the selected lane, which must be zero
    /// (branch-free: the register form inserts every word into every unit,
    /// most of them with no lane, as an and and an or).
    ///
    /// # Safety
    /// The unit's instruction set is available.
    unsafe fn insert(self, lane: Self::Lane, word: u64) -> Self;
    /// The unit whose lanes are `lo` and, if it has a second, `hi`, or-ed
    /// into this one (where `PICK`).
    ///
    /// # Safety
    /// The unit's instruction set is available.
    unsafe fn or_words(self, lo: u64, hi: u64) -> Self;
    /// A streaming store to `p`.
    ///
    /// # Safety
    /// The unit's instruction set is available; `p` is writable for BYTES
    /// and aligned to BYTES.
    unsafe fn stream(self, p: *mut u8);
    /// An ordinary store to `p` (any alignment).
    ///
    /// # Safety
    /// The unit's instruction set is available; `p` is writable for BYTES.
    unsafe fn store(self, p: *mut u8);
}

/// One fill: `n` records of `size` bytes at `dst`, record `i` from `head` when
/// `i % group_len == 0`, else from `tail`, with the words `produce(i, is_head)`
/// at `offsets`.
pub(super) struct Job<'a, const K: usize> {
    pub dst: *mut u8,
    pub n: usize,
    pub size: usize,
    pub head: *const u8,
    pub tail: *const u8,
    pub group_len: usize,
    pub offsets: &'a [usize; K],
}

/// Whether a unit of `bytes` can carry this job: it divides the record, holds
/// every word in one lane, and (for streaming) the destination is aligned to
/// it, so every unit store is.
pub(super) fn fits<const K: usize>(job: &Job<'_, K>, bytes: usize, stream: bool) -> bool {
    job.size > 0
        && job.size.is_multiple_of(bytes)
        && job.offsets.iter().all(|o| o.is_multiple_of(8))
        && (!stream || (job.dst as usize).is_multiple_of(bytes))
}

/// Runs `job` with unit `U`: the template held in registers for records of up
/// to four units, read from L1 per record beyond that.
///
/// # Safety
/// `fits(job, U::BYTES, STREAM)`; the CPU runs `U` (see [`Unit`]); `dst` is
/// writable for `n * size` bytes, `head` and `tail` readable for `size`;
/// `group_len >= 1`; every `offset + 8 <= size`.
#[inline(always)]
// One call per arm, all under the one contract the comment below states: a
// block and a comment per arm would say it ten times over.
#[allow(clippy::multiple_unsafe_ops_per_block)]
pub(super) unsafe fn fill<U: Unit, const STREAM: bool, const K: usize>(
    job: &Job<'_, K>,
    produce: &mut impl FnMut(usize, bool) -> [u64; K],
) {
    // SAFETY: every arm's function has `fill`'s contract, which our caller
    // upholds, and the arm's `N` is `job.size / U::BYTES`.
    unsafe {
        match (U::PICK, job.size / U::BYTES) {
            (false, 1) => held::<U, STREAM, K, 1>(job, produce),
            (false, 2) => held::<U, STREAM, K, 2>(job, produce),
            (false, 3) => held::<U, STREAM, K, 3>(job, produce),
            (false, 4) => held::<U, STREAM, K, 4>(job, produce),
            (true, 1) => picked::<U, STREAM, K, 1>(job, produce),
            (true, 2) => picked::<U, STREAM, K, 2>(job, produce),
            (true, 3) => picked::<U, STREAM, K, 3>(job, produce),
            (true, 4) => picked::<U, STREAM, K, 4>(job, produce),
            (true, 8) => picked::<U, STREAM, K, 8>(job, produce),
            _ => loaded::<U, STREAM, K>(job, produce),
        }
    }
}

/// The record ranges that stream: records `[first, last)` lie wholly inside
/// the destination's whole lines; the records around them are stored unit by
/// unit, ordinarily where a unit falls in a partial line.
struct Lines {
    from: usize,
    to: usize,
    first: usize,
    last: usize,
}

impl Lines {
    #[inline(always)]
    fn new<const STREAM: bool, const K: usize>(job: &Job<'_, K>) -> Lines {
        let start = job.dst as usize;
        let end = start + job.n * job.size;
        let (from, to) = if STREAM {
            (start.next_multiple_of(64), end & !63)
        } else {
            (start, end)
        };
        // Records starting at or after `from` and ending by `to`.
        let first = (from - start).div_ceil(job.size).min(job.n);
        let last = (to.saturating_sub(start) / job.size).max(first);
        Lines {
            from,
            to,
            first,
            last,
        }
    }

    /// Stores unit `v` at `p`: streamed when `WHOLE` (the record is inside the
    /// whole lines) or `p` is, ordinarily otherwise.
    ///
    /// # Safety
    /// `U`'s instruction set is available; `p` is a unit-sized slot of the
    /// job's destination, aligned to `U::BYTES` when `STREAM`.
    #[inline(always)]
    unsafe fn put<U: Unit, const STREAM: bool, const WHOLE: bool>(&self, v: U, p: *mut u8) {
        if STREAM && (WHOLE || (self.from..self.to).contains(&(p as usize))) {
            // SAFETY: the caller passes a unit-sized slot of dst, aligned to
            // the unit when streaming (`fits`).
            unsafe { v.stream(p) }
        } else {
            // SAFETY: the caller passes a unit-sized slot of dst; ordinary
            // stores take any alignment.
            unsafe { v.store(p) }
        }
    }
}

/// Counts records into groups without a division per record.
struct Groups {
    left: usize,
    len: usize,
}

impl Groups {
    #[inline(always)]
    fn next_is_head(&mut self) -> bool {
        let head = self.left == 0;
        self.left = if head { self.len - 1 } else { self.left - 1 };
        head
    }
}

/// How one kind of record is stored: the fixed part's source and the
/// insertion of the words.
trait Records<U: Unit, const K: usize> {
    /// Stores record `vals` (a head's if `is_head`) at `d`, through `lines`.
    ///
    /// # Safety
    /// `U`'s instruction set is available; `d` is a record of the job's
    /// destination (`size` writable bytes), aligned to `U::BYTES` when
    /// `STREAM`; the templates the records were built from are still readable.
    unsafe fn put<const STREAM: bool, const WHOLE: bool>(
        &self,
        lines: &Lines,
        is_head: bool,
        vals: &[u64; K],
        d: *mut u8,
    );
}

/// Records of `N` units of at most two lanes, with the templates' landing
/// lanes zeroed: per unit, each lane's word is read from `[vals.., 0]` at a
/// slot fixed for the fill (the zero where no word lands) and or-ed in.
/// Branch-free, and a few instructions a unit whatever the number of words.
struct Picked<U: Unit, const K: usize, const N: usize> {
    head: [U; N],
    tail: [U; N],
    /// Per unit, the slot of its low and high lane's word (K: none).
    slot: [[usize; 2]; N],
}

impl<U: Unit, const K: usize, const N: usize> Records<U, K> for Picked<U, K, N> {
    #[inline(always)]
    unsafe fn put<const STREAM: bool, const WHOLE: bool>(
        &self,
        lines: &Lines,
        is_head: bool,
        vals: &[u64; K],
        d: *mut u8,
    ) {
        let mut ext = [0u64; 8];
        ext[..K].copy_from_slice(vals);
        for u in 0..N {
            let t = if is_head { self.head[u] } else { self.tail[u] };
            let [lo, hi] = self.slot[u];
            // SAFETY: the slots are at most K < ext.len().
            let lo = unsafe { *ext.get_unchecked(lo) };
            // SAFETY: as for lo.
            let hi = unsafe { *ext.get_unchecked(hi) };
            // SAFETY: a register operation; the caller vouches for the unit.
            let v = unsafe { t.or_words(lo, hi) };
            // SAFETY: unit u of the record at d, inside dst.
            let p = unsafe { d.add(u * U::BYTES) };
            // SAFETY: a unit of dst, aligned to the unit when streaming, as
            // `fits` checked.
            unsafe { lines.put::<U, STREAM, WHOLE>(v, p) };
        }
    }
}

/// [`fill`] with [`Picked`] records of `N` units (with [`Held`] ones from 8
/// words on, more than the slot table holds).
///
/// # Safety
/// As for [`fill`], with `job.size == N * U::BYTES`.
#[inline(always)]
unsafe fn picked<U: Unit, const STREAM: bool, const K: usize, const N: usize>(
    job: &Job<'_, K>,
    produce: &mut impl FnMut(usize, bool) -> [u64; K],
) {
    if K >= 8 {
        // The slot table holds at most 7 words and the zero.
        // SAFETY: `held` has `picked`'s contract, which our caller upholds.
        return unsafe { held::<U, STREAM, K, N>(job, produce) };
    }
    let mut slot = [[K; 2]; N];
    // In order, so of two words at one offset the later wins.
    for (k, &o) in job.offsets.iter().enumerate() {
        slot[o / U::BYTES][o % U::BYTES / 8] = k;
    }
    let unit = |t: *const u8, u: usize| {
        // SAFETY: unit u of a template of N units.
        let p = unsafe { t.add(u * U::BYTES) };
        // SAFETY: the templates are readable for size = N * BYTES bytes.
        let v = unsafe { U::load(p) };
        slot[u]
            .iter()
            .enumerate()
            .filter(|&(i, &k)| k < K && i < U::BYTES / 8)
            .fold(v, |v, (i, _)| {
                // SAFETY: i < BYTES / 8, filtered above.
                let lane = unsafe { U::lane(i) };
                // SAFETY: a register operation on the caller's unit.
                unsafe { v.clear(lane) }
            })
    };
    let records = Picked::<U, K, N> {
        head: core::array::from_fn(|u| unit(job.head, u)),
        tail: core::array::from_fn(|u| unit(job.tail, u)),
        slot,
    };
    // SAFETY: `fill`'s contract, which our caller upholds, is `drive`'s; the
    // records were built from the job's templates.
    unsafe { drive::<U, STREAM, K>(job, produce, &records) }
}

/// Runs the records in three stretches (partial lines, whole lines, partial
/// lines), so the middle one, nearly all of a large fill, streams every unit
/// without a per-unit test.
///
/// # Safety
/// As for [`fill`]; `records` were built from this job's templates and
/// store records of `job.size` bytes.
#[inline(always)]
unsafe fn drive<U: Unit, const STREAM: bool, const K: usize>(
    job: &Job<'_, K>,
    produce: &mut impl FnMut(usize, bool) -> [u64; K],
    records: &impl Records<U, K>,
) {
    let mut at = Cursor {
        lines: Lines::new::<STREAM, K>(job),
        groups: Groups {
            left: 0,
            len: job.group_len,
        },
        d: job.dst,
        size: job.size,
    };
    let (first, last) = (at.lines.first, at.lines.last);
    // SAFETY: the three stretches cover records 0..n once each, in order:
    // this the records before the whole lines,
    unsafe { at.stretch::<U, STREAM, false, K>(0..first, produce, records) };
    // SAFETY: then those inside them,
    unsafe { at.stretch::<U, STREAM, true, K>(first..last, produce, records) };
    // SAFETY: then those after them, up to n.
    unsafe { at.stretch::<U, STREAM, false, K>(last..job.n, produce, records) };
}

/// Where the fill is: the next record's address and group position.
struct Cursor {
    lines: Lines,
    groups: Groups,
    d: *mut u8,
    size: usize,
}

impl Cursor {
    /// Stores records `range`, which must be the next ones.
    ///
    /// # Safety
    /// As for [`drive`], which made this cursor over its job; `range` ends at
    /// most at the job's `n`.
    #[inline(always)]
    unsafe fn stretch<U: Unit, const STREAM: bool, const WHOLE: bool, const K: usize>(
        &mut self,
        range: core::ops::Range<usize>,
        produce: &mut impl FnMut(usize, bool) -> [u64; K],
        records: &impl Records<U, K>,
    ) {
        for i in range {
            let is_head = self.groups.next_is_head();
            // Produced before any store of record i, so a panic leaves it untouched.
            let vals = produce(i, is_head);
            // SAFETY: record i is the `size` bytes at self.d, inside dst.
            unsafe { records.put::<STREAM, WHOLE>(&self.lines, is_head, &vals, self.d) };
            // SAFETY: the next record, or one past the end of dst.
            self.d = unsafe { self.d.add(self.size) };
        }
    }
}

/// Records of `N` units, both templates in registers for the whole fill, with
/// the words' lanes zeroed. Every word is inserted into every unit, with no
/// lane where it does not belong: straight-line code, as if the offsets had
/// been constants.
struct Held<U: Unit, const K: usize, const N: usize> {
    head: [U; N],
    tail: [U; N],
    lanes: [[U::Lane; K]; N],
}

impl<U: Unit, const K: usize, const N: usize> Records<U, K> for Held<U, K, N> {
    #[inline(always)]
    unsafe fn put<const STREAM: bool, const WHOLE: bool>(
        &self,
        lines: &Lines,
        is_head: bool,
        vals: &[u64; K],
        d: *mut u8,
    ) {
        for u in 0..N {
            let mut v = if is_head { self.head[u] } else { self.tail[u] };
            for (&lane, &word) in self.lanes[u].iter().zip(vals) {
                // SAFETY: the lane came from U::lane or U::no_lane.
                v = unsafe { v.insert(lane, word) };
            }
            // SAFETY: unit u of the record at d, inside dst.
            let p = unsafe { d.add(u * U::BYTES) };
            // SAFETY: a unit of dst, aligned to the unit when streaming, as
            // `fits` checked.
            unsafe { lines.put::<U, STREAM, WHOLE>(v, p) };
        }
    }
}

/// [`fill`] with [`Held`] records of `N` units.
///
/// # Safety
/// As for [`fill`], with `job.size == N * U::BYTES`.
#[inline(always)]
unsafe fn held<U: Unit, const STREAM: bool, const K: usize, const N: usize>(
    job: &Job<'_, K>,
    produce: &mut impl FnMut(usize, bool) -> [u64; K],
) {
    let lanes: [[U::Lane; K]; N] = core::array::from_fn(|u| {
        core::array::from_fn(|k| {
            let o = job.offsets[k];
            // Of two words at one offset only the later is inserted.
            let overridden = job.offsets[k + 1..].contains(&o);
            if o / U::BYTES == u && !overridden {
                // SAFETY: below BYTES / 8, since the offsets are 8-aligned.
                unsafe { U::lane(o % U::BYTES / 8) }
            } else {
                // SAFETY: the caller vouches for the unit's instruction set.
                unsafe { U::no_lane() }
            }
        })
    });
    let unit = |t: *const u8, u: usize| {
        // SAFETY: unit u of a template of N units.
        let p = unsafe { t.add(u * U::BYTES) };
        // SAFETY: the templates are readable for size = N * BYTES bytes.
        let v = unsafe { U::load(p) };
        // SAFETY: register operations on the caller's unit.
        lanes[u].iter().fold(v, |v, &l| unsafe { v.clear(l) })
    };
    let records = Held::<U, K, N> {
        head: core::array::from_fn(|u| unit(job.head, u)),
        tail: core::array::from_fn(|u| unit(job.tail, u)),
        lanes,
    };
    // SAFETY: `fill`'s contract, which our caller upholds, is `drive`'s; the
    // records were built from the job's templates.
    unsafe { drive::<U, STREAM, K>(job, produce, &records) }
}

/// Records of more units than fit in registers: the templates are read (from
/// L1; nothing stores to them) unit by unit, and the words, sorted by offset,
/// are inserted as their units come up.
struct Loaded<U: Unit, const K: usize> {
    head: *const u8,
    tail: *const u8,
    units: usize,
    /// Word j in offset order is `vals[order[j]]`, for unit `unit_of[j]`.
    order: [usize; K],
    unit_of: [usize; K],
    lane: [U::Lane; K],
}

impl<U: Unit, const K: usize> Records<U, K> for Loaded<U, K> {
    #[inline(always)]
    unsafe fn put<const STREAM: bool, const WHOLE: bool>(
        &self,
        lines: &Lines,
        is_head: bool,
        vals: &[u64; K],
        d: *mut u8,
    ) {
        let t = if is_head { self.head } else { self.tail };
        let mut j = 0;
        for u in 0..self.units {
            // SAFETY: unit u of the template, which is `units` units long.
            let from = unsafe { t.add(u * U::BYTES) };
            // SAFETY: the template is readable (the caller's promise).
            let mut v = unsafe { U::load(from) };
            while j < K && self.unit_of[j] == u {
                // SAFETY: a register operation; the lane came from U::lane.
                v = unsafe { v.clear(self.lane[j]) };
                // SAFETY: as for clear, into the lane just zeroed.
                v = unsafe { v.insert(self.lane[j], vals[self.order[j]]) };
                j += 1;
            }
            // SAFETY: unit u of the record at d, inside dst.
            let to = unsafe { d.add(u * U::BYTES) };
            // SAFETY: a unit of dst, aligned to the unit when streaming, as
            // `fits` checked.
            unsafe { lines.put::<U, STREAM, WHOLE>(v, to) };
        }
    }
}

/// [`fill`] with [`Loaded`] records, for any number of units.
///
/// # Safety
/// As for [`fill`].
#[inline(always)]
unsafe fn loaded<U: Unit, const STREAM: bool, const K: usize>(
    job: &Job<'_, K>,
    produce: &mut impl FnMut(usize, bool) -> [u64; K],
) {
    let mut order: [usize; K] = core::array::from_fn(|k| k);
    // Stable: of two words at one offset the later wins, as in the general path.
    order.sort_by_key(|&k| job.offsets[k]);
    let records: Loaded<U, K> = Loaded {
        head: job.head,
        tail: job.tail,
        units: job.size / U::BYTES,
        order,
        unit_of: core::array::from_fn(|j| job.offsets[order[j]] / U::BYTES),
        // SAFETY: the lanes are below BYTES / 8 since the offsets are 8-aligned.
        lane: core::array::from_fn(|j| unsafe { U::lane(job.offsets[order[j]] % U::BYTES / 8) }),
    };
    // SAFETY: `fill`'s contract, which our caller upholds, is `drive`'s; the
    // records were built from the job's templates.
    unsafe { drive::<U, STREAM, K>(job, produce, &records) }
}
