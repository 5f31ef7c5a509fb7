//! Memory pressure, as an operator sees it on a machine short of memory:
//! a program under `prezero run` (and `--lazy`) that callocs a large buffer
//! every half second and uses a little of it, beside a plain program that
//! takes all the memory the machine says is available but 250 MiB. Plainly
//! both finish; prezero must not make the kernel OOM-kill either. Needs a
//! small machine (the guests of `scripts/guest-tests.sh`, 2 GiB): elsewhere
//! it skips with a line.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MB: usize = 1 << 20;

/// The scenarios take the machine's memory: one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn meminfo(field: &str) -> usize {
    kb_field("/proc/meminfo", field) << 10
}

/// The program under prezero (run by the test below, as itself): callocs
/// 400 MiB every half second for 10 s (`PREZERO_CHURN_ROUNDS` times: 20),
/// writes its first 16 MiB, frees it.
#[test]
#[ignore = "the program of a_plain_program_beside_a_churning_one_finishes"]
fn churn_role() {
    if std::env::var_os("PREZERO_PRESSURE_ROLE").is_none() {
        return;
    }
    let rounds = std::env::var("PREZERO_CHURN_ROUNDS").map_or(20, |r| r.parse().unwrap());
    for _ in 0..rounds {
        let mut v = vec![0u8; 400 * MB];
        assert!(
            v[..16 * MB].iter().all(|&b| b == 0),
            "calloc'd memory not zero"
        );
        for i in (0..16 * MB).step_by(4096) {
            v[i] = 1;
        }
        std::hint::black_box(&v);
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The plain program: takes MemAvailable less 250 MiB (as it reads it now)
/// and writes every page.
#[test]
#[ignore = "the program of a_plain_program_beside_a_churning_one_finishes"]
fn hog_role() {
    if std::env::var_os("PREZERO_PRESSURE_ROLE").is_none() {
        return;
    }
    let want = meminfo("MemAvailable:").saturating_sub(250 * MB);
    // malloc and a write of every byte.
    let v = vec![1u8; want];
    std::hint::black_box(&v);
    println!("\nhog {} MiB", want / MB);
}

fn role(name: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", name, "--ignored", "--nocapture"])
        .env("PREZERO_PRESSURE_ROLE", "1")
        .env_remove("LD_PRELOAD")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

#[test]
fn a_plain_program_beside_a_churning_one_finishes() {
    let _serial = serial();
    let total = meminfo("MemTotal:");
    if total > 4 << 30 {
        let why = "the churn scenario needs a machine of 4 GiB at most (the guests of scripts/guest-tests.sh)";
        return prezero_testkit::skip("machine", why);
    }
    let prezero = env!("CARGO_BIN_EXE_prezero");
    for arm in ["plain", "prezero run", "prezero run --lazy"] {
        let mut churn = match arm {
            "plain" => role("churn_role"),
            _ => {
                let mut c = Command::new(prezero);
                c.arg("run");
                if arm.ends_with("--lazy") {
                    c.arg("--lazy");
                }
                c.arg("--")
                    .arg(std::env::current_exe().unwrap())
                    .args(["--exact", "churn_role", "--ignored", "--nocapture"])
                    .env("PREZERO_PRESSURE_ROLE", "1")
                    .env("PREZERO_STATS", "1")
                    .env_remove("LD_PRELOAD")
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                c
            }
        };
        let t = Instant::now();
        let churn = churn.spawn().unwrap();
        // Let it hold what it holds first.
        std::thread::sleep(Duration::from_secs(3));
        let available = meminfo("MemAvailable:");
        let hog = role("hog_role").output().unwrap();
        let hog_secs = t.elapsed().as_secs_f64() - 3.0;
        let churn = churn.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&churn.stderr);
        let stats = said
            .lines()
            .filter(|l| l.starts_with("prezero-preload:") || l.starts_with("prezero:"))
            .collect::<Vec<_>>()
            .join("\n    ");
        println!(
            "churn {arm}: MemAvailable {} MiB after 3 s; the plain program {} in {hog_secs:.1} s, \
             the churning one {}\n    {stats}",
            available / MB,
            hog.status,
            churn.status
        );
        assert!(
            hog.status.success(),
            "{arm}: the plain program did not finish ({}): {}",
            hog.status,
            String::from_utf8_lossy(&hog.stderr)
        );
        assert!(
            churn.status.success(),
            "{arm}: the churning program: {said}"
        );
    }
}

/// The program of the memory cgroup scenario: frees four blocks of 64 MiB
/// (the cache keeps some), then writes 208 MiB, which leaves the cgroup
/// (`memory.max` 256 MiB) less than the watcher's 64 MiB of room; waits for
/// the watcher; exits.
#[test]
#[ignore = "the program of the_cache_gives_back_when_the_cgroup_is_near_its_limit"]
fn high_role() {
    if std::env::var_os("PREZERO_PRESSURE_ROLE").is_none() {
        return;
    }
    for _ in 0..4 {
        let mut v = vec![0u8; 64 * MB];
        for i in (0..v.len()).step_by(4096) {
            v[i] = 1;
        }
        std::hint::black_box(&v);
    }
    let v = vec![1u8; 208 * MB];
    std::hint::black_box(&v);
    std::thread::sleep(Duration::from_millis(2500));
}

/// A memory cgroup of the test's own, removed when dropped: v2 where the
/// root's children may have the memory controller (the guests), else v1's
/// memory hierarchy (this host).
struct Memcg {
    dir: std::path::PathBuf,
    v2: bool,
}

impl Memcg {
    /// One named `name` and the pid with `max` bytes at most; or, where none
    /// can be made (not root, no memory controller), `None`, said (a failure
    /// where PREZERO_REQUIRE has memcg: the guests on 6.12).
    fn with_max(name: &str, max: usize) -> Option<Memcg> {
        let control = std::fs::read_to_string("/sys/fs/cgroup/cgroup.subtree_control");
        let v2 = control.is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"));
        let (root, limit) = if v2 {
            ("/sys/fs/cgroup", "memory.max")
        } else {
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes")
        };
        let dir = std::path::PathBuf::from(format!("{root}/{name}-{}", std::process::id()));
        if std::fs::create_dir(&dir).is_ok() {
            let cg = Memcg { dir, v2 };
            if std::fs::write(cg.dir.join(limit), max.to_string()).is_ok() {
                return Some(cg);
            }
        }
        prezero_testkit::skip(
            "memcg",
            "no memory cgroup to make (no memory controller, or not root)",
        );
        None
    }

    fn version(&self) -> &'static str {
        if self.v2 {
            "v2"
        } else {
            "v1"
        }
    }

    /// The most memory it used, in MiB.
    fn peak_mib(&self) -> usize {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()
            .and_then(|p| p.trim().parse::<usize>().ok())
            .map_or(0, |p| p / MB)
    }

    /// Its events: v2's `memory.events`, v1's count of failed charges.
    fn events(&self) -> String {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.failcnt"
        };
        let text = std::fs::read_to_string(self.dir.join(file)).unwrap_or_default();
        format!("{file}: {}", text.trim().replace('\n', ", "))
    }
}

impl Drop for Memcg {
    fn drop(&mut self) {
        // Its processes have ended; the kernel may still be freeing them.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Runs `prezero run ARGS -- this-test --exact ROLE` in the cgroup `cg`
/// (the role's first instruction puts it there; no `prezero run` for
/// `ARGS` "plain"), with its stats line.
fn run_in(cg: &Memcg, args: &str, role: &str, env: &[(&str, &str)]) -> std::process::Output {
    let run = if args == "plain" {
        String::new()
    } else {
        format!("\"$0\" run {args} --")
    };
    let script = format!(
        "echo $$ > {} && exec {run} \"$1\" --exact {role} --ignored --nocapture",
        cg.dir.join("cgroup.procs").display()
    );
    Command::new("sh")
        .args(["-c", &script, env!("CARGO_BIN_EXE_prezero")])
        .arg(std::env::current_exe().unwrap())
        .env("PREZERO_PRESSURE_ROLE", "1")
        .env("PREZERO_STATS", "1")
        .envs(env.iter().copied())
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap()
}

/// Near its cgroup's `memory.max` (the kernel reclaims there and counts
/// `max` events; the watcher sees the room left), a program under `prezero
/// run` gives back what its cache holds, and says so on its stats line.
#[test]
fn the_cache_gives_back_when_the_cgroup_is_near_its_limit() {
    let _serial = serial();
    let Some(cg) = Memcg::with_max("prezero-pressure", 256 * MB) else {
        return;
    };
    let out = run_in(&cg, "", "high_role", &[]);
    let events = cg.events();
    drop(cg);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let line = said
        .lines()
        .find(|l| l.starts_with("prezero-preload: pid "))
        .unwrap_or_else(|| panic!("no stats line: {said}"));
    println!("a limit of 256 MiB: {line}\n  {events}");
    assert!(
        line.contains(" memory pressure events (all held went back)"),
        "no pressure event seen: {line}"
    );
}

/// The program of the sparse table: one byte written per 2 MiB of an 8 GiB
/// `MAP_NORESERVE` mapping (16 MiB of pages plainly), every byte it reads
/// back as written and the rest zero.
#[test]
#[ignore = "the program of a_sparse_table_fits_a_small_memory_cgroup_under_lazy"]
fn sparse_role() {
    if std::env::var_os("PREZERO_PRESSURE_ROLE").is_none() {
        return;
    }
    let len = 8usize << 30;
    // SAFETY: a new private anonymous mapping, ours alone.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    let p = p.cast::<u8>();
    for i in (0..len).step_by(2 * MB) {
        // SAFETY: within the mapping above.
        unsafe { p.wrapping_add(i + 4096).write_volatile(7) };
    }
    for i in (0..len).step_by(2 * MB) {
        // SAFETY: within the mapping above.
        let w = unsafe { p.wrapping_add(i + 4096).read_volatile() };
        // SAFETY: within the mapping above.
        let z = unsafe { p.wrapping_add(i).read_volatile() };
        assert_eq!((w, z), (7, 0), "at {i}");
    }
}

/// A sparse table in a memory cgroup of 512 MiB finishes under `prezero
/// run --lazy` as plainly: a first touch of a block gets its page alone, not
/// a 2 MiB one.
#[test]
fn a_sparse_table_fits_a_small_memory_cgroup_under_lazy() {
    let _serial = serial();
    let Some(cg) = Memcg::with_max("prezero-sparse", 512 * MB) else {
        return;
    };
    let out = run_in(&cg, "--lazy", "sparse_role", &[]);
    let said = String::from_utf8_lossy(&out.stderr);
    println!(
        "sparse table in 512 MiB (cgroup {}): {}, cgroup peak {} MiB\n    {}",
        cg.version(),
        out.status,
        cg.peak_mib(),
        said.lines()
            .filter(|l| l.starts_with("prezero"))
            .collect::<Vec<_>>()
            .join("\n    ")
    );
    assert!(out.status.success(), "{said}");
}

/// The churning program in a memory cgroup of 384 MiB (each 400 MiB calloc
/// is bigger than the cgroup, 16 MiB of it used): it finishes plainly,
/// under `prezero run` and under `--lazy` (a populate the cgroup refuses is
/// taken back; the cache's cap follows the room left). The cgroup's peak is
/// printed.
#[test]
fn the_churning_program_fits_its_memory_cgroup() {
    let _serial = serial();
    for arm in ["plain", "", "--lazy"] {
        let Some(cg) = Memcg::with_max("prezero-churn", 384 * MB) else {
            return;
        };
        let out = run_in(&cg, arm, "churn_role", &[("PREZERO_CHURN_ROUNDS", "6")]);
        let said = String::from_utf8_lossy(&out.stderr);
        println!(
            "churn in 384 MiB (cgroup {}), {}: {}, cgroup peak {} MiB\n    {}",
            cg.version(),
            if arm == "plain" {
                "plainly".to_owned()
            } else {
                format!("prezero run {arm}")
            },
            out.status,
            cg.peak_mib(),
            said.lines()
                .filter(|l| l.starts_with("prezero"))
                .collect::<Vec<_>>()
                .join("\n    ")
        );
        assert!(out.status.success(), "prezero run {arm}: {said}");
    }
}

/// One of many programs: callocs `PREZERO_MANY_BYTES` ten times, checks a
/// word of every page is zero, writes a byte in each, frees it.
#[test]
#[ignore = "a program of eight_lazy_programs_and_a_plain_one_finish"]
fn many_role() {
    if std::env::var_os("PREZERO_PRESSURE_ROLE").is_none() {
        return;
    }
    let bytes: usize = std::env::var("PREZERO_MANY_BYTES")
        .unwrap()
        .parse()
        .unwrap();
    for _ in 0..10 {
        let mut v = vec![0u8; bytes];
        for i in (0..bytes).step_by(4096) {
            assert_eq!(v[i + 4088..i + 4096], [0; 8], "calloc'd memory not zero");
            v[i] = 1;
        }
        std::hint::black_box(&v);
        drop(v);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The plain program beside them: writes `PREZERO_HALF_BYTES` and holds it
/// a second.
#[test]
#[ignore = "a program of eight_lazy_programs_and_a_plain_one_finish"]
fn half_role() {
    if std::env::var_os("PREZERO_PRESSURE_ROLE").is_none() {
        return;
    }
    let bytes: usize = std::env::var("PREZERO_HALF_BYTES")
        .unwrap()
        .parse()
        .unwrap();
    let v = vec![1u8; bytes];
    std::hint::black_box(&v);
    std::thread::sleep(Duration::from_secs(1));
}

/// Eight programs under `prezero run --lazy` at once, each taking a
/// thirty-second of the memory available ten times over, and a plain one
/// beside them that takes half of it: all finish, as they do plainly (each
/// lazy reserve grows with its program's demand, not to its cap).
#[test]
fn eight_lazy_programs_and_a_plain_one_finish() {
    let _serial = serial();
    let total = meminfo("MemTotal:");
    if total > 4 << 30 {
        let why =
            "the scenario needs a machine of 4 GiB at most (the guests of scripts/guest-tests.sh)";
        return prezero_testkit::skip("machine", why);
    }
    let prezero = env!("CARGO_BIN_EXE_prezero");
    for lazy in [false, true] {
        let available = meminfo("MemAvailable:");
        let each = (available / 32 / 4096 * 4096).to_string();
        let half = (available / 2).to_string();
        let t = Instant::now();
        let many: Vec<_> = (0..8)
            .map(|_| {
                let mut c = if lazy {
                    let mut c = Command::new(prezero);
                    c.args(["run", "--lazy", "--"])
                        .arg(std::env::current_exe().unwrap())
                        .args(["--exact", "many_role", "--ignored", "--nocapture"])
                        .env("PREZERO_PRESSURE_ROLE", "1")
                        .env("PREZERO_STATS", "1")
                        .env_remove("LD_PRELOAD")
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped());
                    c
                } else {
                    role("many_role")
                };
                c.env("PREZERO_MANY_BYTES", &each).spawn().unwrap()
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        let plain = role("half_role")
            .env("PREZERO_HALF_BYTES", &half)
            .output()
            .unwrap();
        let outs: Vec<_> = many
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect();
        let arm = if lazy { "--lazy" } else { "plainly" };
        let reserve_lines: Vec<String> = outs
            .iter()
            .filter_map(|o| {
                let e = String::from_utf8_lossy(&o.stderr);
                e.lines()
                    .find(|l| l.starts_with("prezero-preload: lazy:"))
                    .map(|l| l.split("; ").nth(1).unwrap_or("").to_owned())
            })
            .collect();
        println!(
            "eight programs {arm} ({} MiB each) and a plain one ({} MiB): {:.1} s; the plain one \
             {}, the eight {:?}\n    {}",
            available / 32 / MB,
            available / 2 / MB,
            t.elapsed().as_secs_f64(),
            plain.status,
            outs.iter().map(|o| o.status.code()).collect::<Vec<_>>(),
            reserve_lines.join("\n    ")
        );
        assert!(
            plain.status.success(),
            "{arm}: the plain program: {}",
            String::from_utf8_lossy(&plain.stderr)
        );
        for o in &outs {
            assert!(
                o.status.success(),
                "{arm}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

/// A program that takes its memory once: `PREZERO_ONCE_BYTES` calloc'd and
/// a byte of every page written, once its resident memory has reached
/// `PREZERO_ONCE_WAIT_RSS` bytes (a reserve filled ahead: 30 s at most);
/// prints its peak RSS (`hwm=` bytes) at the end.
#[test]
#[ignore = "the program of a_one_shot_program_is_no_bigger_under_lazy"]
fn once_role() {
    if std::env::var_os("PREZERO_PRESSURE_ROLE").is_none() {
        return;
    }
    let var = |k: &str| std::env::var(k).unwrap().parse::<usize>().unwrap();
    let status_kb = |field: &str| kb_field("/proc/self/status", field);
    let t = Instant::now();
    while status_kb("VmRSS:") * 1024 < var("PREZERO_ONCE_WAIT_RSS")
        && t.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let bytes = var("PREZERO_ONCE_BYTES");
    let mut v = vec![0u8; bytes];
    for i in (0..bytes).step_by(4096) {
        assert_eq!(v[i + 4095], 0, "calloc'd memory not zero");
        v[i] = 1;
    }
    std::hint::black_box(&v);
    println!("\nhwm={}", status_kb("VmHWM:") * 1024);
}

/// Runs `role_name` plainly (`args` `None`) or under `prezero run ARGS`,
/// with `env`: the number it printed after `key=`, and the lazy line.
fn figure_of(
    role_name: &str,
    args: Option<&[&str]>,
    env: &[(&str, String)],
    key: &str,
) -> (usize, String) {
    let mut c = match args {
        None => role(role_name),
        Some(args) => {
            let mut c = Command::new(env!("CARGO_BIN_EXE_prezero"));
            c.arg("run")
                .args(args)
                .arg("--")
                .arg(std::env::current_exe().unwrap())
                .args(["--exact", role_name, "--ignored", "--nocapture"])
                .env("PREZERO_PRESSURE_ROLE", "1")
                .env("PREZERO_STATS", "1")
                .env_remove("LD_PRELOAD");
            c
        }
    };
    let out = c.envs(env.iter().map(|(k, v)| (k, v))).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{role_name} {args:?}: {said}");
    let figure = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= from {role_name} {args:?}"));
    let lazy = said
        .lines()
        .find(|l| l.starts_with("prezero-preload: lazy:") || l.starts_with("prezero: --lazy"))
        .unwrap_or("")
        .to_owned();
    (figure, lazy)
}

/// The peak RSS of `once_role` with `bytes` once `wait_rss` bytes are
/// resident, plainly or under `prezero run ARGS`, and the lazy line.
fn once(args: Option<&[&str]>, bytes: usize, wait_rss: usize) -> (usize, String) {
    let env = [
        ("PREZERO_ONCE_BYTES", bytes.to_string()),
        ("PREZERO_ONCE_WAIT_RSS", wait_rss.to_string()),
    ];
    figure_of("once_role", args, &env, "hwm")
}

/// A program that takes 256 MiB once is at most a tenth bigger under
/// `--lazy` than plainly (16 MiB more for the library and its threads): the
/// default reserve grows with demand, it is not filled to its cap at start.
/// One given with `--reserve` is filled ahead, whole, before the program
/// touches anything.
#[test]
fn a_one_shot_program_is_no_bigger_under_lazy() {
    let _serial = serial();
    if let Some(why) = lazy_refused() {
        return prezero_testkit::skip("uffd", why);
    }
    let (plain, _) = once(None, 256 * MB, 0);
    let (lazy, line) = once(Some(&["--lazy"]), 256 * MB, 0);
    let (ahead, ahead_line) = once(Some(&["--lazy", "--reserve", "64M"]), 4 * MB, 64 * MB);
    println!(
        "one shot of 256 MiB: peak RSS {} MiB plainly, {} MiB under --lazy\n    {line}\n\
         --reserve 64M, 4 MiB touched once 64 MiB are resident: {} MiB\n    {ahead_line}",
        plain / MB,
        lazy / MB,
        ahead / MB
    );
    assert!(
        lazy <= plain + plain / 10 + 16 * MB,
        "{} MiB under --lazy against {} MiB plainly: {line}",
        lazy / MB,
        plain / MB
    );
    assert!(ahead >= 64 * MB, "{} MiB: {ahead_line}", ahead / MB);
}

/// Why the lazy mode does not run here (its one line), if it does not: the
/// tests of what it does then skip. Asked of a program that takes a large
/// block (`once_role`, 4 MiB), which is when the lazy mode starts or says
/// why it cannot.
fn lazy_refused() -> Option<String> {
    let env = [
        ("PREZERO_ONCE_BYTES", (4 * MB).to_string()),
        ("PREZERO_ONCE_WAIT_RSS", "0".to_string()),
    ];
    let (_, line) = figure_of("once_role", Some(&["--lazy"]), &env, "hwm");
    line.starts_with("prezero: --lazy").then_some(line)
}

/// The number (KiB) of the line `field` of the file `path` (/proc's).
fn kb_field(path: &str, field: &str) -> usize {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {path}"))
}

/// A new private anonymous mapping of `len` bytes.
fn map_anon(len: usize) -> *mut u8 {
    // SAFETY: a new private anonymous mapping, ours alone.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p.cast()
}

/// A byte written in every page of the new mapping `[p, p + len)`, each
/// read first: zero.
fn write_zero_pages(p: *mut u8, len: usize) {
    for i in (0..len).step_by(4096) {
        let at = p.wrapping_add(i);
        // SAFETY: within the mapping, which is the caller's alone.
        assert_eq!(unsafe { at.read_volatile() }, 0, "at {i}");
        // SAFETY: as above.
        unsafe { at.write_volatile(1) };
    }
}

/// A mapping that asks for huge pages: 64 MiB mapped, `MADV_HUGEPAGE`, a
/// byte written per 4 KiB; prints its huge pages (`huge=` bytes, from
/// `AnonHugePages` of /proc/self/smaps_rollup).
#[test]
#[ignore = "the program of a_mapping_that_asks_for_huge_pages_gets_them_under_lazy"]
fn thp_role() {
    if std::env::var_os("PREZERO_PRESSURE_ROLE").is_none() {
        return;
    }
    let len = 64 * MB;
    let p = map_anon(len);
    // SAFETY: advice on the mapping just made.
    let advised = unsafe { libc::madvise(p.cast(), len, libc::MADV_HUGEPAGE) };
    assert_eq!(advised, 0);
    write_zero_pages(p, len);
    println!(
        "\nhuge={}",
        kb_field("/proc/self/smaps_rollup", "AnonHugePages:") << 10
    );
}

/// A mapping that asked for huge pages gets them under `--lazy` as plainly
/// (a block at most less: where moved huge pages arrive split, before Linux
/// 6.14, the lazy mode learns it at its first move and hands such mappings
/// to the kernel's own faults from then on).
#[test]
fn a_mapping_that_asks_for_huge_pages_gets_them_under_lazy() {
    let _serial = serial();
    if let Some(why) = lazy_refused() {
        return prezero_testkit::skip("uffd", why);
    }
    let huge = |lazy: bool| figure_of("thp_role", lazy.then_some(&["--lazy"][..]), &[], "huge");
    let (plain, _) = huge(false);
    let (lazy, line) = huge(true);
    println!(
        "64 MiB asked huge: {} MiB in huge pages plainly, {} MiB under --lazy\n    {line}",
        plain / MB,
        lazy / MB
    );
    assert!(
        lazy + 2 * MB >= plain,
        "{} MiB huge under --lazy against {} MiB plainly: {line}",
        lazy / MB,
        plain / MB
    );
}

/// A program that maps, writes and unmaps 64 MiB a hundred times, 10 ms
/// apart; prints its peak RSS (`hwm=` bytes).
#[test]
#[ignore = "the program of a_program_that_keeps_mapping_is_no_bigger_under_lazy"]
fn remap_role() {
    if std::env::var_os("PREZERO_PRESSURE_ROLE").is_none() {
        return;
    }
    let len = 64 * MB;
    for _ in 0..100 {
        let p = map_anon(len);
        write_zero_pages(p, len);
        // SAFETY: the mapping above, no longer used.
        assert_eq!(unsafe { libc::munmap(p.cast(), len) }, 0);
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("\nhwm={}", kb_field("/proc/self/status", "VmHWM:") << 10);
}

/// A program that keeps taking memory and giving it back is no more than a
/// tenth bigger under `--lazy` than plainly (16 MiB more for the library):
/// the default reserve follows the memory the program has resident, not
/// what it has taken in all (which grew it to its 1 GiB cap before).
#[test]
fn a_program_that_keeps_mapping_is_no_bigger_under_lazy() {
    let _serial = serial();
    if let Some(why) = lazy_refused() {
        return prezero_testkit::skip("uffd", why);
    }
    let hwm = |lazy: bool| figure_of("remap_role", lazy.then_some(&["--lazy"][..]), &[], "hwm");
    let (plain, _) = hwm(false);
    let (lazy, line) = hwm(true);
    println!(
        "100 x 64 MiB mapped, written, unmapped: peak RSS {} MiB plainly, {} MiB under --lazy\n    {line}",
        plain / MB,
        lazy / MB
    );
    assert!(
        lazy <= plain + plain / 10 + 16 * MB,
        "{} MiB under --lazy against {} MiB plainly: {line}",
        lazy / MB,
        plain / MB
    );
}
