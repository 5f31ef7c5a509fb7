//! The C ABI's argument checks, call by call: clears (`clear.rs`), template
//! fills (`template.rs`), regions and prefault (`region.rs`) and pools
//! (`pool.rs`), with arbitrary sizes, offsets, counts and flags, over memory
//! fenced by `PROT_NONE` pages. Each call returns a negative errno and
//! changes nothing, or does exactly what it says: the bytes it must change
//! changed as a model of the call says, every other byte as it was. Arguments
//! the header says are refused (NULL, sizes past the address space, counts
//! whose product overflows) must be; a panic stopped at the boundary
//! (`-ENOTRECOVERABLE`) is a finding like any other.
//!
//! What C must promise is kept: every range passed is readable or writable
//! for its length, or is one of those the library promises to refuse.

use std::ffi::{c_int, c_void};

use arbitrary::Arbitrary;
use prezero_testkit::Guarded;

pub mod clear;
pub mod pool;
pub mod region;
pub mod template;

/// Bytes of the destination buffer every clear, copy and fill writes into.
const DST: usize = 256 << 10;
/// Bytes of each template's and of the source's buffer.
const SRC: usize = 8 << 10;

/// Where a call's `(ptr, len)` points.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Span {
    /// `[off, off + len)` of the buffer, each taken modulo what fits.
    Inside { off: u32, len: u32 },
    /// NULL: refused unless `len` is 0.
    Null { len: u8 },
    /// The buffer's start with a length past `isize::MAX`: refused.
    Past { len: usize },
}

/// What a call may do with a [`Span`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Act on these bytes of the buffer: `(offset, len)`.
    Bytes(usize, usize),
    /// Nothing (NULL with a length of 0): success, no byte changed.
    Nothing,
    /// Refuse with an errno.
    Refused,
}

impl Span {
    /// The pointer and length to pass for this span of `buf`, and what the
    /// call may do.
    pub fn resolve(self, buf: &Guarded) -> (*mut c_void, usize, Target) {
        match self {
            Span::Inside { off, len } => {
                let off = off as usize % (buf.usable() + 1);
                let len = len as usize % (buf.usable() - off + 1);
                // SAFETY: off <= buf.usable(): in the buffer or one past it.
                let p = unsafe { buf.ptr().add(off) };
                (p.cast(), len, Target::Bytes(off, len))
            }
            Span::Null { len } => {
                let t = if len == 0 {
                    Target::Nothing
                } else {
                    Target::Refused
                };
                (std::ptr::null_mut(), len as usize, t)
            }
            Span::Past { len } => (buf.ptr().cast(), len | 1 << 63, Target::Refused),
        }
    }
}

/// Whether a call succeeded: 0, or a negative errno that is not a panic
/// stopped at the boundary.
pub fn succeeded(rc: c_int, what: &dyn std::fmt::Debug) -> bool {
    assert!(
        rc <= 0,
        "{what:?}: returned {rc}, neither 0 nor a negative errno"
    );
    assert_ne!(
        rc,
        -libc::ENOTRECOVERABLE,
        "{what:?}: a panic, stopped at the C boundary"
    );
    rc == 0
}

/// Asserts `buf` holds `want`, naming the first byte that differs.
pub fn assert_bytes(buf: &[u8], want: &[u8], what: &dyn std::fmt::Debug) {
    if let Some(i) = buf.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what:?}: byte {i} of the buffer is {:#x}, should be {:#x}",
            buf[i], want[i]
        );
    }
}

/// One call, or a pool's life.
#[derive(Arbitrary, Debug)]
pub enum Op {
    Clear(clear::Clear),
    Copy(clear::Copy),
    Fill(template::Fill),
    Region(region::Map),
    Prefault(region::Prefault),
    Pool(pool::Life),
}

/// The buffers the calls of one input use.
pub struct Buffers {
    pub dst: Guarded,
    pub src: Guarded,
    pub head: Guarded,
    pub tail: Guarded,
    pub words: Guarded,
}

impl Buffers {
    fn new() -> Buffers {
        Buffers {
            dst: Guarded::new(DST),
            src: Guarded::new(SRC),
            head: Guarded::new(SRC),
            tail: Guarded::new(SRC),
            words: Guarded::new(4096),
        }
    }
}

/// Runs the first 16 operations, each on freshly scribbled buffers.
pub fn run(ops: Vec<Op>) {
    let mut b = Buffers::new();
    for op in ops.into_iter().take(16) {
        b.dst.scribble(0x11);
        b.src.scribble(0x22);
        b.head.scribble(0x33);
        b.tail.scribble(0x44);
        match op {
            Op::Clear(c) => c.run(&mut b),
            Op::Copy(c) => c.run(&mut b),
            Op::Fill(f) => f.run(&mut b),
            Op::Region(m) => m.run(),
            Op::Prefault(p) => p.run(&mut b),
            Op::Pool(l) => l.run(&mut b),
        }
    }
}
