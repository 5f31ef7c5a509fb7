//! An `ALLOC` answer as messages: the daemon's split of the segments it
//! grants into messages of at most `MAX_FDS` records (each record's memfd
//! rides in its message), and the client's gathering of them in order, so
//! both sides follow one rule.

use super::{Malformed, Reply, SegmentRecord, MAX_FDS};

/// The messages of an `ALLOC` answer granting `segments` on `node`, in
/// order: at most [`MAX_FDS`] records each, `first` the index of its first
/// record in the answer, every one naming the node.
pub fn alloc_messages(
    segments: &[SegmentRecord],
    node: Option<u32>,
) -> impl Iterator<Item = Reply> + '_ {
    let total = segments.len() as u32;
    segments
        .chunks(MAX_FDS)
        .enumerate()
        .map(move |(k, chunk)| Reply::Alloc {
            total,
            first: (k * MAX_FDS) as u32,
            segments: chunk.to_vec(),
            node,
        })
}

/// An `ALLOC` answer as the client receives it, message by message.
#[derive(Debug, Default)]
pub struct AllocAnswer {
    /// Records (and descriptors) received so far.
    received: usize,
    /// The answer's segments, as its first message said.
    total: Option<u32>,
}

impl AllocAnswer {
    /// Takes the next message of the answer (`total`, `first` and `segments`
    /// as decoded) and the number of descriptors that came with it: whether
    /// more messages are due. Every message states the same total and
    /// carries at least one record, each with its descriptor; it starts where
    /// the last one ended and ends at the total at most. So an answer taken
    /// whole holds exactly the segments it announced, and a daemon cannot keep
    /// a client reading messages that bring nothing.
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
        if *self.total.get_or_insert(total) != total {
            return Err(Malformed(
                "the messages of an ALLOC answer disagree on its total",
            ));
        }
        if segments.is_empty() {
            return Err(Malformed("a message of an ALLOC answer without a segment"));
        }
        self.received += fds;
        if self.received > total as usize {
            return Err(Malformed(
                "an ALLOC answer with more segments than its total",
            ));
        }
        Ok(self.received < total as usize)
    }
}
