//! What the environment says (`prezero run` sets it from its flags), read
//! once at start-up with `getenv`, without allocating.

use std::ffi::CStr;

use crate::cgroup;
use crate::sys;
use prezero::env::parse_size;

/// The cache's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Requests of at least this many bytes are served from the cache
    /// (`PREZERO_THRESHOLD`, default 1 MiB).
    pub threshold: usize,
    /// Most free bytes the cache keeps populated beyond what the program uses
    /// (`PREZERO_CAP`, default the smaller of 25% of MemAvailable and 8 GiB).
    pub cap: usize,
    /// Bytes to populate in the background at start (`PREZERO_PREFILL`), in
    /// the process `PREZERO_PREFILL_PID` names if set (`prezero run` sets it
    /// to the program it execs): not again in every shell, helper or child
    /// program that inherits the environment.
    pub prefill: usize,
    /// Keep a spare (`PREZERO_SPARE=1`, off by default): once a `calloc` had
    /// Dirty memory to clear itself (the program frees and asks again faster
    /// than the scrubber clears), the scrubber populates fresh memory until
    /// one Clean block of that size is ready, if the cap holds two, so the
    /// next one finds zeroes. It moves the clearing off the critical path,
    /// not off the memory bus: a program that streams through memory
    /// meanwhile pays it in bandwidth (numpy's loop on Zen 1: np.zeros 25 ->
    /// 0 ms, the pass after it 62 -> 75 ms), and the cache holds one block
    /// more. Reset when memory goes back.
    pub spare: bool,
    /// Free memory unused this long goes back to the kernel (`PREZERO_IDLE_SECS`, default 5).
    pub idle_secs: u64,
    /// Print a summary line at exit (`PREZERO_STATS=1`).
    pub stats: bool,
    /// Ask for transparent huge pages on the range (`PREZERO_THP=1`). Off by
    /// default: on a VM whose host backs huge pages lazily, a 2 MiB fault
    /// varied 0.3-2.4 s per GiB against a steady 0.4 s for 4 KiB pages
    /// (measured here), and glibc does not ask either. Off under `lazy`,
    /// whose ranges must not be eligible (see `lazy/`).
    pub thp: bool,
    /// The lazy mode (`PREZERO_LAZY=1`): large blocks and the program's
    /// large mappings are populated on first touch with pre-zeroed huge
    /// pages moved in from a reserve (see `lazy/`).
    pub lazy: bool,
    /// Most bytes the lazy mode's reserve holds (`PREZERO_RESERVE`, whole
    /// 2 MiB pages; default the smallest of 1 GiB, 10% of MemAvailable and
    /// 10% of what the memory cgroup has left).
    pub reserve: usize,
    /// Whether `PREZERO_RESERVE` sized the reserve: a person set that much
    /// aside, and it fills whole ahead of demand. The default one fills to
    /// a share of what the program has taken.
    pub reserve_asked: bool,
    /// This process is the program `prezero run` executes
    /// (`PREZERO_PREFILL_PID` names it): it prefills, and its reserve fills
    /// from start-up; other processes only once they fault a large block.
    pub program: bool,
    /// Testing only (`PREZERO_NO_USERFAULTFD=1`): the lazy mode acts as if
    /// userfaultfd were refused, and says so.
    pub no_userfaultfd: bool,
}

/// The smallest threshold accepted: below it the next allocator's own
/// arenas serve better than page-granular blocks.
pub const MIN_THRESHOLD: usize = 64 << 10;

fn env(name: &CStr) -> Option<&'static [u8]> {
    // SAFETY: the string getenv returns lives as long as the environment
    // entry, which nothing here changes.
    unsafe { sys::getenv(name) }
}

/// A size, or zero written `0` (`prezero run --cap 0` sets it so), as the
/// `prezero` command reads its flags: the size parser refuses zero.
fn size_or_zero(s: &[u8]) -> Option<usize> {
    if std::str::from_utf8(s).is_ok_and(|t| t.trim() == "0") {
        return Some(0);
    }
    parse_size(s)
}

/// The smallest reserve: one huge page.
pub const MIN_RESERVE: usize = 2 << 20;

/// A pid: digits only (the size parser would read `1K` as 1024).
fn pid(s: &[u8]) -> Option<usize> {
    s.iter().all(u8::is_ascii_digit).then(|| parse_size(s))?
}

/// A field of /proc/meminfo in bytes, read into a stack buffer.
pub fn meminfo(field: &[u8]) -> Option<usize> {
    let mut buf = [0u8; 4096];
    let n = sys::read_file_start(c"/proc/meminfo", &mut buf).ok()?;
    let text = &buf[..n];
    let at = text.windows(field.len()).position(|w| w == field)?;
    let rest = &text[at + field.len()..];
    let rest = &rest[rest.iter().position(|b| b.is_ascii_digit())?..];
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    size_or_zero(&rest[..end])?.checked_mul(1024)
}

/// Whether this process is the program `prezero run` executed, which keeps
/// the pid it names in `PREZERO_PREFILL_PID` across the exec.
pub fn is_program() -> bool {
    env(c"PREZERO_PREFILL_PID").and_then(pid) == Some(sys::getpid() as usize)
}

/// The machine's memory.
pub fn mem_total() -> Option<usize> {
    meminfo(b"MemTotal:")
}

impl Config {
    pub fn from_env() -> Config {
        let size = |name: &CStr| env(name).and_then(size_or_zero);
        let available = meminfo(b"MemAvailable:");
        let default_cap = available.map_or(1 << 30, |m| m / 4).min(8 << 30);
        // Read only when it counts: the lazy mode with no reserve asked for.
        let default_reserve = || {
            let room = cgroup::room().map_or(usize::MAX, |r| r / 10);
            available.map_or(1 << 30, |m| m / 10).min(1 << 30).min(room)
        };
        let pid = env(c"PREZERO_PREFILL_PID").map(pid);
        let program = is_program();
        let lazy = env(c"PREZERO_LAZY") == Some(b"1");
        let asked = env(c"PREZERO_RESERVE")
            .and_then(parse_size)
            .filter(|&r| r >= MIN_RESERVE);
        Config {
            threshold: size(c"PREZERO_THRESHOLD")
                .unwrap_or(1 << 20)
                .max(MIN_THRESHOLD),
            cap: size(c"PREZERO_CAP").unwrap_or(default_cap),
            prefill: match pid {
                Some(_) if !program => 0,
                _ => size(c"PREZERO_PREFILL").unwrap_or(0),
            },
            spare: env(c"PREZERO_SPARE") == Some(b"1"),
            idle_secs: env(c"PREZERO_IDLE_SECS")
                .and_then(size_or_zero)
                .map_or(5, |s| s as u64),
            stats: env(c"PREZERO_STATS") == Some(b"1"),
            thp: env(c"PREZERO_THP") == Some(b"1") && !lazy,
            lazy,
            reserve: asked.unwrap_or_else(|| if lazy { default_reserve() } else { 0 }),
            reserve_asked: asked.is_some(),
            program,
            no_userfaultfd: env(c"PREZERO_NO_USERFAULTFD") == Some(b"1"),
        }
    }
}
