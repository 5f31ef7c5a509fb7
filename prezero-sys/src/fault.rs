//! Injected failures, for tests: the one mechanism both layers use. A plan
//! in a variable names calls to fail as the kernel would, without making
//! them:
//!
//! * `KIND:N[,KIND:N...]`: the Nth call of that kind in this process fails
//!   (a kind may be named up to four times); `KIND:N+`: the Nth and every call
//!   after it (a memory cgroup at its limit fails every call that
//!   allocates). N is digits, at least 1, without a leading zero.
//!
//! The plan is read once, at the first call of any kind, with `getenv` and
//! without allocating (the raw layer runs inside `malloc`); every call of
//! each kind is counted. A forked child counts on from its parent's numbers.
//!
//! Two switches, so that a plan for one layer never reaches the other:
//!
//! * the raw layer's calls (`raw/fault.rs`), in a build with the feature
//!   `fault-injection` (the preload's `tests/faults.rs` builds one into a
//!   shared object of its own), read `PREZERO_FAULT`;
//! * the std layer's (`memfd_create`, `fallocate`: [`check`]), in debug
//!   builds only, read `PREZERO_SYS_FAULT`. Why debug builds rather than
//!   a feature: the service's fault tests (`prezero-cli/tests/service_faults.rs`)
//!   run the `prezero` binary cargo builds in the dev profile, and a feature
//!   turned on through dev-dependencies would be unified into that binary by
//!   every `cargo test` and not by `cargo build`. `cfg(debug_assertions)`
//!   ties it to the profile: no release build carries it. A plan there that
//!   does not parse is a panic at the first call (a test with a typo would
//!   otherwise pass having injected nothing), and each failure is said on
//!   stderr.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::*};

/// A plan for `N` kinds of call, read from one variable.
pub(crate) struct Plan<const N: usize> {
    var: &'static CStr,
    names: [&'static [u8]; N],
    /// Calls made of each kind.
    calls: [AtomicU64; N],
    /// The calls of each kind that fail (0: none).
    fail_at: [[AtomicU64; PER_KIND]; N],
    /// Whether every call of the kind after that one fails too (`KIND:N+`).
    fail_on: [[AtomicBool; PER_KIND]; N],
    /// Whether an item of the plan was not `KIND:N` or `KIND:N+`.
    refused: AtomicBool,
    /// Registered with `atexit` when the plan is set.
    at_exit: Option<extern "C" fn()>,
    state: AtomicU8,
}

/// How many items of a plan may name one kind.
const PER_KIND: usize = 4;

const UNREAD: u8 = 0;
const READING: u8 = 1;
const READ: u8 = 2;

impl<const N: usize> Plan<N> {
    /// The plan in `var`, for the kinds `names` (in the order of their
    /// index); `at_exit` runs at exit where the variable is set.
    pub(crate) const fn new(
        var: &'static CStr,
        names: [&'static [u8]; N],
        at_exit: Option<extern "C" fn()>,
    ) -> Self {
        Plan {
            var,
            names,
            calls: [const { AtomicU64::new(0) }; N],
            fail_at: [const { [const { AtomicU64::new(0) }; PER_KIND] }; N],
            fail_on: [const { [const { AtomicBool::new(false) }; PER_KIND] }; N],
            refused: AtomicBool::new(false),
            at_exit,
            state: AtomicU8::new(UNREAD),
        }
    }

    /// Counts this call of kind `i`: its number, and whether it is to fail.
    pub(crate) fn call(&self, i: usize) -> (u64, bool) {
        self.read();
        let n = self.calls[i].fetch_add(1, Relaxed) + 1;
        let fails = (0..PER_KIND).any(|j| {
            let at = self.fail_at[i][j].load(Relaxed);
            n == at || (at != 0 && n > at && self.fail_on[i][j].load(Relaxed))
        });
        (n, fails)
    }

    /// Calls of kind `i` so far.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn calls(&self, i: usize) -> u64 {
        self.calls[i].load(Relaxed)
    }

    /// Kind `i`'s name in a plan.
    #[cfg(debug_assertions)]
    pub(crate) fn name(&self, i: usize) -> &'static [u8] {
        self.names[i]
    }

    /// Whether an item of the plan was neither `KIND:N` nor `KIND:N+`.
    #[cfg(debug_assertions)]
    pub(crate) fn refused(&self) -> bool {
        self.read();
        self.refused.load(Relaxed)
    }

    /// Reads the variable once. A thread that comes while another reads it
    /// waits: no call of its may be counted before the plan is known.
    fn read(&self) {
        match self
            .state
            .compare_exchange(UNREAD, READING, Acquire, Acquire)
        {
            Ok(_) => {}
            Err(READ) => return,
            Err(_) => {
                while self.state.load(Acquire) != READ {
                    std::hint::spin_loop();
                }
                return;
            }
        }
        // SAFETY: getenv reads the NUL-terminated name.
        let p = unsafe { libc::getenv(self.var.as_ptr()) };
        let text = if p.is_null() {
            &[][..]
        } else {
            // SAFETY: getenv's answer is a NUL-terminated string that lives as
            // long as the environment entry, which nothing here changes.
            unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes()
        };
        if let (false, Some(f)) = (text.is_empty(), self.at_exit) {
            // SAFETY: registers a function of the signature atexit calls.
            unsafe { libc::atexit(f) };
        }
        for item in text.split(|&b| b == b',').filter(|i| !i.is_empty()) {
            let free = |i: usize| (0..PER_KIND).find(|&j| self.fail_at[i][j].load(Relaxed) == 0);
            match parse(&self.names, item).and_then(|(i, n, on)| Some((i, free(i)?, n, on))) {
                Some((i, j, n, on)) => {
                    self.fail_at[i][j].store(n, Relaxed);
                    self.fail_on[i][j].store(on, Relaxed);
                }
                None => self.refused.store(true, Relaxed),
            }
        }
        // Release: a thread that sees READ sees the plan.
        self.state.store(READ, Release);
    }
}

/// `KIND:N` or `KIND:N+` as the index of the kind in `names`, N (at least 1,
/// no leading zero) and whether the calls after the Nth fail too.
fn parse(names: &[&[u8]], item: &[u8]) -> Option<(usize, u64, bool)> {
    let (item, on) = match item.strip_suffix(b"+") {
        Some(item) => (item, true),
        None => (item, false),
    };
    let colon = item.iter().position(|&b| b == b':')?;
    let (name, num) = (&item[..colon], &item[colon + 1..]);
    let i = names.iter().position(|k| *k == name)?;
    if num.first().is_none_or(|&d| d == b'0') || !num.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = num.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })?;
    Some((i, n, on))
}

/// The std layer's calls a failure can be injected into.
#[cfg(debug_assertions)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    MemfdCreate,
    Fallocate,
}

/// The std layer's plan, and each kind's errno, in `Kind`'s order.
#[cfg(debug_assertions)]
static STD: Plan<2> = Plan::new(c"PREZERO_SYS_FAULT", [b"memfd_create", b"fallocate"], None);
#[cfg(debug_assertions)]
const STD_ERRNO: [i32; 2] = [libc::ENOMEM, libc::ENOMEM];

/// Counts this call of `kind`; its errno if `PREZERO_SYS_FAULT` fails it.
///
/// pre: none.
#[cfg(debug_assertions)]
pub(crate) fn check(kind: Kind) -> std::io::Result<()> {
    let i = kind as usize;
    let (n, fails) = STD.call(i);
    if STD.refused() {
        let text = std::env::var("PREZERO_SYS_FAULT").unwrap_or_default();
        panic!("PREZERO_SYS_FAULT: '{text}' is not KIND:N[,KIND:N...] (kinds: memfd_create, fallocate)");
    }
    if !fails {
        return Ok(());
    }
    let e = std::io::Error::from_raw_os_error(STD_ERRNO[i]);
    let name = String::from_utf8_lossy(STD.name(i));
    eprintln!("prezero: injected fault: {name} call {n} fails ({e})");
    Err(e)
}

#[cfg(test)]
mod tests {
    use super::{parse, Plan};

    const NAMES: [&[u8]; 3] = [b"mmap", b"thread", b"uffd_wake"];

    #[test]
    fn a_plan_names_a_kind_and_a_call() {
        assert_eq!(parse(&NAMES, b"mmap:1"), Some((0, 1, false)));
        assert_eq!(parse(&NAMES, b"thread:12"), Some((1, 12, false)));
        assert_eq!(parse(&NAMES, b"uffd_wake:8+"), Some((2, 8, true)));
        for bad in [
            &b"mmap"[..],
            b"mmap:",
            b"mmap:0",
            b"mmap:01",
            b"mmap:-1",
            b"mmap:+1",
            b"mmap:1x",
            b"mmap:+",
            b"mmap:1++",
            b"brk:1",
            b":3",
            b"mmap:99999999999999999999999",
        ] {
            assert_eq!(
                parse(&NAMES, bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_kind_named_several_times_fails_at_each_and_n_plus_from_n_on() {
        // A variable of this test's own: no other test reads it.
        std::env::set_var("PREZERO_FAULT_PLAN_TEST", "mmap:2,mmap:4,thread:2+,brk:1");
        static PLAN: Plan<3> = Plan::new(c"PREZERO_FAULT_PLAN_TEST", NAMES, None);
        let mmap: Vec<bool> = (0..5).map(|_| PLAN.call(0).1).collect();
        assert_eq!(mmap, [false, true, false, true, false]);
        let thread: Vec<bool> = (0..4).map(|_| PLAN.call(1).1).collect();
        assert_eq!(thread, [false, true, true, true]);
        assert_eq!(PLAN.call(2), (1, false));
        #[cfg(debug_assertions)]
        assert!(PLAN.refused(), "brk is no kind of this plan");
    }
}
