//! `pz_clear`, `pz_clear_strategy`, `pz_clear_bounded`, `pz_clear_near`,
//! `pz_clear_parallel` and `pz_stream_copy`: exactly the bytes named are
//! cleared (or copied), none beside them.

use std::ffi::{c_int, c_void};

use arbitrary::Arbitrary;
use prezero_capi as ffi;

use super::{assert_bytes, succeeded, Buffers, Span, Target};

/// One clear of a span of the destination.
#[derive(Arbitrary, Debug)]
pub struct Clear {
    at: Span,
    how: How,
}

#[derive(Arbitrary, Debug)]
enum How {
    Auto,
    /// Any number: 0-11 are strategies, the rest refused.
    Strategy(i8),
    /// The callback stops the clear at its `stop_after`-th call.
    Bounded {
        max_chunk: usize,
        stop_after: u16,
    },
    Near {
        hint: usize,
    },
    Parallel {
        threads: usize,
    },
}

/// What `on_chunk` is told and answers.
struct Chunks {
    len: usize,
    calls: u32,
    stop_after: u32,
    last_done: usize,
    stopped: bool,
}

unsafe extern "C" fn on_chunk(done: usize, ctx: *mut c_void) -> c_int {
    // SAFETY: ctx is the Chunks of the call that passes this function.
    let c = unsafe { &mut *ctx.cast::<Chunks>() };
    assert!(
        done > c.last_done && done <= c.len,
        "on_chunk({done}) after {} of {}",
        c.last_done,
        c.len
    );
    c.last_done = done;
    c.calls += 1;
    c.stopped = c.calls >= c.stop_after;
    c_int::from(c.stopped)
}

impl Clear {
    pub fn run(self, b: &mut Buffers) {
        let before = b.dst.bytes().to_vec();
        let (p, len, target) = self.at.resolve(&b.dst);
        let mut cleared = usize::MAX;
        // SAFETY (every call): `p` is writable for `len` bytes, or one of the
        // arguments the header promises to refuse.
        // Calls that may refuse arguments they were given in range: an
        // unknown or unsupported strategy, no threads, chunks of no bytes.
        let may_refuse = match self.how {
            How::Strategy(_) => true,
            How::Bounded { max_chunk, .. } => max_chunk == 0,
            How::Parallel { threads } => threads == 0,
            How::Auto | How::Near { .. } => false,
        };
        let (rc, zeroed) = match self.how {
            How::Auto => (unsafe { ffi::pz_clear(p, len) }, len),
            How::Strategy(s) => (unsafe { ffi::pz_clear_strategy(p, len, s.into()) }, len),
            How::Bounded {
                max_chunk,
                stop_after,
            } => {
                let mut c = Chunks {
                    len,
                    calls: 0,
                    stop_after: stop_after.into(),
                    last_done: 0,
                    stopped: false,
                };
                let ctx = std::ptr::from_mut(&mut c).cast();
                let rc = unsafe {
                    ffi::pz_clear_bounded(p, len, max_chunk, Some(on_chunk), ctx, &mut cleared)
                };
                if rc == 0 {
                    let want = if c.stopped { c.last_done } else { len };
                    assert_eq!(cleared, want, "{self:?}: cleared {cleared} of {len}");
                }
                (rc, cleared)
            }
            How::Near { hint } => (unsafe { ffi::pz_clear_near(p, len, hint) }, len),
            How::Parallel { threads } => {
                let rc = unsafe { ffi::pz_clear_parallel(p, len, threads) };
                if threads == 0 {
                    assert_ne!(rc, 0, "{self:?}: no threads, yet it cleared");
                }
                (rc, len)
            }
        };
        let mut want = before;
        match (succeeded(rc, &self), target) {
            (true, Target::Bytes(off, _)) => want[off..off + zeroed].fill(0),
            (true, Target::Refused) => panic!("{self:?}: {len} bytes at {p:?} taken"),
            (false, Target::Bytes(..) | Target::Nothing) if !may_refuse => {
                panic!("{self:?}: refused ({rc})")
            }
            _ => {}
        }
        assert_bytes(b.dst.bytes(), &want, &self);
    }
}

/// One streaming copy into a span of the destination, from the source buffer
/// or from elsewhere in the destination's (overlapping or not).
#[derive(Arbitrary, Debug)]
pub struct Copy {
    dst: Span,
    /// Where the source starts: in the source buffer, or (`in_dst`) in the
    /// destination's, modulo what fits the length.
    src: u32,
    in_dst: bool,
}

impl Copy {
    pub fn run(self, b: &mut Buffers) {
        let before = b.dst.bytes().to_vec();
        let (d, mut len, mut target) = self.dst.resolve(&b.dst);
        let from = if self.in_dst { &b.dst } else { &b.src };
        if let Target::Bytes(off, n) = target {
            len = n.min(from.usable());
            target = Target::Bytes(off, len);
        }
        // A source of `len` readable bytes, unless `len` is one the call
        // must refuse; then anywhere in the buffer.
        let room = from.usable().saturating_sub(len);
        let at = self.src as usize % (room + 1);
        // SAFETY: at <= from.usable().
        let s = unsafe { from.ptr().add(at) };
        let source: Vec<u8> = from.bytes()[at..(at + len).min(from.usable())].to_vec();
        // SAFETY: `d` writable and `s` readable for `len` bytes, or `len` is
        // refused.
        let rc = unsafe { ffi::pz_stream_copy(d, s.cast(), len) };
        let overlaps = self.in_dst
            && matches!(target, Target::Bytes(off, n) if n > 0 && off < at + n && at < off + n);
        let mut want = before;
        match (succeeded(rc, &self), target) {
            (true, _) if overlaps => panic!("{self:?}: an overlapping copy taken"),
            (true, Target::Bytes(off, n)) => want[off..off + n].copy_from_slice(&source),
            (true, Target::Refused) => panic!("{self:?}: {len} bytes taken"),
            (false, Target::Bytes(..) | Target::Nothing) if !overlaps => {
                panic!("{self:?}: refused ({rc})")
            }
            _ => {}
        }
        assert_bytes(b.dst.bytes(), &want, &self);
    }
}
