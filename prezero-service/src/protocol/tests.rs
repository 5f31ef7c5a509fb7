//! The protocol's tests: every message round-trips, an older daemon's answer still
//! decodes, and no truncation or corruption panics.

use super::*;

#[test]
fn requests_round_trip() {
    for req in [
        Request::Alloc {
            bytes: 1 << 30,
            page_size: 2 << 20,
            flags: 0,
            node: 0,
        },
        Request::Alloc {
            bytes: 1 << 30,
            page_size: 2 << 20,
            flags: ALLOC_NODE | ALLOC_OTHER_NODES,
            node: 3,
        },
        Request::Release { ids: vec![1, 2, 3] },
        Request::Release { ids: vec![] },
        Request::Stats,
        Request::Prepare {
            cgroup: b"/machine.slice/vm 1.scope".to_vec(),
            bytes: 4 << 30,
            page_size: 2 << 20,
        },
    ] {
        assert_eq!(Request::decode(&req.encode(7)), Ok((7, req)));
    }
}

#[test]
fn a_preparation_is_version_3_and_a_version_2_one_is_refused() {
    let req = Request::Prepare {
        cgroup: b"/a".to_vec(),
        bytes: 1,
        page_size: 2,
    };
    let mut msg = req.encode(1);
    assert_eq!(u16::from_le_bytes([msg[4], msg[5]]), 3);
    msg[4] = 2;
    assert!(
        Request::decode(&msg).is_err(),
        "PREPARE is not a version-2 request"
    );
}

#[test]
fn replies_round_trip() {
    let stats = ServiceStats {
        pools: vec![
            PoolCounters {
                page_size: 2 << 20,
                ready: 3,
                node: Some(1),
                short: 6 << 20,
                ..Default::default()
            },
            PoolCounters::default(),
        ],
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
        cgroups: vec![CgroupStats {
            name: b"/machine.slice/vm \"1\".scope\xff".to_vec(),
            connections: 1,
            placed: 1 << 30,
            lent: 2 << 20,
            prepared: 1 << 30,
            cleaned_bytes: 3 << 30,
            cpu_in_ns: 123,
            cpu_daemon_ns: 4,
            refusals: 2,
        }],
        cgroups_omitted: 1,
        ..Default::default()
    };
    for reply in [
        Reply::Error {
            errno: libc::ENOMEM,
            ready: 5,
            message: "too little".into(),
            limit: false,
        },
        Reply::Error {
            errno: libc::ENOMEM,
            ready: 0,
            message: "cgroup /a at hugetlb.2MB.max".into(),
            limit: true,
        },
        Reply::Prepared {
            target: 8 << 30,
            placed: 2 << 30,
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
            node: None,
        },
        Reply::Alloc {
            total: 1,
            first: 0,
            segments: vec![SegmentRecord {
                id: 1,
                len: 2 << 20,
            }],
            node: Some(2),
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
    // This version's records are 88 bytes (the node is the tenth field, the
    // bytes short of hugetlb pages the eleventh).
    p.extend_from_slice(&payload[8 + 88..8 + 88 + 9 * 8 + 24]);
    let mut m = kind_seq.to_vec();
    m[12..16].copy_from_slice(&(p.len() as u32).to_le_bytes());
    m.extend(p);
    let Ok((_, Reply::Stats(got))) = Reply::decode(&m) else {
        panic!("an older daemon's answer does not decode");
    };
    assert_eq!((got.pools[0].ready, got.pools[0].handouts), (3, 0));
    assert_eq!(
        (got.pools[0].node, got.pools[0].short),
        (None, 0),
        "an older daemon's pool has no node, and says no shortage"
    );
    // A version-2 daemon's records of 80 bytes: a node, no shortage said.
    let mut with_node = ServiceStats {
        pools: vec![PoolCounters {
            node: Some(1),
            short: 2 << 20,
            ..Default::default()
        }],
        ..Default::default()
    };
    let msg80 = Reply::Stats(Box::new(with_node.clone())).encode(1);
    let (kind_seq, payload) = msg80.split_at(HEADER_LEN);
    let mut p = payload[..8].to_vec();
    p[4..8].copy_from_slice(&80u32.to_le_bytes());
    p.extend_from_slice(&payload[8..8 + 80]);
    p.extend_from_slice(&payload[8 + 88..]);
    let mut m = kind_seq.to_vec();
    m[12..16].copy_from_slice(&(p.len() as u32).to_le_bytes());
    m.extend(p);
    with_node.pools[0].short = 0;
    assert_eq!(
        Reply::decode(&m),
        Ok((1, Reply::Stats(Box::new(with_node)))),
        "80-byte pool records read with no shortage"
    );
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
            node: 0,
        }
        .encode(1),
        Request::Alloc {
            bytes: 1,
            page_size: 2,
            flags: ALLOC_NODE,
            node: 1,
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

/// A message is sent in the lowest version that carries it: a request or an
/// answer without a node is version 1, which a version-1 peer reads; only a
/// node makes version 2. Version 1 keeps its reserved field, and version 2's
/// flags must agree with the node.
#[test]
fn only_a_node_makes_version_2_and_version_1_keeps_its_rules() {
    let version = |m: &[u8]| u16::from_le_bytes([m[4], m[5]]);
    let any = Request::Alloc {
        bytes: 1,
        page_size: 2 << 20,
        flags: 0,
        node: 0,
    };
    assert_eq!(version(&any.encode(1)), 1);
    let on1 = Request::Alloc {
        bytes: 1,
        page_size: 2 << 20,
        flags: ALLOC_NODE,
        node: 1,
    };
    assert_eq!(version(&on1.encode(1)), 2);
    let reply = |node| Reply::Alloc {
        total: 0,
        first: 0,
        segments: vec![],
        node,
    };
    assert_eq!(version(&reply(None).encode(1)), 1);
    assert_eq!(version(&reply(Some(0)).encode(1)), 2);
    assert_eq!(version(&Request::Stats.encode(1)), 1);
    // Version 1 with the node's place not zero; version 2 with a node but no
    // flag, or other nodes without a node; a version from the future.
    let mut v1 = on1.encode(1);
    v1[4] = 1;
    assert!(Request::decode(&v1).is_err());
    let mut no_flag = on1.encode(1);
    no_flag[HEADER_LEN + 16..HEADER_LEN + 20].copy_from_slice(&0u32.to_le_bytes());
    assert!(Request::decode(&no_flag).is_err());
    let mut others_alone = any.encode(1);
    others_alone[4] = 2;
    others_alone[HEADER_LEN + 16..HEADER_LEN + 20]
        .copy_from_slice(&ALLOC_OTHER_NODES.to_le_bytes());
    assert!(Request::decode(&others_alone).is_err());
    let mut v1_flags = any.encode(1);
    v1_flags[HEADER_LEN + 16..HEADER_LEN + 20].copy_from_slice(&ALLOC_NODE.to_le_bytes());
    assert!(Request::decode(&v1_flags).is_err(), "no flags in version 1");
    let mut future = any.encode(1);
    future[4] = VERSION.to_le_bytes()[0] + 1;
    assert!(Request::decode(&future).is_err());
    // A version-1 answer's reserved field is no node, whatever it holds.
    let mut old = reply(None).encode(1);
    old[HEADER_LEN + 12..HEADER_LEN + 16].copy_from_slice(&7u32.to_le_bytes());
    assert!(matches!(
        Reply::decode(&old),
        Ok((_, Reply::Alloc { node: None, .. }))
    ));
}

/// Found by the fuzz target `request` once version 2 came: a version-2
/// message without a node (a `RELEASE` from a newer client) is read, and
/// written back in version 1, the lowest that carries it; nothing else of
/// its bytes changes.
#[test]
fn a_version_2_message_without_a_node_reads_and_writes_back_as_version_1() {
    let release = Request::Release { ids: vec![] };
    let mut v2 = release.encode(2);
    assert_eq!(&v2[4..6], &1u16.to_le_bytes());
    v2[4] = 2;
    let (seq, back) = Request::decode(&v2).unwrap();
    assert_eq!((seq, &back), (2, &release));
    let again = back.encode(seq);
    assert_eq!((&again[..4], &again[6..]), (&v2[..4], &v2[6..]));
    assert_eq!(&again[4..6], &1u16.to_le_bytes());
}

/// What the daemon splits into messages the client takes whole, in order.
#[test]
fn an_alloc_answer_split_into_messages_is_taken_whole() {
    for n in [1, MAX_FDS - 1, MAX_FDS, MAX_FDS + 1, 3 * MAX_FDS + 5] {
        let records: Vec<SegmentRecord> = (0..n as u64)
            .map(|id| SegmentRecord { id, len: 2 << 20 })
            .collect();
        for node in [None, Some(3)] {
            let mut answer = AllocAnswer::default();
            let messages: Vec<Reply> = alloc_messages(&records, node).collect();
            assert_eq!(messages.len(), n.div_ceil(MAX_FDS));
            let mut back = Vec::new();
            for (k, m) in messages.iter().enumerate() {
                let Ok((
                    _,
                    Reply::Alloc {
                        total,
                        first,
                        segments,
                        node: got,
                    },
                )) = Reply::decode(&m.encode(1))
                else {
                    panic!("{m:?} does not decode");
                };
                assert_eq!(got, node);
                let more = answer.add(total, first, &segments, segments.len());
                assert_eq!(more, Ok(k + 1 < messages.len()));
                back.extend(segments);
            }
            assert_eq!(back, records);
        }
    }
}

/// Found by the fuzz target `alloc_answer`: messages whose totals disagreed
/// (a first one of no segments saying 1624264, a second one of none saying
/// 0) made a whole answer of no segments. Every message must state the one
/// total, bring a segment, and not pass the total.
#[test]
fn an_alloc_answer_holds_exactly_the_segments_it_announces() {
    let seg = |id| SegmentRecord { id, len: 2 << 20 };
    let mut a = AllocAnswer::default();
    assert!(a.add(1_624_264, 0, &[], 0).is_err(), "no segment");
    let mut a = AllocAnswer::default();
    assert_eq!(a.add(3, 0, &[seg(1)], 1), Ok(true));
    assert!(a.add(2, 1, &[seg(2)], 1).is_err(), "another total");
    let mut a = AllocAnswer::default();
    assert!(a.add(1, 0, &[seg(1), seg(2)], 2).is_err(), "past its total");
    let mut a = AllocAnswer::default();
    assert!(a.add(0, 0, &[], 0).is_err(), "an answer of nothing");
    let mut a = AllocAnswer::default();
    assert!(
        a.add(2, 0, &[seg(1)], 2).is_err(),
        "records and descriptors"
    );
    let mut a = AllocAnswer::default();
    assert_eq!(a.add(2, 0, &[seg(1)], 1), Ok(true));
    assert!(
        a.add(2, 0, &[seg(2)], 1).is_err(),
        "not where the last ended"
    );
}

/// Found by the fuzz target `reply`: an `ERROR` answer whose message is not
/// UTF-8 read longer than one message holds (each bad byte became U+FFFD,
/// three bytes), so sent on it came back cut, another message. It is read
/// cut to what a message holds, as the encoder cuts it.
#[test]
fn an_error_message_that_is_not_utf8_reads_as_one_message_holds() {
    let room = MAX_MESSAGE - HEADER_LEN - 16;
    let mut msg = Reply::Error {
        errno: libc::EBUSY,
        ready: 0,
        message: String::new(),
        limit: false,
    }
    .encode(3);
    msg.extend(std::iter::repeat_n(0xff, room));
    let len = (msg.len() - HEADER_LEN) as u32;
    msg[12..16].copy_from_slice(&len.to_le_bytes());
    let Ok((3, reply @ Reply::Error { .. })) = Reply::decode(&msg) else {
        panic!("does not decode");
    };
    let Reply::Error { message, .. } = &reply else {
        unreachable!()
    };
    assert!(message.len() <= room && message.chars().all(|c| c == '\u{fffd}'));
    assert_eq!(message.len(), room / 3 * 3);
    assert_eq!(Reply::decode(&reply.encode(3)), Ok((3, reply)));
}

/// Found by the fuzz target `reply`: a `STATS` answer of 48 pools in 64-byte
/// records (an older daemon's length) decoded, and encoded again in 72-byte
/// records it did not fit one message (a subtraction overflowed while the
/// tenants were fitted). More pools than a daemon has, or more refusal
/// reasons than a reader takes, are refused; the largest answer read encodes
/// into one message.
#[test]
fn a_stats_answer_that_reads_encodes_into_one_message() {
    // As an older daemon writes it: 64-byte pool records, no fresh-page
    // counters' successors, no tenants.
    let older = |pools: u32, reasons: u32, buckets: u32| {
        let mut p = Vec::new();
        let mut put = |v: &[u8]| p.extend_from_slice(v);
        put(&pools.to_le_bytes());
        put(&64u32.to_le_bytes());
        for _ in 0..pools {
            put(&[0; 64]);
        }
        put(&[0; 9 * 8 + 8 + 16]);
        put(&reasons.to_le_bytes());
        put(&[0; 4]);
        for _ in 0..reasons {
            put(&[0; 8]);
        }
        put(&buckets.to_le_bytes());
        put(&[0; 4]);
        for b in 0..u64::from(buckets) {
            put(&(b + 1).to_le_bytes());
            put(&[0; 8]);
        }
        put(&[0; 4 * 8 + 8]);
        let mut m = Reply::Released { count: 0 }.encode(1);
        m[6..8].copy_from_slice(&(REPLY | STATS).to_le_bytes());
        m.truncate(HEADER_LEN);
        m[12..16].copy_from_slice(&(p.len() as u32).to_le_bytes());
        m.extend(p);
        assert!(m.len() <= MAX_MESSAGE);
        m
    };
    // The fuzzer's: 48 pools of 64 bytes, and buckets enough to fill the
    // message once the records are 72 bytes.
    assert!(Reply::decode(&older(48, 7, 30)).is_err(), "48 pools");
    assert!(Reply::decode(&older(MAX_POOLS as u32 + 1, 7, 30)).is_err());
    assert!(
        Reply::decode(&older(MAX_POOLS as u32, 65, 0)).is_err(),
        "65 reasons"
    );
    let Ok((1, most)) = Reply::decode(&older(MAX_POOLS as u32, 64, 64)) else {
        panic!("the largest answer a reader takes does not decode");
    };
    assert!(most.encode(1).len() <= MAX_MESSAGE);
}
