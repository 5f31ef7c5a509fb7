//! Who pays for a request: the tenant's uid and cgroup, and the cgroup's
//! limits, which the daemon holds a request to as the kernel would hold the
//! tenant's own allocation (`ENOMEM`, and the client makes no fallback).

use super::handle::AllocError;
use super::Server;
use crate::cgroup::parse::display;
use crate::protocol::{Refusal, Reply};
use prezero::fmt_size;

impl Server {
    /// The uid and cgroup connection `conn` is a tenant as. A peer whose
    /// cgroup could not be read, on a machine that charges by cgroup, is
    /// served nothing: the daemon would not know whose limits hold.
    pub(super) fn tenant_of(&self, conn: u64) -> Result<(u32, Option<u64>), AllocError> {
        let c = &self.conns[&conn];
        match &c.cg {
            Ok(cg) => Ok((c.uid, *cg)),
            Err(why) => Err(AllocError::Refused(
                Reply::Error {
                    errno: libc::EACCES,
                    ready: 0,
                    message: format!(
                        "the daemon could not tell which cgroup this client is in ({why}); \
                         it charges each tenant's cgroup, so it serves none it cannot name"
                    ),
                    limit: false,
                },
                Refusal::NotAllowed,
            )),
        }
    }

    /// Refuses `want` more bytes of `page`-byte hugetlb pages for cgroup `cg`
    /// where a limit of its (or an ancestor's) has less room, counting what
    /// the daemon lends its tenants already.
    pub(super) fn check_cgroup_limit(
        &mut self,
        cg: u64,
        page: usize,
        want: u64,
    ) -> Result<(), AllocError> {
        let ledger = &self.ledger;
        let Some(limit) = self.cgroups.limit(cg, page, |k| ledger.lent(k) as u64) else {
            return Ok(());
        };
        if want <= limit.room {
            return Ok(());
        }
        if let Some(d) = self.cgroups.done_mut(cg) {
            d.refusals += 1;
        }
        let message = format!(
            "cgroup {}: {} more bytes of {} hugetlb pages would pass {} of {} ({} left, \
             with {} lent by this daemon): refused as the kernel would refuse them",
            self.cgroups.name(cg),
            want,
            fmt_size(page),
            limit.file,
            display(&limit.at),
            limit.room,
            fmt_size(self.ledger.lent(cg))
        );
        let uid = self.uid_label(cg);
        self.log_for(uid, &message);
        Err(AllocError::Refused(
            Reply::Error {
                errno: libc::ENOMEM,
                ready: 0,
                message,
                limit: true,
            },
            Refusal::CgroupLimit,
        ))
    }

    /// The log throttle's key for a cgroup's lines (one per cgroup, apart
    /// from uids' lines).
    fn uid_label(&self, cg: u64) -> u32 {
        u32::MAX - (cg.min(u64::from(u32::MAX / 2)) as u32)
    }
}
