//! The wire format of `prezero serve` (versions 1 and 2), both directions, and the
//! `SOCK_SEQPACKET` send/receive calls that carry it. `docs/PROTOCOL.md` is the
//! reference for other implementations; this folder and that page change
//! together: the numbers here, the messages in `messages.rs`, their bytes in
//! `codec.rs`, an `ALLOC` answer's split into messages in `answer.rs`, the
//! socket calls in `transport.rs`.
//!
//! Every datagram is one message: a 16-byte header, then `len` bytes of payload.
//! All integers are little-endian. Decoding checks every length and field and
//! never trusts a count it has not bounded first.

mod answer;
mod codec;
mod messages;
mod transport;

pub use answer::{alloc_messages, AllocAnswer};
pub use codec::{split, Header};
pub use messages::{
    CgroupStats, Histogram, Malformed, PoolCounters, Refusal, Reply, Request, SegmentRecord,
    ServiceStats, TenantStats,
};
pub use prezero_sys::Received;
pub use transport::{recv, send};

/// `b"PZSV"` read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"PZSV");
/// The newest protocol version this library speaks. Version 2 adds a NUMA
/// node to `ALLOC` and its answer, version 3 `PREPARE`; every message is
/// sent in the lowest version that carries it, so a version-1 peer is served
/// everything but a node and a preparation.
pub const VERSION: u16 = 3;
/// Bytes of the header.
pub const HEADER_LEN: usize = 16;
/// The largest datagram either side sends or accepts.
pub const MAX_MESSAGE: usize = 4096;
/// Most file descriptors in one `ALLOC` reply message (the kernel allows 253).
pub const MAX_FDS: usize = 64;
/// Most segment ids one `RELEASE` names.
pub const MAX_RELEASE_IDS: usize = (MAX_MESSAGE - HEADER_LEN - 8) / 8;

/// Request: memory. Payload: bytes u64, page_size u64, flags u32, node u32
/// (version 2; reserved in version 1).
pub const ALLOC: u16 = 1;
/// `ALLOC` flag (version 2): `node` names the NUMA node the memory must be on.
pub const ALLOC_NODE: u32 = 1;
/// `ALLOC` flag (version 2, with [`ALLOC_NODE`]): when that node is short,
/// another may serve, nearest first; the answer says which.
pub const ALLOC_OTHER_NODES: u32 = 2;
/// Request: give segments back. Payload: count u32, reserved u32, count x id u64.
pub const RELEASE: u16 = 2;
/// Request: counters. Empty payload.
pub const STATS: u16 = 3;
/// Request (version 3): memory prepared for a cgroup. Payload: bytes u64,
/// page_size u64, reserved u32, path length u32, the path.
pub const PREPARE: u16 = 4;
/// `ERROR` flag: the tenant's cgroup limit refused it (no fallback).
pub const ERROR_LIMIT: u32 = 1;
/// Reply bit: set on every message the daemon sends.
pub const REPLY: u16 = 0x8000;
/// Reply: the request failed. Payload: errno i32, reserved u32, ready u64, message.
pub const ERROR: u16 = REPLY;
/// Most pools a daemon has: their records fit one message with the rest.
pub const MAX_POOLS: usize = 16;

#[cfg(test)]
mod tests;
