//! An `ALLOC` answer as messages: the daemon's split of the segments it
//! grants into messages of at most `MAX_FDS` records (each record's memfd
//! rides in its message), and the client's gathering of them in order, so
//! both sides follow one rule.

use super::{Malformed, Reply, SegmentRecord, MAX_FDS};

/// The messages of an `ALLOC` answer granting `segments`, in order: at most
/// [`MAX_FDS`] records each, `first` the index of its first record in the
/// answer.
pub fn alloc_messages(segments: &[SegmentRecord]) -> impl Iterator<Item = Reply> + '_ {
    let total = segments.len() as u32;
    segments
        .chunks(MAX_FDS)
        .enumerate()
        .map(move |(k, chunk)| Reply::Alloc {
            total,
            first: (k * MAX_FDS) as u32,
            segments: chunk.to_vec(),
        })
}

/// An `ALLOC` answer as the client receives it, message by message.
#[derive(Debug, Default)]
pub struct AllocAnswer {
    /// Records (and descriptors) received so far.
    received: usize,
}

impl AllocAnswer {
    /// Takes the next message of the answer (`total`, `first` and `segments`
    /// as decoded) and the number of descriptors that came with it: whether
    /// more messages are due. Records and descriptors must match one to one,
    /// and the message must start where the last one ended.
    pub fn add(
        &mut self,
        total: u32,
        first: u32,
        segments: &[SegmentRecord],
        fds: usize,
    ) -> Result<bool, Malformed> {
        if segments.len() != fds || first as usize != self.received {
            return Err(Malformed("segment records and descriptors disagree"));
        }
        self.received += fds;
        Ok(self.received < total as usize)
    }
}
