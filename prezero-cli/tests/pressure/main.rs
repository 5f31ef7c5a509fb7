//! Memory pressure, as an operator sees it on a machine short of memory:
//! a program under `prezero run` (and `--lazy`) that callocs a large buffer
//! every half second and uses a little of it, beside a plain program that
//! takes all the memory the machine says is available but 250 MiB. Plainly
//! both finish; prezero must not make the kernel OOM-kill either. Needs a
//! small machine (the guests of `scripts/guest-tests.sh`, 2 GiB): elsewhere
//! it skips with a line.
//!
//! This file keeps the programs (`*_role`, run by name with `--exact`, this
//! test binary again) and what they share; the scenarios, by what holds the
//! memory: `machine` (the whole machine's), `cgroup` (a memory cgroup's),
//! `footprint` (a lazy program's own size against its plain one).

mod cgroup;
mod footprint;
mod machine;

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

/// The program under prezero (run by the scenarios, as itself): callocs
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
