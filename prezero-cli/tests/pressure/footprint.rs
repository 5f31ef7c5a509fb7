//! A program under `--lazy` is no bigger than plainly, and gets the huge pages
//! it asks for: peak RSS and huge pages compared with the plain run.

use super::*;

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
                // No history: what an earlier run took must not change this one.
                .env("PREZERO_HISTORY", "0")
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
