//! The wire format of `prezero serve` (version 1), both directions, and the
//! `SOCK_SEQPACKET` send/receive calls that carry it. `docs/PROTOCOL.md` is the
//! reference for other implementations; this file and that one change together.
//!
//! Every datagram is one message: a 16-byte header, then `len` bytes of payload.
//! All integers are little-endian. Decoding checks every length and field and
//! never trusts a count it has not bounded first.

use std::io;
use std::os::fd::BorrowedFd;

use crate::sys;
pub use crate::sys::Received;

/// `b"PZSV"` read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"PZSV");
/// The protocol version this library speaks.
pub const VERSION: u16 = 1;
/// Bytes of the header.
pub const HEADER_LEN: usize = 16;
/// The largest datagram either side sends or accepts.
pub const MAX_MESSAGE: usize = 4096;
/// Most file descriptors in one `ALLOC` reply message (the kernel allows 253).
pub const MAX_FDS: usize = 64;
/// Most segment ids one `RELEASE` names.
pub const MAX_RELEASE_IDS: usize = (MAX_MESSAGE - HEADER_LEN - 8) / 8;

/// Request: memory. Payload: bytes u64, page_size u64, flags u32, reserved u32.
pub const ALLOC: u16 = 1;
/// Request: give segments back. Payload: count u32, reserved u32, count x id u64.
pub const RELEASE: u16 = 2;
/// Request: counters. Empty payload.
pub const STATS: u16 = 3;
/// Reply bit: set on every message the daemon sends.
pub const REPLY: u16 = 0x8000;
/// Reply: the request failed. Payload: errno i32, reserved u32, ready u64, message.
pub const ERROR: u16 = REPLY;

/// Why a message could not be decoded (the daemon answers `EPROTO` and disconnects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// A decoded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `bytes` of zeroed memory on pages of `page_size` bytes.
    Alloc {
        /// Bytes wanted (> 0).
        bytes: u64,
        /// Page size in bytes; must name one of the daemon's pools.
        page_size: u64,
        /// No flags are defined in version 1; must be 0.
        flags: u32,
    },
    /// Segments the client is done with.
    Release {
        /// Segment ids from `ALLOC` replies on this connection.
        ids: Vec<u64>,
    },
    /// The daemon's counters.
    Stats,
}

/// One segment of an `ALLOC` reply; its memfd travels in the same message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentRecord {
    /// The daemon's id for the segment (stable across reuse).
    pub id: u64,
    /// Bytes of the memfd.
    pub len: u64,
}

/// A decoded reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The request failed.
    Error {
        /// A positive errno: EINVAL, EACCES, ENOMEM (too little ready), EDQUOT (uid cap)...
        errno: i32,
        /// Bytes ready in the pool asked for (0 if not applicable).
        ready: u64,
        /// For people.
        message: String,
    },
    /// One message of an `ALLOC` answer: `total` segments come in order, in one
    /// or more such messages; this one carries `segments.len()` memfds.
    Alloc {
        /// Segments in the whole answer.
        total: u32,
        /// Index of this message's first segment in the answer.
        first: u32,
        /// The segments of this message, in order.
        segments: Vec<SegmentRecord>,
    },
    /// `RELEASE` done: this many segments are now quarantined.
    Released {
        /// Segments released.
        count: u32,
    },
    /// Counters.
    Stats(Box<ServiceStats>),
}

/// Counters of one pool of the daemon.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// Page size in bytes.
    pub page_size: u64,
    /// Bytes per segment.
    pub segment_size: u64,
    /// Zeroed bytes the daemon keeps ready.
    pub target: u64,
    /// Most bytes the pool holds in all states.
    pub cap: u64,
    /// Segments zero, verified, ready to hand out.
    pub ready: u64,
    /// Segments held by clients.
    pub leased: u64,
    /// Segments released but maybe still held elsewhere, or waiting for the scrubber.
    pub quarantined: u64,
    /// Segments being scrubbed and verified.
    pub scrubbing: u64,
    /// `ALLOC` requests this pool served.
    pub handouts: u64,
}

/// Why the daemon answered with `ERROR`; `STATS` counts each, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Too little ready memory (`ENOMEM` with the ready count).
    NotReady,
    /// More than every pool of the page size may hold (`ENOMEM`).
    PoolCap,
    /// The uid's cap (`EDQUOT`).
    UidCap,
    /// A field out of range, ids not held (`EINVAL`).
    BadRequest,
    /// The peer may not use the service (`EACCES`).
    NotAllowed,
    /// The uid's or the daemon's connection limit (`EAGAIN`).
    TooManyConnections,
    /// A message that could not be decoded (`EPROTO`).
    Malformed,
}

impl Refusal {
    /// Every reason, in wire order.
    pub const ALL: [Refusal; 7] = [
        Refusal::NotReady,
        Refusal::PoolCap,
        Refusal::UidCap,
        Refusal::BadRequest,
        Refusal::NotAllowed,
        Refusal::TooManyConnections,
        Refusal::Malformed,
    ];

    /// The reason's name in metrics (`reason="not_ready"`).
    pub fn name(self) -> &'static str {
        match self {
            Refusal::NotReady => "not_ready",
            Refusal::PoolCap => "pool_cap",
            Refusal::UidCap => "uid_cap",
            Refusal::BadRequest => "bad_request",
            Refusal::NotAllowed => "not_allowed",
            Refusal::TooManyConnections => "too_many_connections",
            Refusal::Malformed => "malformed",
        }
    }
}

/// Hand-out latency: from an `ALLOC` request read to its last answer sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    /// Upper bound of each bucket in nanoseconds, ascending.
    pub bounds_ns: Vec<u64>,
    /// Observations in each bucket (not cumulative): above the previous bound,
    /// at most this one. Those above the last bound are `count - sum`.
    pub counts: Vec<u64>,
    /// Sum of every observation.
    pub sum_ns: u64,
    /// Observations.
    pub count: u64,
}

/// One tenant as `STATS` shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantStats {
    /// The tenant's uid.
    pub uid: u32,
    /// Connections it has open.
    pub connections: u32,
    /// Bytes it holds, has in quarantine or being cleaned (what its cap counts).
    pub charged: u64,
}

/// What `STATS` returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceStats {
    /// One entry per configured page size.
    pub pools: Vec<PoolCounters>,
    /// Connections open now.
    pub clients: u64,
    /// `ALLOC` requests served.
    pub handouts: u64,
    /// Requests answered with an error (refusals included).
    pub refusals: u64,
    /// Messages that could not be decoded.
    pub protocol_errors: u64,
    /// Bytes the scrubber has cleared.
    pub scrubbed_bytes: u64,
    /// Nanoseconds it spent clearing them.
    pub scrub_ns: u64,
    /// Bytes it has verified.
    pub verified_bytes: u64,
    /// Nanoseconds it spent verifying them.
    pub verify_ns: u64,
    /// Segments that failed verification (and were destroyed, never handed out).
    pub verify_failures: u64,
    /// The asking uid.
    pub uid: u32,
    /// Bytes that uid holds or has in quarantine.
    pub uid_used: u64,
    /// That uid's cap (`u64::MAX`: none).
    pub uid_cap: u64,
    /// Answers with `ERROR` by reason, indexed as [`Refusal::ALL`] (empty from
    /// a daemon that does not count them).
    pub refusals_by_reason: Vec<u64>,
    /// Hand-out latency.
    pub latency: Histogram,
    /// Of `scrubbed_bytes`, those made zero with fresh pages (punched and
    /// repopulated, the kernel zeroing) rather than scrubbed in place.
    pub fresh_bytes: u64,
    /// Of `scrub_ns`, the time spent on them.
    pub fresh_ns: u64,
    /// Every tenant with a connection or a charge, most charged first (root
    /// and the daemon's uid see all; others see themselves only).
    pub tenants: Vec<TenantStats>,
    /// Tenants left out to fit the message.
    pub tenants_omitted: u32,
}

/// Bytes of one pool record this version writes; readers accept 64 (the first
/// eight fields) and skip what they do not know.
const POOL_RECORD_LEN: u32 = 9 * 8;
const MIN_POOL_RECORD_LEN: usize = 8 * 8;
/// Most pools a daemon has: their records fit one message with the rest.
pub const MAX_POOLS: usize = 16;
/// Most latency buckets a reader accepts.
const MAX_BUCKETS: usize = 64;

/// Appends little-endian fields to a message under construction.
struct Writer(Vec<u8>);

impl Writer {
    fn new(kind: u16, seq: u32) -> Writer {
        let mut w = Writer(Vec::with_capacity(64));
        w.u32(MAGIC);
        w.u16(VERSION);
        w.u16(kind);
        w.u32(seq);
        w.u32(0); // payload length, patched by finish()
        w
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn finish(mut self) -> Vec<u8> {
        let len = (self.0.len() - HEADER_LEN) as u32;
        self.0[12..16].copy_from_slice(&len.to_le_bytes());
        debug_assert!(self.0.len() <= MAX_MESSAGE);
        self.0
    }
}

/// Reads fields off a payload, failing on the first read past its end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed("payload shorter than its fields"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u32(&mut self) -> Result<u32, Malformed> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, Malformed> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn end(&self) -> Result<(), Malformed> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Malformed("payload longer than its fields"))
        }
    }
}

/// A checked header: the message kind, its sequence number and its payload.
pub fn split(msg: &[u8]) -> Result<(u16, u32, &[u8]), Malformed> {
    if msg.len() < HEADER_LEN {
        return Err(Malformed("shorter than the 16-byte header"));
    }
    if msg.len() > MAX_MESSAGE {
        return Err(Malformed("longer than 4096 bytes"));
    }
    let word = |i: usize| u32::from_le_bytes(msg[i..i + 4].try_into().expect("4 bytes"));
    if word(0) != MAGIC {
        return Err(Malformed("bad magic"));
    }
    if u16::from_le_bytes([msg[4], msg[5]]) != VERSION {
        return Err(Malformed("unsupported protocol version"));
    }
    let kind = u16::from_le_bytes([msg[6], msg[7]]);
    if word(12) as usize != msg.len() - HEADER_LEN {
        return Err(Malformed("length field does not match the datagram"));
    }
    Ok((kind, word(8), &msg[HEADER_LEN..]))
}

impl Request {
    /// The datagram for this request.
    pub fn encode(&self, seq: u32) -> Vec<u8> {
        match self {
            Request::Alloc {
                bytes,
                page_size,
                flags,
            } => {
                let mut w = Writer::new(ALLOC, seq);
                w.u64(*bytes);
                w.u64(*page_size);
                w.u32(*flags);
                w.u32(0);
                w.finish()
            }
            Request::Release { ids } => {
                let mut w = Writer::new(RELEASE, seq);
                w.u32(ids.len() as u32);
                w.u32(0);
                for &id in ids {
                    w.u64(id);
                }
                w.finish()
            }
            Request::Stats => Writer::new(STATS, seq).finish(),
        }
    }

    /// Decodes a request datagram into its sequence number and request.
    pub fn decode(msg: &[u8]) -> Result<(u32, Request), Malformed> {
        let (kind, seq, payload) = split(msg)?;
        let mut r = Reader(payload);
        let req = match kind {
            ALLOC => {
                let bytes = r.u64()?;
                let page_size = r.u64()?;
                let flags = r.u32()?;
                if r.u32()? != 0 {
                    return Err(Malformed("reserved field is not zero"));
                }
                Request::Alloc {
                    bytes,
                    page_size,
                    flags,
                }
            }
            RELEASE => {
                let count = r.u32()? as usize;
                if r.u32()? != 0 {
                    return Err(Malformed("reserved field is not zero"));
                }
                if count > MAX_RELEASE_IDS {
                    return Err(Malformed("more ids than a message holds"));
                }
                let ids = (0..count).map(|_| r.u64()).collect::<Result<_, _>>()?;
                Request::Release { ids }
            }
            STATS => Request::Stats,
            _ => return Err(Malformed("unknown request kind")),
        };
        r.end()?;
        Ok((seq, req))
    }
}

impl Reply {
    /// The datagram for this reply.
    pub fn encode(&self, seq: u32) -> Vec<u8> {
        match self {
            Reply::Error {
                errno,
                ready,
                message,
            } => {
                let mut w = Writer::new(ERROR, seq);
                w.u32(*errno as u32);
                w.u32(0);
                w.u64(*ready);
                let room = MAX_MESSAGE - HEADER_LEN - 16;
                let mut end = message.len().min(room);
                while !message.is_char_boundary(end) {
                    end -= 1;
                }
                w.0.extend_from_slice(&message.as_bytes()[..end]);
                w.finish()
            }
            Reply::Alloc {
                total,
                first,
                segments,
            } => {
                let mut w = Writer::new(REPLY | ALLOC, seq);
                w.u32(*total);
                w.u32(*first);
                w.u32(segments.len() as u32);
                w.u32(0);
                for s in segments {
                    w.u64(s.id);
                    w.u64(s.len);
                }
                w.finish()
            }
            Reply::Released { count } => {
                let mut w = Writer::new(REPLY | RELEASE, seq);
                w.u32(*count);
                w.u32(0);
                w.finish()
            }
            Reply::Stats(s) => {
                let mut w = Writer::new(REPLY | STATS, seq);
                w.u32(s.pools.len() as u32);
                w.u32(POOL_RECORD_LEN);
                for p in &s.pools {
                    for v in [
                        p.page_size,
                        p.segment_size,
                        p.target,
                        p.cap,
                        p.ready,
                        p.leased,
                        p.quarantined,
                        p.scrubbing,
                        p.handouts,
                    ] {
                        w.u64(v);
                    }
                }
                for v in [
                    s.clients,
                    s.handouts,
                    s.refusals,
                    s.protocol_errors,
                    s.scrubbed_bytes,
                    s.scrub_ns,
                    s.verified_bytes,
                    s.verify_ns,
                    s.verify_failures,
                ] {
                    w.u64(v);
                }
                w.u32(s.uid);
                w.u32(0);
                w.u64(s.uid_used);
                w.u64(s.uid_cap);
                w.u32(s.refusals_by_reason.len() as u32);
                w.u32(0);
                for &v in &s.refusals_by_reason {
                    w.u64(v);
                }
                let h = &s.latency;
                w.u32(h.bounds_ns.len() as u32);
                w.u32(0);
                for (&b, &c) in h.bounds_ns.iter().zip(&h.counts) {
                    w.u64(b);
                    w.u64(c);
                }
                w.u64(h.sum_ns);
                w.u64(h.count);
                w.u64(s.fresh_bytes);
                w.u64(s.fresh_ns);
                // As many tenants as fit; the count of the others.
                let room = (MAX_MESSAGE - w.0.len() - 8) / 16;
                let shown = s.tenants.len().min(room);
                w.u32(shown as u32);
                let omitted = (s.tenants.len() - shown) as u64 + u64::from(s.tenants_omitted);
                w.u32(omitted.min(u32::MAX as u64) as u32);
                for t in &s.tenants[..shown] {
                    w.u32(t.uid);
                    w.u32(t.connections);
                    w.u64(t.charged);
                }
                w.finish()
            }
        }
    }

    /// Decodes a reply datagram into its sequence number and reply.
    pub fn decode(msg: &[u8]) -> Result<(u32, Reply), Malformed> {
        let (kind, seq, payload) = split(msg)?;
        let mut r = Reader(payload);
        let reply = match kind {
            ERROR => {
                let errno = r.u32()? as i32;
                r.u32()?;
                let ready = r.u64()?;
                let message = String::from_utf8_lossy(r.take(r.0.len())?).into_owned();
                Reply::Error {
                    errno,
                    ready,
                    message,
                }
            }
            k if k == REPLY | ALLOC => {
                let total = r.u32()?;
                let first = r.u32()?;
                let n = r.u32()? as usize;
                r.u32()?;
                if n > MAX_FDS {
                    return Err(Malformed("more segments than one message carries"));
                }
                let segments = (0..n)
                    .map(|_| {
                        Ok(SegmentRecord {
                            id: r.u64()?,
                            len: r.u64()?,
                        })
                    })
                    .collect::<Result<_, _>>()?;
                Reply::Alloc {
                    total,
                    first,
                    segments,
                }
            }
            k if k == REPLY | RELEASE => {
                let count = r.u32()?;
                r.u32()?;
                Reply::Released { count }
            }
            k if k == REPLY | STATS => {
                let n = r.u32()? as usize;
                let record = r.u32()? as usize;
                if record < MIN_POOL_RECORD_LEN || n > MAX_MESSAGE / record {
                    return Err(Malformed("pool records do not fit the message"));
                }
                let mut pools = Vec::with_capacity(n);
                for _ in 0..n {
                    let mut p = Reader(r.take(record)?);
                    pools.push(PoolCounters {
                        page_size: p.u64()?,
                        segment_size: p.u64()?,
                        target: p.u64()?,
                        cap: p.u64()?,
                        ready: p.u64()?,
                        leased: p.u64()?,
                        quarantined: p.u64()?,
                        scrubbing: p.u64()?,
                        handouts: if p.0.len() >= 8 { p.u64()? } else { 0 },
                    });
                }
                let s = ServiceStats {
                    pools,
                    clients: r.u64()?,
                    handouts: r.u64()?,
                    refusals: r.u64()?,
                    protocol_errors: r.u64()?,
                    scrubbed_bytes: r.u64()?,
                    scrub_ns: r.u64()?,
                    verified_bytes: r.u64()?,
                    verify_ns: r.u64()?,
                    verify_failures: r.u64()?,
                    uid: {
                        let uid = r.u32()?;
                        r.u32()?;
                        uid
                    },
                    uid_used: r.u64()?,
                    uid_cap: r.u64()?,
                    ..Default::default()
                };
                // The counters added after the first release of version 1:
                // absent from an older daemon's answer.
                let s = if r.0.is_empty() {
                    s
                } else {
                    read_stats_tail(&mut r, s)?
                };
                // Later versions append fields; a version-1 reader ignores them.
                return Ok((seq, Reply::Stats(Box::new(s))));
            }
            _ => return Err(Malformed("unknown reply kind")),
        };
        r.end()?;
        Ok((seq, reply))
    }
}

/// Refusals by reason, latency, fresh-page cleaning and tenants: the part of
/// a `STATS` answer that follows `uid_cap`.
fn read_stats_tail(r: &mut Reader<'_>, mut s: ServiceStats) -> Result<ServiceStats, Malformed> {
    let n = r.u32()? as usize;
    r.u32()?;
    if n > MAX_MESSAGE / 8 {
        return Err(Malformed("more refusal reasons than fit the message"));
    }
    s.refusals_by_reason = (0..n).map(|_| r.u64()).collect::<Result<_, _>>()?;
    let b = r.u32()? as usize;
    r.u32()?;
    if b > MAX_BUCKETS {
        return Err(Malformed("too many latency buckets"));
    }
    for _ in 0..b {
        s.latency.bounds_ns.push(r.u64()?);
        s.latency.counts.push(r.u64()?);
    }
    if !s.latency.bounds_ns.windows(2).all(|w| w[0] < w[1]) {
        return Err(Malformed("latency bounds not strictly increasing"));
    }
    s.latency.sum_ns = r.u64()?;
    s.latency.count = r.u64()?;
    s.fresh_bytes = r.u64()?;
    s.fresh_ns = r.u64()?;
    let t = r.u32()? as usize;
    s.tenants_omitted = r.u32()?;
    if t > MAX_MESSAGE / 16 {
        return Err(Malformed("more tenants than fit the message"));
    }
    for _ in 0..t {
        s.tenants.push(TenantStats {
            uid: r.u32()?,
            connections: r.u32()?,
            charged: r.u64()?,
        });
    }
    Ok(s)
}

/// Sends one datagram with `fds` attached (`SCM_RIGHTS`). Never raises SIGPIPE.
pub fn send(sock: BorrowedFd<'_>, msg: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    assert!(
        fds.len() <= MAX_FDS,
        "at most MAX_FDS descriptors per message"
    );
    sys::send_with_fds(sock, msg, fds)
}

/// Receives one datagram into `buf` (which should be `MAX_MESSAGE + 1` bytes so
/// that an oversized one shows as truncated), with any attached descriptors (at
/// most `MAX_FDS`: the kernel closes the rest and says so).
pub fn recv(sock: BorrowedFd<'_>, buf: &mut [u8], flags: libc::c_int) -> io::Result<Received> {
    sys::recv_with_fds(sock, buf, flags, MAX_FDS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        for req in [
            Request::Alloc {
                bytes: 1 << 30,
                page_size: 2 << 20,
                flags: 0,
            },
            Request::Release { ids: vec![1, 2, 3] },
            Request::Release { ids: vec![] },
            Request::Stats,
        ] {
            assert_eq!(Request::decode(&req.encode(7)), Ok((7, req)));
        }
    }

    #[test]
    fn replies_round_trip() {
        let stats = ServiceStats {
            pools: vec![PoolCounters {
                page_size: 2 << 20,
                ready: 3,
                ..Default::default()
            }],
            uid: 1000,
            uid_cap: u64::MAX,
            refusals_by_reason: vec![1, 2, 3, 4, 5, 6, 7],
            latency: Histogram {
                bounds_ns: vec![10, 100],
                counts: vec![4, 5],
                sum_ns: 999,
                count: 10,
            },
            fresh_bytes: 1 << 30,
            fresh_ns: 12,
            tenants: vec![TenantStats {
                uid: 1000,
                connections: 2,
                charged: 4 << 20,
            }],
            tenants_omitted: 3,
            ..Default::default()
        };
        for reply in [
            Reply::Error {
                errno: libc::ENOMEM,
                ready: 5,
                message: "too little".into(),
            },
            Reply::Alloc {
                total: 3,
                first: 0,
                segments: vec![
                    SegmentRecord {
                        id: 9,
                        len: 1 << 28
                    };
                    3
                ],
            },
            Reply::Released { count: 2 },
            Reply::Stats(Box::new(stats)),
        ] {
            assert_eq!(Reply::decode(&reply.encode(3)), Ok((3, reply)));
        }
    }

    #[test]
    fn stats_from_an_older_daemon_and_too_many_tenants_still_decode() {
        let stats = ServiceStats {
            pools: vec![PoolCounters::default(); MAX_POOLS],
            refusals_by_reason: vec![0; Refusal::ALL.len()],
            latency: Histogram {
                bounds_ns: (1..=15).collect(),
                counts: vec![0; 15],
                ..Default::default()
            },
            tenants: vec![TenantStats::default(); 1000],
            ..Default::default()
        };
        let msg = Reply::Stats(Box::new(stats)).encode(1);
        assert!(msg.len() <= MAX_MESSAGE);
        let Ok((_, Reply::Stats(got))) = Reply::decode(&msg) else {
            panic!("does not decode");
        };
        assert_eq!(
            got.tenants.len() as u32 + got.tenants_omitted,
            1000,
            "the tenants that do not fit are counted"
        );
        // A version-1 answer without the counters added later: every pool
        // record 64 bytes, the message ending at the cap.
        let old = Reply::Stats(Box::new(ServiceStats {
            pools: vec![PoolCounters {
                ready: 3,
                ..Default::default()
            }],
            ..Default::default()
        }))
        .encode(1);
        let (kind_seq, payload) = old.split_at(HEADER_LEN);
        let mut p = payload[..8].to_vec();
        p[4..8].copy_from_slice(&64u32.to_le_bytes());
        p.extend_from_slice(&payload[8..8 + 64]);
        p.extend_from_slice(&payload[8 + 72..8 + 72 + 9 * 8 + 24]);
        let mut m = kind_seq.to_vec();
        m[12..16].copy_from_slice(&(p.len() as u32).to_le_bytes());
        m.extend(p);
        let Ok((_, Reply::Stats(got))) = Reply::decode(&m) else {
            panic!("an older daemon's answer does not decode");
        };
        assert_eq!((got.pools[0].ready, got.pools[0].handouts), (3, 0));
        assert!(got.tenants.is_empty() && got.refusals_by_reason.is_empty());
        // Cut anywhere or corrupted anywhere: an error or a value, never a panic.
        for cut in 0..msg.len() {
            let _ = Reply::decode(&msg[..cut]);
        }
        for i in HEADER_LEN..msg.len().min(HEADER_LEN + 600) {
            let mut bad = msg.clone();
            bad[i] ^= 0xff;
            let _ = Reply::decode(&bad);
        }
    }

    #[test]
    fn every_truncation_and_corruption_is_an_error_not_a_panic() {
        let msgs = [
            Request::Alloc {
                bytes: 1,
                page_size: 2,
                flags: 0,
            }
            .encode(1),
            Request::Release { ids: vec![4; 10] }.encode(1),
        ];
        for m in &msgs {
            for cut in 0..m.len() {
                assert!(Request::decode(&m[..cut]).is_err(), "cut at {cut}");
            }
            for i in 0..m.len() {
                let mut bad = m.clone();
                bad[i] ^= 0xff;
                let _ = Request::decode(&bad); // must not panic
            }
        }
        let mut huge = Request::Release { ids: vec![] }.encode(1);
        huge[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Request::decode(&huge).is_err());
    }
}
