//! The messages' bytes: the header, and each request and reply encoded and
//! decoded, every field checked. No I/O: `transport.rs` carries the bytes.

use super::{CgroupStats, Malformed, PoolCounters, Reply, Request, SegmentRecord};
use super::{ServiceStats, TenantStats, ERROR_LIMIT, PREPARE};
use super::{
    ALLOC, ALLOC_NODE, ALLOC_OTHER_NODES, ERROR, HEADER_LEN, MAGIC, MAX_FDS, MAX_MESSAGE,
    MAX_POOLS, MAX_RELEASE_IDS, RELEASE, REPLY, STATS, VERSION,
};

/// Bytes of one pool record this version writes; readers accept 64 (the first
/// eight fields) and skip what they do not know.
const POOL_RECORD_LEN: u32 = 11 * 8;
/// A pool record's node field when the pool has none.
const NO_NODE: u64 = u64::MAX;
const MIN_POOL_RECORD_LEN: usize = 8 * 8;
/// Most latency buckets a reader accepts.
const MAX_BUCKETS: usize = 64;
/// Most refusal reasons a reader accepts (version 1 counts 7): with
/// [`MAX_POOLS`] pools and [`MAX_BUCKETS`] buckets, every answer read encodes
/// into one message again.
const MAX_REASONS: usize = 64;

/// Appends little-endian fields to a message under construction.
struct Writer(Vec<u8>);

impl Writer {
    /// A version-1 message: what every message is unless it needs version 2.
    fn new(kind: u16, seq: u32) -> Writer {
        Writer::with_version(kind, seq, 1)
    }
    fn with_version(kind: u16, seq: u32, version: u16) -> Writer {
        let mut w = Writer(Vec::with_capacity(64));
        w.u32(MAGIC);
        w.u16(version);
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

/// A message's header, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// 1 or 2.
    pub version: u16,
    /// The message kind (bit 15 set on answers).
    pub kind: u16,
    /// The sequence number.
    pub seq: u32,
}

/// A checked header, and the payload after it.
pub fn split(msg: &[u8]) -> Result<(Header, &[u8]), Malformed> {
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
    let version = u16::from_le_bytes([msg[4], msg[5]]);
    if !(1..=VERSION).contains(&version) {
        return Err(Malformed("unsupported protocol version"));
    }
    let kind = u16::from_le_bytes([msg[6], msg[7]]);
    if word(12) as usize != msg.len() - HEADER_LEN {
        return Err(Malformed("length field does not match the datagram"));
    }
    let header = Header {
        version,
        kind,
        seq: word(8),
    };
    Ok((header, &msg[HEADER_LEN..]))
}

impl Request {
    /// The datagram for this request.
    pub fn encode(&self, seq: u32) -> Vec<u8> {
        match self {
            Request::Alloc {
                bytes,
                page_size,
                flags,
                node,
            } => {
                let version = if *flags != 0 || *node != 0 { 2 } else { 1 };
                let mut w = Writer::with_version(ALLOC, seq, version);
                w.u64(*bytes);
                w.u64(*page_size);
                w.u32(*flags);
                w.u32(*node);
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
            Request::Prepare {
                cgroup,
                bytes,
                page_size,
            } => {
                let mut w = Writer::with_version(PREPARE, seq, 3);
                w.u64(*bytes);
                w.u64(*page_size);
                w.u32(0);
                w.u32(cgroup.len() as u32);
                w.0.extend_from_slice(cgroup);
                w.finish()
            }
        }
    }

    /// Decodes a request datagram into its sequence number and request.
    pub fn decode(msg: &[u8]) -> Result<(u32, Request), Malformed> {
        let (Header { version, kind, seq }, payload) = split(msg)?;
        let mut r = Reader(payload);
        let req = match kind {
            ALLOC => {
                let bytes = r.u64()?;
                let page_size = r.u64()?;
                let flags = r.u32()?;
                let node = r.u32()?;
                // Version 1 has no flags and reserved the node's place; in
                // version 2 the daemon refuses unknown flags by name.
                if version == 1 && (node != 0 || flags != 0) {
                    return Err(Malformed("flags or reserved field not zero in version 1"));
                }
                if version >= 2 && flags & ALLOC_NODE == 0 && node != 0 {
                    return Err(Malformed("a node without ALLOC_NODE"));
                }
                if version >= 2 && flags & ALLOC_OTHER_NODES != 0 && flags & ALLOC_NODE == 0 {
                    return Err(Malformed("ALLOC_OTHER_NODES without ALLOC_NODE"));
                }
                Request::Alloc {
                    bytes,
                    page_size,
                    flags,
                    node,
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
            PREPARE if version >= 3 => {
                let bytes = r.u64()?;
                let page_size = r.u64()?;
                if r.u32()? != 0 {
                    return Err(Malformed("reserved field is not zero"));
                }
                let n = r.u32()? as usize;
                Request::Prepare {
                    cgroup: r.take(n)?.to_vec(),
                    bytes,
                    page_size,
                }
            }
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
                limit,
            } => {
                let mut w = Writer::new(ERROR, seq);
                w.u32(*errno as u32);
                w.u32(if *limit { ERROR_LIMIT } else { 0 });
                w.u64(*ready);
                w.0.extend_from_slice(fit_message(message).as_bytes());
                w.finish()
            }
            Reply::Alloc {
                total,
                first,
                segments,
                node,
            } => {
                let version = if node.is_some() { 2 } else { 1 };
                let mut w = Writer::with_version(REPLY | ALLOC, seq, version);
                w.u32(*total);
                w.u32(*first);
                w.u32(segments.len() as u32);
                w.u32(node.unwrap_or(0));
                for s in segments {
                    w.u64(s.id);
                    w.u64(s.len);
                }
                w.finish()
            }
            Reply::Prepared { target, placed } => {
                let mut w = Writer::with_version(REPLY | PREPARE, seq, 3);
                w.u64(*target);
                w.u64(*placed);
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
                write_stats(&mut w, s);
                w.finish()
            }
        }
    }

    /// Decodes a reply datagram into its sequence number and reply.
    pub fn decode(msg: &[u8]) -> Result<(u32, Reply), Malformed> {
        let (Header { version, kind, seq }, payload) = split(msg)?;
        let mut r = Reader(payload);
        let reply = match kind {
            ERROR => {
                let errno = r.u32()? as i32;
                let limit = r.u32()? & ERROR_LIMIT != 0;
                let ready = r.u64()?;
                // Bytes that are not UTF-8 read as U+FFFD, three bytes each:
                // cut to what one message holds, as the encoder cuts it.
                let text = String::from_utf8_lossy(r.take(r.0.len())?);
                let message = fit_message(&text).to_owned();
                Reply::Error {
                    errno,
                    ready,
                    message,
                    limit,
                }
            }
            k if k == REPLY | ALLOC => {
                let total = r.u32()?;
                let first = r.u32()?;
                let n = r.u32()? as usize;
                let node = r.u32()?;
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
                    node: (version >= 2).then_some(node),
                }
            }
            k if k == REPLY | PREPARE && version >= 3 => Reply::Prepared {
                target: r.u64()?,
                placed: r.u64()?,
            },
            k if k == REPLY | RELEASE => {
                let count = r.u32()?;
                r.u32()?;
                Reply::Released { count }
            }
            k if k == REPLY | STATS => {
                let s = read_stats(&mut r)?;
                // Later versions append fields; a version-1 reader ignores them.
                return Ok((seq, Reply::Stats(Box::new(s))));
            }
            _ => return Err(Malformed("unknown reply kind")),
        };
        r.end()?;
        Ok((seq, reply))
    }
}

/// A `STATS` answer's payload: the pool records, the counters, the asker's
/// uid, the refusals, the latency histogram, as many tenants as fit beside
/// the cgroups, and the cgroups.
fn write_stats(w: &mut Writer, s: &ServiceStats) {
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
            p.node.map_or(NO_NODE, u64::from),
            p.short,
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
    // As many tenants as fit beside the cgroups; the count of
    // the others.
    let for_cgroups = s.cgroups.iter().map(cgroup_len).sum::<usize>() + 8;
    let left = MAX_MESSAGE - w.0.len() - 8;
    let room = left.saturating_sub(for_cgroups.min(left / 2)) / 16;
    let shown = s.tenants.len().min(room);
    w.u32(shown as u32);
    let omitted = (s.tenants.len() - shown) as u64 + u64::from(s.tenants_omitted);
    w.u32(omitted.min(u32::MAX as u64) as u32);
    for t in &s.tenants[..shown] {
        w.u32(t.uid);
        w.u32(t.connections);
        w.u64(t.charged);
    }
    write_cgroups(w, s);
}

/// A `STATS` answer's payload, as [`write_stats`] writes it or as an older
/// daemon did (shorter pool records, no counters past the uid's cap).
fn read_stats(r: &mut Reader<'_>) -> Result<ServiceStats, Malformed> {
    let n = r.u32()? as usize;
    let record = r.u32()? as usize;
    if record < MIN_POOL_RECORD_LEN || n > MAX_MESSAGE / record {
        return Err(Malformed("pool records do not fit the message"));
    }
    // Past these no daemon's answer goes, and re-encoded (88-byte
    // pool records, which an older daemon wrote in 64) it would
    // not fit one message.
    if n > MAX_POOLS {
        return Err(Malformed("more pools than a daemon has"));
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
            node: if p.0.len() >= 8 {
                u32::try_from(p.u64()?).ok()
            } else {
                None
            },
            short: if p.0.len() >= 8 { p.u64()? } else { 0 },
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
    if r.0.is_empty() {
        Ok(s)
    } else {
        read_stats_tail(r, s)
    }
}

/// The longest start of `message` that an `ERROR` answer holds, cut between
/// characters.
fn fit_message(message: &str) -> &str {
    let room = MAX_MESSAGE - HEADER_LEN - 16;
    let mut end = message.len().min(room);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

/// Refusals by reason, latency, fresh-page cleaning and tenants: the part of
/// a `STATS` answer that follows `uid_cap`.
fn read_stats_tail(r: &mut Reader<'_>, mut s: ServiceStats) -> Result<ServiceStats, Malformed> {
    let n = r.u32()? as usize;
    r.u32()?;
    if n > MAX_REASONS {
        return Err(Malformed("more refusal reasons than a reader takes"));
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
    // The tenant cgroups: absent from daemons before version 3.
    if !r.0.is_empty() {
        read_cgroups(r, &mut s)?;
    }
    Ok(s)
}

/// Bytes of one cgroup row: eight u64 and two u32, then the path padded to 8.
fn cgroup_len(c: &CgroupStats) -> usize {
    8 + 8 * 8 + c.name.len().next_multiple_of(8)
}

/// The cgroup rows of a `STATS` answer: as many as fit after the tenants
/// (count u32, omitted u32, then per row: path length u32, connections u32,
/// placed, lent, prepared, cleaned bytes, CPU in the cgroup ns, CPU of the
/// daemon's for it ns, refusals, reserved (u64 each), the path, zero-padded
/// to 8 bytes).
fn write_cgroups(w: &mut Writer, s: &ServiceStats) {
    let mut room = MAX_MESSAGE - w.0.len() - 8;
    let shown: Vec<&CgroupStats> = s
        .cgroups
        .iter()
        .take_while(|c| {
            let fits = cgroup_len(c) <= room;
            room = room.saturating_sub(cgroup_len(c));
            fits
        })
        .collect();
    w.u32(shown.len() as u32);
    let omitted = (s.cgroups.len() - shown.len()) as u64 + u64::from(s.cgroups_omitted);
    w.u32(omitted.min(u32::MAX as u64) as u32);
    for c in shown {
        w.u32(c.name.len() as u32);
        w.u32(c.connections);
        for v in [
            c.placed,
            c.lent,
            c.prepared,
            c.cleaned_bytes,
            c.cpu_in_ns,
            c.cpu_daemon_ns,
            c.refusals,
            0,
        ] {
            w.u64(v);
        }
        w.0.extend_from_slice(&c.name);
        w.0.resize(
            w.0.len() + (c.name.len().next_multiple_of(8) - c.name.len()),
            0,
        );
    }
}

fn read_cgroups(r: &mut Reader<'_>, s: &mut ServiceStats) -> Result<(), Malformed> {
    let n = r.u32()? as usize;
    s.cgroups_omitted = r.u32()?;
    if n > MAX_MESSAGE / 72 {
        return Err(Malformed("more cgroups than fit the message"));
    }
    for _ in 0..n {
        let len = r.u32()? as usize;
        let mut c = CgroupStats {
            connections: r.u32()?,
            placed: r.u64()?,
            lent: r.u64()?,
            prepared: r.u64()?,
            cleaned_bytes: r.u64()?,
            cpu_in_ns: r.u64()?,
            cpu_daemon_ns: r.u64()?,
            refusals: r.u64()?,
            ..Default::default()
        };
        r.u64()?;
        let padded = len
            .checked_next_multiple_of(8)
            .ok_or(Malformed("a cgroup path too long"))?;
        c.name = r.take(padded)?[..len].to_vec();
        s.cgroups.push(c);
    }
    Ok(())
}
