//! A multi-message `ALLOC` answer as the client takes it: each message
//! encoded, decoded and gathered (`AllocAnswer`) with the descriptors that
//! came with it, then the segments' lengths checked against the request
//! (`tile`) before anything would be mapped. An answer the client takes holds
//! exactly the segments its messages announce, and its segments cover the
//! request back to back. And the daemon's split (`alloc_messages`) of any
//! list of segments is taken whole, in order.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use prezero_service::fuzzing::alloc_tile;
use prezero_service::protocol::{alloc_messages, AllocAnswer, Reply, SegmentRecord, MAX_FDS};

#[derive(Arbitrary, Debug)]
struct Message {
    total: u32,
    first: u32,
    /// (id, len) per record.
    records: Vec<(u64, u64)>,
    /// Descriptors that came along: the records' count unless given.
    fds: Option<u8>,
    /// The node the message names (version 2), if any.
    node: Option<u32>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// The request: bytes rounded to pages of 4 KiB << `page_shift % 20`.
    bytes: u32,
    page_shift: u8,
    messages: Vec<Message>,
}

fuzz_target!(|input: Input| {
    let page = 4096usize << (input.page_shift % 20);
    let len = (input.bytes as usize).next_multiple_of(page);
    let mut answer = AllocAnswer::default();
    let mut taken: Vec<SegmentRecord> = Vec::new();
    let mut totals = Vec::new();
    let mut complete = false;
    for (seq, m) in input.messages.iter().enumerate() {
        let reply = Reply::Alloc {
            total: m.total,
            first: m.first,
            segments: m
                .records
                .iter()
                .map(|&(id, len)| SegmentRecord { id, len })
                .collect(),
            node: m.node,
        };
        let Ok((
            _,
            Reply::Alloc {
                total,
                first,
                segments,
                ..
            },
        )) = Reply::decode(&reply.encode(seq as u32))
        else {
            // More records than one message carries: refused by the decoder.
            assert!(m.records.len() > MAX_FDS, "{reply:?} does not decode");
            return;
        };
        let fds = m.fds.map_or(segments.len(), usize::from);
        match answer.add(total, first, &segments, fds) {
            Err(_) => return,
            Ok(more) => {
                taken.extend_from_slice(&segments);
                totals.push(total);
                if !more {
                    complete = true;
                    break;
                }
            }
        }
    }
    if !complete {
        return;
    }
    for &t in &totals {
        assert_eq!(
            t as usize,
            taken.len(),
            "an answer of {} segments taken whose messages said {totals:?}",
            taken.len()
        );
    }
    let lens: Vec<u64> = taken.iter().map(|s| s.len).collect();
    if let Ok(spans) = alloc_tile(&lens, len, page) {
        assert_eq!(spans.len(), lens.len());
        let mut at = 0;
        for (&(off, n), &l) in spans.iter().zip(&lens) {
            assert!(
                off == at && n > 0 && n as u64 <= l && n % page == 0,
                "{spans:?} from {lens:?}"
            );
            at = off + n;
        }
        assert_eq!(at, len, "{spans:?} do not cover {len} bytes");
    }
    // What the daemon would send for these segments is taken whole.
    let mut again = AllocAnswer::default();
    let mut back = Vec::new();
    let node = input.messages.first().and_then(|m| m.node);
    let messages: Vec<Reply> = alloc_messages(&taken, node).collect();
    for (k, reply) in messages.iter().enumerate() {
        let Reply::Alloc {
            total,
            first,
            segments,
            node: said,
        } = reply
        else {
            unreachable!("alloc_messages makes ALLOC answers");
        };
        assert_eq!(*said, node, "message {k} names another node");
        let more = again.add(*total, *first, segments, segments.len());
        assert_eq!(
            more,
            Ok(k + 1 < messages.len()),
            "message {k} of {}",
            messages.len()
        );
        back.extend_from_slice(segments);
    }
    assert_eq!(back, taken);
});
