//! `prezero run [options] -- PROGRAM [ARGS]`: runs an unmodified program with
//! `libprezero_preload.so` in front of its allocator. The library is embedded
//! in this binary (build.rs builds it), written once to a private cache
//! directory, put first in `LD_PRELOAD`, and the program is `exec`ed in our
//! place: its exit status, signals, stdin and stdout are its own.
//!
//! The library's contract is its environment (`PREZERO_THRESHOLD`,
//! `PREZERO_CAP`, `PREZERO_PREFILL`, `PREZERO_IDLE_SECS`, `PREZERO_STATS`,
//! `PREZERO_THP`, `PREZERO_SPARE`, `PREZERO_LAZY`, `PREZERO_RESERVE`): each
//! flag sets one variable, and a variable the caller already set is kept when
//! its flag is absent. Those it keeps are read here as the library reads
//! them, so a value it would not take is an error before the program runs,
//! not a default the program silently gets.
//!
//! `--lazy`: large blocks and large mappings are populated on first touch
//! from pre-zeroed huge pages (the library's `lazy/`). Where the program
//! cannot have a userfaultfd with `UFFDIO_MOVE`, the library says why, once,
//! in the program itself, and serves it as without `--lazy`.
//!
//! Nested runs: a `prezero run` under another adds no second copy (it finds
//! `libprezero_preload*` in `LD_PRELOAD`, or the path `PREZERO_PRELOADED`
//! names); its flags still set the environment the first copy reads.

pub mod history;

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use crate::units::{fmt_size, parse_size, parse_size_or_zero};
use anyhow::{anyhow, bail, Context, Result};
use prezero_sys::env;

/// The library, built by build.rs from `prezero-preload`.
static PRELOAD_SO: &[u8] = include_bytes!(env!("PREZERO_PRELOAD_SO"));
/// Names its cache file: a hash of its bytes.
const PRELOAD_HASH: &str = env!("PREZERO_PRELOAD_HASH");
/// The file name every copy of the library starts with.
const PRELOAD_STEM: &str = "libprezero_preload";
/// Names the library this `prezero run` preloaded, for nested runs.
pub const MARKER: &str = "PREZERO_PRELOADED";
/// Preload this file instead of the embedded library.
pub const OVERRIDE: &str = "PREZERO_PRELOAD_LIB";

#[derive(clap::Args, Debug, Default, Clone)]
pub struct Settings {
    /// Requests of at least this many bytes come from the cache (default 1M;
    /// at least 64K). Sets PREZERO_THRESHOLD.
    #[arg(long, value_name = "SIZE")]
    pub threshold: Option<String>,
    /// Most freed memory kept populated beyond what the program uses
    /// (default: the smaller of 25% of MemAvailable and 8G; 0 keeps none).
    /// Sets PREZERO_CAP.
    #[arg(long, value_name = "SIZE")]
    pub cap: Option<String>,
    /// Populate this much in the background at start. Sets PREZERO_PREFILL.
    #[arg(long, value_name = "SIZE")]
    pub prefill: Option<String>,
    /// Give back free memory unused this long (default 5). Sets PREZERO_IDLE_SECS.
    #[arg(long, value_name = "SECS")]
    pub idle: Option<u64>,
    /// Print one summary line per process at exit (stderr). Sets PREZERO_STATS=1.
    #[arg(long)]
    pub stats: bool,
    /// Ask for transparent huge pages for the cache (off by default: on this
    /// kind of VM a fresh 2 MiB fault costs up to 6x a 4 KiB one's share).
    /// Sets PREZERO_THP=1.
    #[arg(long)]
    pub thp: bool,
    /// Keep a spare: once a calloc finds freed memory the scrubber has not
    /// cleared yet, populate fresh memory in the background until one zeroed
    /// block of that size is ready (if the cap holds two), so the next one
    /// finds zeroes. For programs that compute between large callocs; one
    /// that streams through memory meanwhile pays the clearing in bandwidth
    /// instead. Sets PREZERO_SPARE=1.
    #[arg(long)]
    pub spare: bool,
    /// Populate large blocks and large mmaps on first touch instead, each
    /// page fault served by moving in a pre-zeroed huge page from a reserve
    /// (userfaultfd, Linux 6.8; where it is not allowed, says why and runs
    /// as without). Sets PREZERO_LAZY=1.
    #[arg(long)]
    pub lazy: bool,
    /// With --lazy: most pre-zeroed memory each process keeps (default: the
    /// smallest of 1G, 10% of MemAvailable and 10% of what its memory cgroup
    /// has left; at least 2M), filled to a sixteenth of the memory the
    /// program has resident. Given here, it is filled whole ahead of demand.
    /// Sets PREZERO_RESERVE.
    #[arg(long, value_name = "SIZE")]
    pub reserve: Option<String>,
    /// With --lazy: keep a history. What the command (the program and its
    /// arguments) took in its last run is kept in the cache directory, and
    /// its next run fills that much of its reserve ahead from start-up (at
    /// most a quarter of the memory left; given back after the idle time if
    /// unused). For a program that computes before it touches its memory;
    /// one that touches it at once from several threads pays for the fill
    /// (a JVM filling arrays: 0.42x plainly). Sets PREZERO_HISTORY to the
    /// command's file.
    #[arg(long)]
    pub history: bool,
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    settings: Settings,
    /// The program and its arguments, after `--`.
    #[arg(
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM [ARGS]"
    )]
    command: Vec<OsString>,
}

/// A size flag: K/M/G/T as everywhere, and 0.
fn size_or_zero(flag: &str, s: &str) -> Result<usize> {
    parse_size_or_zero(s).with_context(|| format!("--{flag}"))
}

/// A size flag for `var`, which the contract must take.
fn sized(var: &env::Var, s: &str) -> Result<usize> {
    var.takes(parse_size(s)?).map_err(|e| match e {
        env::Refused::Below(min) if var.name == env::THRESHOLD.name => anyhow!(
            "at least {} (below it the C library's own arenas serve better)",
            fmt_size(min)
        ),
        env::Refused::Below(min) => anyhow!("at least {} (one huge page)", fmt_size(min)),
        e => anyhow!("{e}"),
    })
}

/// How the library reads a variable of its contract (`prezero_sys::env`), for
/// [`check_inherited`]; `None` for one it does not read.
fn read_as(name: &str, value: &str) -> Option<Result<()>> {
    let var = env::var(name)?;
    Some(
        var.read(value.as_bytes())
            .map(drop)
            .map_err(|e| anyhow!("{e}")),
    )
}

/// The library's variables the caller set and no flag replaces, read as the
/// library reads them: one it would not take (and would replace with its
/// default) is an error here.
pub fn check_inherited(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    set: &[(&'static str, String)],
) -> Result<()> {
    for (k, v) in vars {
        let Some(k) = k.to_str() else { continue };
        if set.iter().any(|(name, _)| *name == k) {
            continue;
        }
        let value = v.to_string_lossy();
        if let Some(Err(e)) = read_as(k, &value) {
            return Err(e.context(format!("{k}={value} in the environment")));
        }
    }
    Ok(())
}

impl Settings {
    /// The `PREZERO_*` variables the flags set, in bytes (the library's own
    /// parser takes fewer spellings than ours).
    pub fn variables(&self) -> Result<Vec<(&'static str, String)>> {
        let mut v = Vec::new();
        if let Some(t) = &self.threshold {
            let t = sized(&env::THRESHOLD, t).context("--threshold")?;
            v.push(("PREZERO_THRESHOLD", t.to_string()));
        }
        if let Some(c) = &self.cap {
            v.push(("PREZERO_CAP", size_or_zero("cap", c)?.to_string()));
        }
        if let Some(p) = &self.prefill {
            v.push(("PREZERO_PREFILL", size_or_zero("prefill", p)?.to_string()));
        }
        if let Some(i) = self.idle {
            v.push(("PREZERO_IDLE_SECS", i.to_string()));
        }
        if self.stats {
            v.push(("PREZERO_STATS", "1".into()));
        }
        if self.thp {
            v.push(("PREZERO_THP", "1".into()));
        }
        if self.spare {
            v.push(("PREZERO_SPARE", "1".into()));
        }
        if self.lazy {
            v.push(("PREZERO_LAZY", "1".into()));
        }
        if let Some(r) = &self.reserve {
            let r = sized(&env::RESERVE, r).context("--reserve")?;
            v.push(("PREZERO_RESERVE", r.to_string()));
        }
        Ok(v)
    }
}

/// The entries of an `LD_PRELOAD` value (ld.so splits on spaces and colons).
fn entries(value: &OsStr) -> impl Iterator<Item = &[u8]> {
    value
        .as_bytes()
        .split(|&b| b == b':' || b == b' ')
        .filter(|e| !e.is_empty())
}

/// Whether `LD_PRELOAD` already holds a copy of the library: a file named
/// `libprezero_preload*`, or the one `marker` (PREZERO_PRELOADED) names.
pub fn already_preloaded(ld_preload: &OsStr, marker: Option<&OsStr>) -> bool {
    entries(ld_preload).any(|e| {
        let name = e.rsplit(|&b| b == b'/').next().unwrap_or(e);
        name.starts_with(PRELOAD_STEM.as_bytes())
            || marker.is_some_and(|m| !m.is_empty() && m.as_bytes() == e)
    })
}

/// `LD_PRELOAD` with `lib` first and the existing entries after it, or None
/// when a copy of the library is already there.
pub fn ld_preload(
    lib: &Path,
    existing: Option<&OsStr>,
    marker: Option<&OsStr>,
) -> Option<OsString> {
    let existing = existing.unwrap_or_default();
    if already_preloaded(existing, marker) {
        return None;
    }
    let mut v = OsString::from(lib);
    if entries(existing).next().is_some() {
        v.push(":");
        v.push(existing);
    }
    Some(v)
}

/// The library to preload: `PREZERO_PRELOAD_LIB` if set, else the embedded
/// copy in the cache directory.
pub fn library() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(OVERRIDE).filter(|p| !p.is_empty()) {
        let path = fs::canonicalize(&p)
            .with_context(|| format!("{OVERRIDE}={}", Path::new(&p).display()))?;
        if !path.is_file() {
            bail!("{OVERRIDE}={}: not a file", path.display());
        }
        if unfit_for_ld_preload(&path) {
            bail!(
                "{OVERRIDE}={}: LD_PRELOAD cannot hold a path with a space or colon",
                path.display()
            );
        }
        return Ok(path);
    }
    cache_file(
        &format!("{PRELOAD_STEM}-{PRELOAD_HASH}.so"),
        PRELOAD_SO,
        0o500,
    )
}

fn unfit_for_ld_preload(p: &Path) -> bool {
    p.as_os_str()
        .as_bytes()
        .iter()
        .any(|&b| b == b':' || b == b' ')
}

/// Where embedded files go: `$XDG_CACHE_HOME/prezero`, else
/// `$HOME/.cache/prezero`, then `/tmp/prezero-<uid>`.
fn cache_dirs() -> Vec<PathBuf> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let mut dirs = Vec::new();
    if let Some(x) = absolute("XDG_CACHE_HOME") {
        dirs.push(x.join("prezero"));
    } else if let Some(h) = absolute("HOME") {
        dirs.push(h.join(".cache/prezero"));
    }
    dirs.push(PathBuf::from(format!(
        "/tmp/prezero-{}",
        prezero_sys::geteuid()
    )));
    dirs
}

/// `dir` exists (made 0700 if not), is a directory (not a link to one), ours,
/// writable by no one else, and on a filesystem that lets us execute.
fn private_dir(dir: &Path) -> Result<()> {
    if unfit_for_ld_preload(dir) {
        bail!("its path has a space or colon, which LD_PRELOAD cannot hold");
    }
    if let Some(parent) = dir.parent() {
        // ~/.cache may not exist yet; /tmp does.
        let _ = fs::create_dir_all(parent);
    }
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e.into()),
    }
    let m = fs::symlink_metadata(dir)?;
    let me = prezero_sys::geteuid();
    if !m.is_dir() {
        bail!("not a directory (a symbolic link is refused too)");
    }
    if m.uid() != me {
        bail!("owned by uid {}, not by us ({me})", m.uid());
    }
    if m.mode() & 0o022 != 0 {
        bail!("writable by others (mode {:o})", m.mode() & 0o7777);
    }
    if prezero_sys::on_noexec_mount(dir) {
        bail!("on a filesystem mounted noexec");
    }
    Ok(())
}

/// `bytes` as the file `name` in the first private cache directory that
/// works: reused when it is already there with these bytes, else written
/// to a temporary name and renamed (a reader never sees half a file).
pub fn cache_file(name: &str, bytes: &[u8], mode: u32) -> Result<PathBuf> {
    let mut why = Vec::new();
    for dir in cache_dirs() {
        match private_dir(&dir).and_then(|()| place(&dir, name, bytes, mode)) {
            Ok(p) => return Ok(p),
            Err(e) => why.push(format!("{}: {}", dir.display(), crate::message(&e))),
        }
    }
    Err(anyhow!(
        "no private directory to write {name} to ({}); or set {OVERRIDE}",
        why.join("; ")
    ))
}

fn place(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> Result<PathBuf> {
    let path = dir.join(name);
    if let Ok(m) = fs::symlink_metadata(&path) {
        if m.is_file() && m.len() == bytes.len() as u64 && fs::read(&path).is_ok_and(|b| b == bytes)
        {
            return Ok(path);
        }
    }
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let write = || -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        fs::rename(&tmp, &path)
    };
    write()
        .inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })
        .with_context(|| format!("writing {name}"))?;
    Ok(path)
}

/// Every variable `prezero run` sets for `settings`, given the caller's
/// `LD_PRELOAD` and `PREZERO_PRELOADED`.
pub fn environment(
    settings: &Settings,
    existing: Option<&OsStr>,
    marker: Option<&OsStr>,
) -> Result<Vec<(OsString, OsString)>> {
    let vars = settings.variables()?;
    check_inherited(std::env::vars_os(), &vars)?;
    let mut env: Vec<(OsString, OsString)> = vars
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
    if !already_preloaded(existing.unwrap_or_default(), marker) {
        let lib = library()?;
        let value = ld_preload(&lib, existing, marker).expect("not preloaded yet");
        env.push(("LD_PRELOAD".into(), value));
        env.push((MARKER.into(), lib.into()));
    }
    Ok(env)
}

pub fn run(args: &Args) -> Result<()> {
    let (program, rest) = args
        .command
        .split_first()
        .context("no program to run: prezero run -- PROGRAM ARGS...")?;
    let mut env = environment(
        &args.settings,
        std::env::var_os("LD_PRELOAD").as_deref(),
        std::env::var_os(MARKER).as_deref(),
    )?;
    if args.settings.prefill.is_some() || args.settings.lazy {
        // The program keeps this pid across the exec: it prefills, and its
        // lazy reserve fills from start-up; the shells, helpers and programs
        // it starts do not (each would populate as much again), and only it
        // says why if the lazy mode cannot run.
        env.push((
            "PREZERO_PREFILL_PID".into(),
            std::process::id().to_string().into(),
        ));
    }
    // The command's own history where asked for, unless a reserve was sized
    // (a file an outer `prezero run` named is its command's, not this one's).
    let set = |k: &str| env.iter().any(|(n, _)| n == k) || std::env::var_os(k).is_some();
    if args.settings.lazy && args.settings.history && !set("PREZERO_RESERVE") {
        if let Some(file) = history::file_for(program, rest) {
            env.push(("PREZERO_HISTORY".into(), file.into()));
        }
    } else if std::env::var_os("PREZERO_HISTORY").is_some() {
        env.push(("PREZERO_HISTORY".into(), "0".into()));
    }
    let e = std::process::Command::new(program)
        .args(rest)
        .envs(env)
        .exec();
    eprintln!("prezero: cannot run {}: {e}", program.to_string_lossy());
    std::process::exit(match e.raw_os_error() {
        Some(libc::ENOENT) => 127,
        _ => 126,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<&OsStr> {
        Some(OsStr::new(s))
    }

    #[test]
    fn ld_preload_is_prepended_once() {
        let lib = Path::new("/c/libprezero_preload-1.so");
        assert_eq!(ld_preload(lib, None, None).unwrap(), lib.as_os_str());
        assert_eq!(ld_preload(lib, os(""), None).unwrap(), lib.as_os_str());
        assert_eq!(
            ld_preload(lib, os("/x/a.so /y/b.so"), None).unwrap(),
            "/c/libprezero_preload-1.so:/x/a.so /y/b.so"
        );
        // Another copy, by name or by the marker: none added.
        assert!(ld_preload(lib, os("/x/a.so:/old/libprezero_preload.so"), None).is_none());
        assert!(ld_preload(lib, os("libprezero_preload-2.so"), None).is_none());
        assert!(ld_preload(lib, os("/x/a.so /o/mine.so"), os("/o/mine.so")).is_none());
        // A marker whose library is no longer preloaded does not count.
        assert!(ld_preload(lib, os("/x/a.so"), os("/o/mine.so")).is_some());
        assert!(ld_preload(lib, os("/x/a.so"), os("")).is_some());
    }

    #[test]
    fn flags_become_variables_in_bytes() {
        let s = Settings {
            threshold: Some("2M".into()),
            cap: Some("0".into()),
            prefill: Some("1g".into()),
            idle: Some(3),
            stats: true,
            thp: true,
            spare: true,
            lazy: true,
            reserve: Some("64M".into()),
            history: true,
        };
        assert_eq!(
            s.variables().unwrap(),
            [
                ("PREZERO_THRESHOLD", "2097152".to_string()),
                ("PREZERO_CAP", "0".into()),
                ("PREZERO_PREFILL", "1073741824".into()),
                ("PREZERO_IDLE_SECS", "3".into()),
                ("PREZERO_STATS", "1".into()),
                ("PREZERO_THP", "1".into()),
                ("PREZERO_SPARE", "1".into()),
                ("PREZERO_LAZY", "1".into()),
                ("PREZERO_RESERVE", "67108864".into()),
            ]
        );
        assert!(Settings::default().variables().unwrap().is_empty());
        let low = Settings {
            threshold: Some("4K".into()),
            ..Settings::default()
        };
        assert!(format!("{:#}", low.variables().unwrap_err()).contains("at least 64K"));
        let bad = Settings {
            cap: Some("lots".into()),
            ..Settings::default()
        };
        assert!(format!("{:#}", bad.variables().unwrap_err()).starts_with("--cap:"));
        let small = Settings {
            reserve: Some("1M".into()),
            ..Settings::default()
        };
        assert!(format!("{:#}", small.variables().unwrap_err()).contains("at least 2M"));
    }

    #[test]
    fn inherited_variables_are_read_as_the_library_reads_them() {
        let env = |pairs: &[(&str, &str)]| -> Vec<(OsString, OsString)> {
            pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
        };
        let good = env(&[
            ("PREZERO_CAP", "0"),
            ("PREZERO_THRESHOLD", "2M"),
            ("PREZERO_RESERVE", "1G"),
            ("PREZERO_LAZY", "1"),
            ("PREZERO_STATS", "0"),
            ("PREZERO_IDLE_SECS", "10"),
            ("PREZERO_PRELOADED", "/any/path"),
            ("HOME", "/root"),
        ]);
        check_inherited(good, &[]).unwrap();
        for (k, v, why) in [
            ("PREZERO_RESERVE", "lots", "PREZERO_RESERVE=lots"),
            ("PREZERO_RESERVE", "1M", "at least 2M"),
            ("PREZERO_THRESHOLD", "0", "PREZERO_THRESHOLD=0"),
            ("PREZERO_LAZY", "yes", "1 or 0"),
            ("PREZERO_IDLE_SECS", "-1", "PREZERO_IDLE_SECS=-1"),
            (
                "PREZERO_IDLE_SECS",
                "1M",
                "a number of seconds (digits, no unit)",
            ),
        ] {
            let e = format!("{:#}", check_inherited(env(&[(k, v)]), &[]).unwrap_err());
            assert!(e.contains(why), "{k}={v}: {e}");
        }
        // A flag replaces the variable: its old value does not matter.
        let set = [("PREZERO_RESERVE", "4194304".to_string())];
        check_inherited(env(&[("PREZERO_RESERVE", "x")]), &set).unwrap();
    }

    /// The contract's table (the preload's reader runs it too): what it
    /// takes is taken here, what it refuses is an error here, inherited or
    /// given as a flag.
    #[test]
    fn the_contracts_cases_read_here_as_the_table_says() {
        for &(name, raw, want) in prezero_sys::env::CASES {
            let inherited = check_inherited([(name.into(), raw.into())], &[]);
            assert_eq!(
                inherited.is_ok(),
                want.is_some(),
                "{name}={raw:?}: {inherited:?}"
            );
            let flag = match name {
                "PREZERO_THRESHOLD" => Some(sized(&env::THRESHOLD, raw)),
                "PREZERO_RESERVE" => Some(sized(&env::RESERVE, raw)),
                _ => None,
            };
            if let Some(f) = flag {
                assert_eq!(f.ok(), want, "--{name}={raw:?}");
            }
        }
    }

    #[test]
    fn the_cache_directory_must_be_private() {
        let base = prezero_testkit::TempDir::new("run-test");
        let dir = base.join("cache");
        private_dir(&dir).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let p = place(&dir, "f", b"one", 0o500).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"one");
        // Same bytes: reused; others: replaced.
        assert_eq!(place(&dir, "f", b"one", 0o500).unwrap(), p);
        place(&dir, "f", b"two!", 0o500).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two!");
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        assert!(format!("{:#}", private_dir(&dir).unwrap_err()).contains("writable by others"));
        let link = base.join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(format!("{:#}", private_dir(&link).unwrap_err()).contains("not a directory"));
        assert!(format!("{:#}", private_dir(&base.join("a b")).unwrap_err()).contains("space"));
    }
}
