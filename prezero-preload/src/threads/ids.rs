//! Which of the program's `set*id` calls the preload's threads can repeat
//! as they are. glibc makes every thread repeat such a call and aborts where
//! one fails; ours hold no capability, so a call they cannot make stops
//! them first (`stop.rs`). One they can make, ending with the same ids as a
//! privileged thread would, needs no stop: they follow it as the program's
//! own threads do (an impersonating server's `seteuid` back to its real
//! uid, a signal handler's `setresgid(-1, -1, -1)`).

/// What a `set*id` call asks (`u32::MAX`: keep that id), of uids or gids.
#[derive(Clone, Copy, Debug)]
pub enum IdCall {
    /// `setresuid`, `setresgid`: real, effective, saved.
    Res([u32; 3]),
    /// `setreuid`, `setregid`: real, effective.
    Re(u32, u32),
    /// `seteuid`, `setegid` (glibc makes them `setres*id(-1, e, -1)`).
    Eff(u32),
    /// `setuid`, `setgid`: all three where privileged, the effective alone
    /// where not.
    Set(u32),
}

/// A `set*id` call and whether it is of gids (else uids).
#[derive(Clone, Copy, Debug)]
pub struct IdChange {
    /// Of gids (else uids).
    pub gid: bool,
    /// Which call, with its ids.
    pub call: IdCall,
}

impl IdChange {
    /// Whether a thread without capabilities whose ids (real, effective,
    /// saved, file-system uid; then the same gids, as `/proc` has them)
    /// are `ids` can repeat the call, ending as a privileged thread would.
    pub fn alike_for(&self, ids: &[u32; 8]) -> bool {
        let at = if self.gid { 4 } else { 0 };
        unprivileged_alike(self.call, [ids[at], ids[at + 1], ids[at + 2]])
    }
}

const KEEP: u32 = u32::MAX;

/// Whether a thread without capabilities whose (real, effective, saved) ids
/// are `cur` may make `call`, and ends with the ids a privileged one would.
pub fn unprivileged_alike(call: IdCall, cur: [u32; 3]) -> bool {
    let any = |v: u32| v == KEEP || cur.contains(&v);
    match call {
        IdCall::Res(ids) => ids.into_iter().all(any),
        IdCall::Re(r, e) => (r == KEEP || r == cur[0] || r == cur[1]) && any(e),
        IdCall::Eff(e) => any(e),
        IdCall::Set(v) => cur.iter().all(|&c| c == v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_needs_a_capability_stops_ours() {
        let root = [0, 0, 0];
        assert!(!unprivileged_alike(IdCall::Eff(65534), root));
        assert!(!unprivileged_alike(IdCall::Res([65534; 3]), root));
        assert!(!unprivileged_alike(IdCall::Set(65534), root));
        assert!(!unprivileged_alike(IdCall::Re(KEEP, 65534), root));
    }

    #[test]
    fn a_call_among_the_ids_held_needs_none() {
        // An impersonating root server, euid 65534 for a request: back.
        let serving = [0, 65534, 0];
        assert!(unprivileged_alike(IdCall::Eff(0), serving));
        assert!(unprivileged_alike(IdCall::Res([KEEP, 0, KEEP]), serving));
        assert!(unprivileged_alike(IdCall::Res([KEEP; 3]), [0, 0, 0]));
        assert!(unprivileged_alike(IdCall::Re(65534, 0), serving));
        // setuid differs where privileged (all three) unless nothing changes.
        assert!(!unprivileged_alike(IdCall::Set(0), serving));
        assert!(unprivileged_alike(IdCall::Set(7), [7, 7, 7]));
        // The real id of setreuid must be the real or effective one.
        assert!(!unprivileged_alike(IdCall::Re(5, KEEP), [0, 1, 5]));
    }
}
