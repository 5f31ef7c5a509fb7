//! The client's decoder (`Reply::decode`: errors, `ALLOC` answers,
//! `RELEASE` counts, `STATS` from this and older daemons): any datagram is a
//! reply or an error, never a panic, and what decodes encodes into one
//! message that decodes equal. A `STATS` answer may come back with fewer
//! tenants and cgroup rows (the encoder shows as many as fit, its pool
//! records being longer than an older daemon's), the others counted as
//! omitted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prezero_service::protocol::{Reply, MAX_MESSAGE};

fuzz_target!(|data: &[u8]| {
    let Ok((seq, reply)) = Reply::decode(data) else {
        return;
    };
    let again = reply.encode(seq);
    assert!(
        again.len() <= MAX_MESSAGE,
        "{reply:?} encodes to {} bytes",
        again.len()
    );
    let back = Reply::decode(&again);
    match (&reply, back) {
        (Reply::Stats(s), Ok((q, Reply::Stats(mut b)))) if q == seq => {
            let shown = b.tenants.len();
            assert!(
                shown <= s.tenants.len() && b.tenants[..] == s.tenants[..shown],
                "tenants changed"
            );
            let all = |n: usize, omitted: u32| n as u64 + u64::from(omitted);
            assert_eq!(
                all(shown, b.tenants_omitted),
                all(s.tenants.len(), s.tenants_omitted).min(all(shown, u32::MAX)),
                "tenants lost from the count"
            );
            // The cgroup rows are shown as many as fit after the tenants',
            // the same way.
            let shown_cgroups = b.cgroups.len();
            assert!(
                shown_cgroups <= s.cgroups.len() && b.cgroups[..] == s.cgroups[..shown_cgroups],
                "cgroups changed"
            );
            assert_eq!(
                all(shown_cgroups, b.cgroups_omitted),
                all(s.cgroups.len(), s.cgroups_omitted).min(all(shown_cgroups, u32::MAX)),
                "cgroups lost from the count"
            );
            b.tenants.clone_from(&s.tenants);
            b.tenants_omitted = s.tenants_omitted;
            b.cgroups.clone_from(&s.cgroups);
            b.cgroups_omitted = s.cgroups_omitted;
            assert!(*b == **s, "{s:?} came back as {b:?}");
        }
        (_, back) => assert_eq!(back, Ok((seq, reply))),
    }
});
