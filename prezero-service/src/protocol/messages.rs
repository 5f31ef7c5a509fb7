//! The messages of the protocol as Rust values: the requests, the replies, and
//! the counters a `STATS` answer carries. Their bytes are in `codec.rs`.

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
        /// [`ALLOC_NODE`](super::ALLOC_NODE), [`ALLOC_OTHER_NODES`](super::ALLOC_OTHER_NODES)
        /// (version 2); none in version 1.
        flags: u32,
        /// The NUMA node, with `ALLOC_NODE`; else 0.
        node: u32,
    },
    /// Segments the client is done with.
    Release {
        /// Segment ids from `ALLOC` replies on this connection.
        ids: Vec<u64>,
    },
    /// The daemon's counters.
    Stats,
    /// Prepare memory for a tenant cgroup before its tenant starts
    /// (version 3): the daemon faults `bytes` in from inside the cgroup, so
    /// the kernel charges them there, and hands them to its tenants only.
    /// 0 bytes withdraws. Root, the daemon's uid and the cgroup directory's
    /// owner may.
    Prepare {
        /// The cgroup's path in the daemon's hierarchy ("/machine.slice/vm1.scope").
        cgroup: Vec<u8>,
        /// Bytes to keep there.
        bytes: u64,
        /// Page size in bytes; one of the daemon's pools.
        page_size: u64,
    },
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
        /// Refused because the tenant's cgroup is at its limit (`ENOMEM`, as
        /// the kernel's own allocation would be): no local fallback either.
        limit: bool,
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
        /// The NUMA node every page is on (version 2: the answer to a request
        /// that named a node); `None` in version 1.
        node: Option<u32>,
    },
    /// `RELEASE` done: this many segments are now quarantined.
    Released {
        /// Segments released.
        count: u32,
    },
    /// Counters.
    Stats(Box<ServiceStats>),
    /// `PREPARE` done (version 3).
    Prepared {
        /// Bytes now kept for the cgroup (its request rounded to segments).
        target: u64,
        /// Bytes placed there already, in every state.
        placed: u64,
    },
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
    /// The NUMA node of every page of the pool (`None` from a daemon that
    /// does not say).
    pub node: Option<u32>,
    /// Bytes the pool lacks of its target because its node has too few free
    /// hugetlb pages (0 when it lacks none, and from a daemon that does not
    /// say).
    pub short: u64,
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
    /// The tenant's cgroup is at its hugetlb or memory limit (`ENOMEM`).
    CgroupLimit,
}

impl Refusal {
    /// Every reason, in wire order.
    pub const ALL: [Refusal; 8] = [
        Refusal::NotReady,
        Refusal::PoolCap,
        Refusal::UidCap,
        Refusal::BadRequest,
        Refusal::NotAllowed,
        Refusal::TooManyConnections,
        Refusal::Malformed,
        Refusal::CgroupLimit,
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
            Refusal::CgroupLimit => "cgroup_limit",
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

/// One tenant cgroup as `STATS` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupStats {
    /// Its path in the daemon's hierarchy (bytes as the kernel has them).
    pub name: Vec<u8>,
    /// Connections of its tenants open.
    pub connections: u32,
    /// Bytes of segments placed in it: the kernel charges their pages to it
    /// (its prepared part, held or ready).
    pub placed: u64,
    /// Bytes of the shared pool its tenants hold: charged to the daemon by
    /// the kernel, counted against the cgroup's limits by the daemon.
    pub lent: u64,
    /// Bytes prepared for it (announced or configured).
    pub prepared: u64,
    /// Bytes made zero for it (its released segments, its fills).
    pub cleaned_bytes: u64,
    /// CPU that work took inside the cgroup (the kernel charged it there).
    pub cpu_in_ns: u64,
    /// CPU the daemon spent for it in its own cgroup (where the cgroup could
    /// not take the work), counted here since the kernel did not.
    pub cpu_daemon_ns: u64,
    /// Requests refused at its limits.
    pub refusals: u64,
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
    /// Every tenant cgroup the daemon knows, most charged first (root and
    /// the daemon's uid see all; others those of their own connections).
    pub cgroups: Vec<CgroupStats>,
    /// Cgroups left out to fit the message.
    pub cgroups_omitted: u32,
}
