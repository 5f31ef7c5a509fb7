//! What the environment says (`prezero run` sets it from its flags), read
//! once at start-up with `getenv`, without allocating.

use std::ffi::{c_int, CStr};

use crate::sys;
use crate::sys::cgroup;
use prezero_sys::env::{self, Value, Var};

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
    /// Bytes of the reserve filled ahead of demand, from start-up: all of
    /// it (`usize::MAX`) where a person sized it (`PREZERO_RESERVE`), what
    /// the program's last run took where its history says (`PREZERO_HISTORY`),
    /// else none: the default reserve fills to a share of what the program
    /// has taken.
    pub ahead: usize,
    /// A file keeps what the lazy mode served the program (`PREZERO_HISTORY`
    /// names it): read at start, written at exit.
    pub history: bool,
    /// This process is the program `prezero run` executes
    /// (`PREZERO_PREFILL_PID` names it): it prefills, and its reserve fills
    /// from start-up; other processes only once they fault a large block.
    pub program: bool,
    /// Testing only (`PREZERO_NO_USERFAULTFD=1`): the lazy mode acts as if
    /// userfaultfd were refused, and says so.
    pub no_userfaultfd: bool,
}

fn env(name: &CStr) -> Option<&'static [u8]> {
    // SAFETY: the string getenv returns lives as long as the environment
    // entry, which nothing here changes.
    unsafe { sys::getenv(name) }
}

/// A variable's value as the contract reads it: a number (0/1 for a flag),
/// `None` where it is unset or refused (the default stands).
fn number(value: Option<&[u8]>, var: &Var) -> Option<usize> {
    match var.read(value?) {
        Ok(Value::Number(n)) => Some(n),
        Ok(Value::Flag(f)) => Some(usize::from(f)),
        Err(_) => None,
    }
}

/// Whether this process is the program `prezero run` executed, which keeps
/// the pid it names in `PREZERO_PREFILL_PID` across the exec.
pub fn is_program() -> bool {
    number(env(env::PREFILL_PID.cname), &env::PREFILL_PID) == Some(sys::getpid() as usize)
}

/// The machine's memory.
pub fn mem_total() -> Option<usize> {
    sys::meminfo(b"MemTotal:")
}

/// Runs `f` on the history file `PREZERO_HISTORY` names, opened with
/// `flags`: only a name of 16 hex digits in a directory `history` of the
/// caller's own (`sys::open_private`), and never in a process the kernel
/// started with privileges its caller lacks (`AT_SECURE`): the variable may
/// come from someone else's environment. `None` where it names none.
pub fn with_history<R>(flags: c_int, f: impl FnOnce(c_int) -> R) -> Option<R> {
    if sys::auxval(libc::AT_SECURE) != 0 {
        return None;
    }
    let raw = env(env::HISTORY.cname)?;
    if env::HISTORY.read(raw) != Ok(Value::Flag(true)) {
        return None;
    }
    let slash = raw.iter().rposition(|&b| b == b'/')?;
    let (dir, name) = (&raw[..slash], &raw[slash + 1..]);
    let hex = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
    if name.len() != 16 || !name.iter().all(hex) || !dir.ends_with(b"/history") {
        return None;
    }
    let mut dir_c = [0u8; 4096];
    let mut name_c = [0u8; 17];
    dir_c.get_mut(..dir.len())?.copy_from_slice(dir);
    name_c[..16].copy_from_slice(name);
    let dir_c = CStr::from_bytes_until_nul(&dir_c).ok()?;
    let name_c = CStr::from_bytes_until_nul(&name_c).ok()?;
    let fd = sys::open_private(dir_c, name_c, flags)?;
    let r = f(fd);
    sys::direct::close(fd);
    Some(r)
}

/// A history file's figure: digits, then a newline (`None` for anything
/// else, a file that is not a history).
pub fn figure(text: &[u8]) -> Option<usize> {
    let digits = text.strip_suffix(b"\n")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The bytes the history file says the program's last run took.
fn last_run() -> Option<usize> {
    with_history(libc::O_RDONLY, |fd| {
        let mut buf = [0u8; 32];
        let n = sys::read_at_start(fd, &mut buf).ok()?;
        figure(&buf[..n])
    })
    .flatten()
}

impl Config {
    /// The settings the environment gives, defaults where it is silent;
    /// read once, at start-up, without allocating.
    pub fn from_env() -> Config {
        // Read inside the program's first `malloc`, which keeps errno.
        let _kept = sys::KeepErrno::new();
        let available = sys::meminfo(b"MemAvailable:");
        Config::read(
            |v| env(v.cname),
            available,
            cgroup::room,
            last_run,
            sys::getpid() as usize,
        )
    }

    /// The settings `get` gives (a variable's value), with `available`
    /// bytes of MemAvailable, the memory cgroup's `room` (read only for a
    /// default reserve), what the `last_run` of the program took (read only
    /// for its reserve, with none asked for) and this process's `pid`: every
    /// variable read by the contract (`prezero_sys::env`), a refused one as if
    /// unset.
    fn read<'a>(
        get: impl Fn(&Var) -> Option<&'a [u8]>,
        available: Option<usize>,
        room: impl Fn() -> Option<usize>,
        last_run: impl Fn() -> Option<usize>,
        pid: usize,
    ) -> Config {
        let num = |v: &Var| number(get(v), v);
        let on = |v: &Var| num(v) == Some(1);
        let default_cap = available.map_or(1 << 30, |m| m / 4).min(8 << 30);
        // Read only when it counts: the lazy mode with no reserve asked for.
        let default_reserve = || {
            let room = room().map_or(usize::MAX, |r| r / 10);
            available.map_or(1 << 30, |m| m / 10).min(1 << 30).min(room)
        };
        // A pid set, even one refused, names some other process's program.
        let program = num(&env::PREFILL_PID) == Some(pid);
        let someone_elses = get(&env::PREFILL_PID).is_some() && !program;
        let lazy = on(&env::LAZY);
        let history = on(&env::HISTORY);
        // What the program's last run took, filled ahead: at most a quarter
        // of the memory left (a wrong guess costs that much until the idle
        // time gives it back), in whole huge pages.
        let from_history = || {
            let room = room().map_or(usize::MAX, |r| r / 4);
            let most = available.map_or(1 << 30, |m| m / 4).min(room);
            Some(last_run()?.min(most) & !((2 << 20) - 1)).filter(|&b| b > 0)
        };
        let asked = num(&env::RESERVE);
        let guess = match asked {
            None if lazy && program && history => from_history(),
            _ => None,
        };
        let reserve = match (asked, lazy) {
            (Some(r), _) => r,
            (None, true) => default_reserve().max(guess.unwrap_or(0)),
            (None, false) => 0,
        };
        Config {
            threshold: num(&env::THRESHOLD).unwrap_or(1 << 20),
            cap: num(&env::CAP).unwrap_or(default_cap),
            prefill: match someone_elses {
                true => 0,
                false => num(&env::PREFILL).unwrap_or(0),
            },
            spare: on(&env::SPARE),
            idle_secs: num(&env::IDLE_SECS).map_or(5, |s| s as u64),
            stats: on(&env::STATS),
            thp: on(&env::THP) && !lazy,
            lazy,
            reserve,
            ahead: asked.map_or(guess.unwrap_or(0), |_| usize::MAX),
            history,
            program,
            no_userfaultfd: on(&env::NO_USERFAULTFD),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field `name` sets, as a number (a flag as 0/1).
    fn field(c: &Config, name: &str) -> usize {
        match name {
            "PREZERO_THRESHOLD" => c.threshold,
            "PREZERO_CAP" => c.cap,
            "PREZERO_PREFILL" => c.prefill,
            "PREZERO_IDLE_SECS" => c.idle_secs as usize,
            "PREZERO_STATS" => usize::from(c.stats),
            "PREZERO_THP" => usize::from(c.thp),
            "PREZERO_SPARE" => usize::from(c.spare),
            "PREZERO_LAZY" => usize::from(c.lazy),
            "PREZERO_RESERVE" => c.reserve,
            "PREZERO_NO_USERFAULTFD" => usize::from(c.no_userfaultfd),
            // Whether it names this process (pid 4187 here).
            "PREZERO_PREFILL_PID" => usize::from(c.program) * 4187,
            "PREZERO_HISTORY" => usize::from(c.history),
            other => panic!("no field for {other}"),
        }
    }

    /// The settings of process 4187 with 16 GiB available: `vars` set, the
    /// cgroup's `room` and the `last` run's figure.
    fn read_as(vars: &[(&str, &str)], room: Option<usize>, last: Option<usize>) -> Config {
        Config::read(
            |v| {
                vars.iter()
                    .find(|(k, _)| *k == v.name)
                    .map(|(_, raw)| raw.as_bytes())
            },
            Some(16 << 30),
            || room,
            || last,
            4187,
        )
    }

    /// The contract's table, read by this reader: a value it takes sets its
    /// field; one it refuses leaves the default, as an unset one does.
    #[test]
    fn the_contracts_cases_read_here_as_the_table_says() {
        let read = |vars: &[(&str, &str)]| read_as(vars, None, None);
        let defaults = read(&[]);
        for &(name, raw, want) in env::CASES {
            let got = field(&read(&[(name, raw)]), name);
            let want = want.unwrap_or_else(|| field(&defaults, name));
            assert_eq!(got, want, "{name}={raw:?}");
        }
        // Every variable has a field here.
        for v in env::ALL {
            field(&defaults, v.name);
        }
    }

    /// The program's last run sizes its reserve, filled ahead, where no
    /// reserve was asked for: at most a quarter of the memory left and of
    /// the cgroup's room, in whole huge pages; never in another process.
    #[test]
    fn the_last_run_sizes_the_programs_reserve() {
        const MB: usize = 1 << 20;
        let read = read_as;
        let program = [
            ("PREZERO_LAZY", "1"),
            ("PREZERO_PREFILL_PID", "4187"),
            ("PREZERO_HISTORY", "/h/1"),
        ];
        // The default reserve here: 1 GiB (16 GiB available).
        let c = read(&program, None, Some(513 * MB + 5));
        assert_eq!((c.reserve, c.ahead), (1 << 30, 512 * MB));
        // Beyond the default, the reserve grows to it; at most a quarter of
        // MemAvailable and of the cgroup's room.
        let c = read(&program, None, Some(64 << 30));
        assert_eq!((c.reserve, c.ahead), (4 << 30, 4 << 30));
        let c = read(&program, Some(400 * MB), Some(1 << 30));
        assert_eq!((c.reserve, c.ahead), (100 * MB, 100 * MB));
        // Nothing taken, or less than a huge page: nothing ahead.
        for last in [None, Some(0), Some(MB)] {
            assert_eq!(read(&program, None, last).ahead, 0, "{last:?}");
        }
        // A reserve asked for wins, all of it ahead; another process, or no
        // history, reads none.
        let mut asked = program.to_vec();
        asked.push(("PREZERO_RESERVE", "64M"));
        let c = read(&asked, None, Some(1 << 30));
        assert_eq!((c.reserve, c.ahead), (64 * MB, usize::MAX));
        let other = [program[0], ("PREZERO_PREFILL_PID", "1"), program[2]];
        assert_eq!(read(&other, None, Some(1 << 30)).ahead, 0);
        let off = [program[0], program[1], ("PREZERO_HISTORY", "0")];
        assert_eq!(read(&off, None, Some(1 << 30)).ahead, 0);
    }
}
