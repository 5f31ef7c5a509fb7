//! Injected failures, for the service's fault tests
//! (`prezero-cli/tests/service_faults.rs`): in debug builds only, so no
//! release build carries a trace of them. `PREZERO_SYS_FAULT` names calls of
//! this layer to fail as the kernel would, without making them:
//!
//! * `KIND:N[,KIND:N...]`: the Nth call of that kind in this process fails
//!   (a kind may be named several times). Kinds, with the errno each fails
//!   with: `memfd_create` (ENOMEM), `fallocate` (ENOMEM: `punch_hole`).
//!
//! Each injected failure is said on stderr, so a test knows it came. A plan
//! that does not parse is a panic at the first call: a test with a typo in it
//! would otherwise pass having injected nothing.
//!
//! Why debug builds and a variable rather than a cargo feature: the tests run
//! the `prezero` binary cargo builds for them in the dev profile, and a
//! feature turned on through prezero-cli's dev-dependencies would be unified
//! into that binary by every `cargo test` (`--release` too) and not by
//! `cargo build`, so `target/*/prezero` would carry it or not by whichever
//! command ran last. `cfg(debug_assertions)` ties it to the profile instead:
//! every release build (`scripts/install.sh`, packages) lacks it, with no flag
//! to remember. The name differs from the preload's `PREZERO_FAULT` (its own
//! layer, its own kinds), so a plan for one never reaches the other.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

/// The calls a failure can be injected into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    MemfdCreate,
    Fallocate,
}

/// Each kind's name in a plan and the errno it fails with, in `Kind`'s order.
const KINDS: [(&str, i32); 2] = [("memfd_create", libc::ENOMEM), ("fallocate", libc::ENOMEM)];

/// Calls made of each kind, in `KINDS`' order.
static CALLS: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];

/// Counts this call of `kind`; its errno if the plan fails it.
///
/// pre: none.
pub(crate) fn check(kind: Kind) -> io::Result<()> {
    static PLAN: OnceLock<Vec<(usize, u64)>> = OnceLock::new();
    let plan = PLAN.get_or_init(|| {
        let text = std::env::var("PREZERO_SYS_FAULT").unwrap_or_default();
        parse(&text).unwrap_or_else(|bad| {
            panic!("PREZERO_SYS_FAULT: '{bad}' is not KIND:N (kinds: memfd_create, fallocate)")
        })
    });
    let i = kind as usize;
    let n = CALLS[i].fetch_add(1, Relaxed) + 1;
    if !plan.contains(&(i, n)) {
        return Ok(());
    }
    let (name, errno) = KINDS[i];
    let e = io::Error::from_raw_os_error(errno);
    eprintln!("prezero: injected fault: {name} call {n} fails ({e})");
    Err(e)
}

/// A plan as (kind's index, call) pairs; the first item that is not `KIND:N`
/// (N at least 1) is the error.
fn parse(text: &str) -> Result<Vec<(usize, u64)>, &str> {
    text.split(',')
        .filter(|item| !item.is_empty())
        .map(|item| {
            let (name, n) = item.split_once(':').ok_or(item)?;
            let i = KINDS.iter().position(|k| k.0 == name).ok_or(item)?;
            // Digits only, as written: no sign, no leading zero.
            match n.parse::<u64>() {
                Ok(k) if k > 0 && k.to_string() == n => Ok((i, k)),
                _ => Err(item),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_plan_names_kinds_and_calls() {
        assert_eq!(parse(""), Ok(vec![]));
        assert_eq!(parse("memfd_create:2"), Ok(vec![(0, 2)]));
        assert_eq!(
            parse("memfd_create:2,fallocate:1,memfd_create:4"),
            Ok(vec![(0, 2), (1, 1), (0, 4)])
        );
        for bad in [
            "memfd_create",
            "memfd_create:",
            "memfd_create:0",
            "memfd_create:-1",
            "memfd_create:+1",
            "memfd_create:01",
            "mmap:1",
            ":3",
            "fallocate:99999999999999999999999",
        ] {
            assert_eq!(parse(bad), Err(bad));
        }
    }
}
