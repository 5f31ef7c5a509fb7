//! The program's mappings registered with the userfaultfd (pure: no system
//! calls, no heap): a fixed list of address ranges, sorted and disjoint.
//! The handler moves huge pages only into 2 MiB blocks wholly inside one of
//! them; `munmap`, `mremap` and `mmap(MAP_FIXED)` take their parts out.
//!
//! [`MAX_MAPPINGS`] at most: a mapping past that is not registered (the
//! kernel serves it, as without the lazy mode), and a range whose removal
//! would split an entry with no room left for the second half hands that
//! half back to the caller, which unregisters it.

/// Most ranges: a JVM's heap, code cache and metaspace, or a jemalloc
/// process's extents, fit many times over.
pub const MAX_MAPPINGS: usize = 1024;
/// Most ranges the program asked huge pages for (`MADV_HUGEPAGE`); past
/// that every block counts as asked.
pub const MAX_HUGE: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// An address range `[start, end)`.
pub struct Range {
    /// Its first byte.
    pub start: usize,
    /// One past its last byte.
    pub end: usize,
}

const NONE: Range = Range { start: 0, end: 0 };

/// The registered mappings, and the ranges asked huge pages for.
pub struct Table {
    list: [Range; MAX_MAPPINGS],
    n: usize,
    /// Where the program asked for huge pages (the registration undoes the
    /// advice itself: the kernel would fault a huge page in before it
    /// reports the fault), unordered; `all_huge` once it overflowed.
    huge: [Range; MAX_HUGE],
    n_huge: usize,
    all_huge: bool,
}

impl Table {
    /// An empty table (a static's initial value).
    pub const fn new() -> Table {
        Table {
            list: [NONE; MAX_MAPPINGS],
            n: 0,
            huge: [NONE; MAX_HUGE],
            n_huge: 0,
            all_huge: false,
        }
    }

    /// How many ranges are registered.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Entry `i` (below [`Table::len`]), in address order.
    pub fn get(&self, i: usize) -> Range {
        self.list[i]
    }

    /// The first entry that ends after `addr`.
    fn first_after(&self, addr: usize) -> usize {
        self.list[..self.n].partition_point(|r| r.end <= addr)
    }

    /// The entry holding `addr`.
    pub fn find(&self, addr: usize) -> Option<Range> {
        let i = self.first_after(addr);
        (i < self.n && self.list[i].start <= addr).then(|| self.list[i])
    }

    /// Whether any entry meets `[start, end)`.
    pub fn overlaps(&self, start: usize, end: usize) -> bool {
        let i = self.first_after(start);
        i < self.n && self.list[i].start < end
    }

    /// The parts of entries inside `[start, end)`, in order, to `f`.
    pub fn each_within(&self, start: usize, end: usize, mut f: impl FnMut(Range)) {
        for r in &self.list[self.first_after(start)..self.n] {
            if r.start >= end {
                break;
            }
            f(Range {
                start: r.start.max(start),
                end: r.end.min(end),
            });
        }
    }

    /// Adds `r`, which meets no entry; false if the list is full (or `r`
    /// empty or overlapping: never, from the callers).
    pub fn insert(&mut self, r: Range) -> bool {
        if r.start >= r.end || self.n == MAX_MAPPINGS || self.overlaps(r.start, r.end) {
            return false;
        }
        let i = self.first_after(r.start);
        self.list.copy_within(i..self.n, i + 1);
        self.list[i] = r;
        self.n += 1;
        true
    }

    /// The program asked for huge pages on `[start, end)`.
    pub fn ask_huge(&mut self, start: usize, end: usize) {
        if self.n_huge == MAX_HUGE {
            self.all_huge = true;
        } else {
            self.huge[self.n_huge] = Range { start, end };
            self.n_huge += 1;
        }
    }

    /// Whether the program asked for huge pages at `addr`.
    pub fn asked_huge(&self, addr: usize) -> bool {
        self.all_huge
            || self.huge[..self.n_huge]
                .iter()
                .any(|r| r.start <= addr && addr < r.end)
    }

    /// Calls `f` on each part of `[start, end)` the program asked huge pages
    /// for (the whole of it once the list overflowed).
    pub fn each_asked_within(&self, start: usize, end: usize, mut f: impl FnMut(usize, usize)) {
        if self.all_huge {
            return f(start, end);
        }
        for r in &self.huge[..self.n_huge] {
            let (s, e) = (r.start.max(start), r.end.min(end));
            if s < e {
                f(s, e);
            }
        }
    }

    /// Takes `[start, end)` out of every entry. An entry that holds it with
    /// room on both sides is split; with no room for the second half, that
    /// half is returned (no longer tracked: the caller unregisters it).
    pub fn remove(&mut self, start: usize, end: usize) -> Option<Range> {
        // An advice over any of it is forgotten whole: at worst a block
        // there gets a small first page, as the kernel would give.
        let mut k = 0;
        while k < self.n_huge {
            if self.huge[k].start < end && start < self.huge[k].end {
                self.n_huge -= 1;
                self.huge[k] = self.huge[self.n_huge];
            } else {
                k += 1;
            }
        }
        let mut i = self.first_after(start);
        let mut lost = None;
        while i < self.n && self.list[i].start < end {
            let r = self.list[i];
            match (r.start < start, r.end > end) {
                (true, true) => {
                    self.list[i].end = start;
                    let tail = Range {
                        start: end,
                        end: r.end,
                    };
                    if self.n == MAX_MAPPINGS {
                        lost = Some(tail);
                    } else {
                        self.list.copy_within(i + 1..self.n, i + 2);
                        self.list[i + 1] = tail;
                        self.n += 1;
                    }
                    break;
                }
                (true, false) => {
                    self.list[i].end = start;
                    i += 1;
                }
                (false, true) => {
                    self.list[i].start = end;
                    break;
                }
                (false, false) => {
                    self.list.copy_within(i + 1..self.n, i);
                    self.n -= 1;
                    self.list[self.n] = NONE;
                }
            }
        }
        lost
    }

    /// Forgets every entry (a forked child: its copies are not registered).
    pub fn clear(&mut self) {
        self.list[..self.n].fill(NONE);
        self.n = 0;
        self.n_huge = 0;
        self.all_huge = false;
    }

    #[cfg(test)]
    fn entries(&self) -> &[Range] {
        &self.list[..self.n]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: usize, end: usize) -> Range {
        Range { start, end }
    }

    #[test]
    fn insert_find_and_overlap() {
        let mut t = Table::new();
        assert!(t.insert(r(100, 200)));
        assert!(t.insert(r(300, 400)));
        assert!(t.insert(r(0, 50)));
        assert!(!t.insert(r(150, 250)), "overlaps");
        assert!(!t.insert(r(60, 60)), "empty");
        assert_eq!(t.entries(), [r(0, 50), r(100, 200), r(300, 400)]);
        assert_eq!(t.get(1), r(100, 200));
        assert_eq!(t.find(100), Some(r(100, 200)));
        assert_eq!(t.find(199), Some(r(100, 200)));
        assert_eq!(t.find(200), None);
        assert_eq!(t.find(250), None);
        assert!(t.overlaps(190, 310));
        assert!(!t.overlaps(200, 300));
        let mut seen = Vec::new();
        t.each_within(40, 350, |x| seen.push(x));
        assert_eq!(seen, [r(40, 50), r(100, 200), r(300, 350)]);
    }

    #[test]
    fn remove_trims_drops_and_splits() {
        let mut t = Table::new();
        for (a, b) in [(0, 100), (200, 300), (400, 500)] {
            assert!(t.insert(r(a, b)));
        }
        // Across the tail of one, the whole of the next, the head of the last.
        assert_eq!(t.remove(50, 450), None);
        assert_eq!(t.entries(), [r(0, 50), r(450, 500)]);
        // Inside one: split.
        assert_eq!(t.remove(10, 20), None);
        assert_eq!(t.entries(), [r(0, 10), r(20, 50), r(450, 500)]);
        // Nothing there.
        assert_eq!(t.remove(100, 400), None);
        assert_eq!(t.len(), 3);
        t.clear();
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn huge_pages_asked_for_and_forgotten() {
        let mut t = Table::new();
        assert!(t.insert(r(0, 1000)));
        t.ask_huge(100, 200);
        assert!(t.asked_huge(150) && !t.asked_huge(200) && !t.asked_huge(50));
        assert_eq!(t.remove(190, 210), None);
        assert!(!t.asked_huge(150), "forgotten with what was unmapped");
        for i in 0..=MAX_HUGE {
            t.ask_huge(i * 10, i * 10 + 5);
        }
        assert!(t.asked_huge(999_999), "overflowed: everything");
    }

    #[test]
    fn a_split_in_a_full_table_gives_the_tail_back() {
        let mut t = Table::new();
        for i in 0..MAX_MAPPINGS {
            assert!(t.insert(r(i * 100, i * 100 + 50)));
        }
        assert!(!t.insert(r(1_000_000, 1_000_001)), "full");
        assert_eq!(t.remove(110, 120), Some(r(120, 150)));
        assert_eq!(t.find(105), Some(r(100, 110)));
        assert_eq!(t.find(130), None);
        assert_eq!(t.len(), MAX_MAPPINGS);
    }
}
