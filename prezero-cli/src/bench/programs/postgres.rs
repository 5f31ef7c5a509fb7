//! The database server: a cluster made once with `initdb` in the scratch
//! directory (not timed), then, timed, a shell that starts `postgres` on a
//! socket in that directory, waits until it answers, loads 2M rows with
//! `pgbench -i`, and stops it (fast shutdown) and waits for it: the server
//! and its clients are all the shell's children, so `wait4` sees the tree.
//! PostgreSQL refuses to run as root: run by root, the cluster and the
//! timed shell belong to the `postgres` user (Debian's package makes it),
//! through `setpriv`, which execs.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::{find, text};

/// The timed shell; `$1` the cluster (and its socket's directory), `$2`
/// shared_buffers, `$3` the directory of the server's programs.
const SCRIPT: &str = r#"set -u
"$3/postgres" -D "$1" -k "$1" -c listen_addresses= -c shared_buffers="$2" \
  -c fsync=off -c synchronous_commit=off -c full_page_writes=off >"$1/server.log" 2>&1 &
server=$!
tries=0
until "$3/pg_isready" -q -h "$1" -d postgres; do
  tries=$((tries + 1))
  if [ "$tries" -gt 3000 ] || ! kill -0 "$server" 2>/dev/null; then
    echo "the server did not start:" >&2; tail -5 "$1/server.log" >&2; kill -INT "$server"; exit 1
  fi
  sleep 0.01
done
"$3/pgbench" -i -q -s 20 -h "$1" -U postgres postgres >/dev/null
loaded=$?
kill -INT "$server"
wait "$server"
[ "$loaded" -eq 0 ] && echo loaded
"#;

/// The directory of the server's own programs: that of `postgres` on PATH
/// (a link followed: Debian's are in /usr/lib/postgresql/N/bin), or Debian's.
fn server_bin(packages: &str) -> Result<PathBuf> {
    let found = find("postgres").and_then(|p| std::fs::canonicalize(p).ok());
    let debian = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin/postgres"))
        .find(|p| p.is_file());
    let exe = found.or(debian).with_context(|| {
        format!("no postgres on PATH or in /usr/lib/postgresql: install {packages}")
    })?;
    let bin = exe.parent().expect("a file's directory").to_path_buf();
    for tool in ["initdb", "pg_isready", "pgbench"] {
        if !bin.join(tool).is_file() {
            bail!("no {tool} beside {}: install {packages}", exe.display());
        }
    }
    Ok(bin)
}

/// The uid and gid of `name`.
fn user_ids(name: &str) -> Option<(u32, u32)> {
    prezero_sys::user_ids(&CString::new(name).ok()?)
}

/// The user a program that refuses root runs as: Debian's `postgres`.
pub(super) fn unprivileged_user() -> Option<(u32, u32)> {
    user_ids("postgres")
}

/// Why `uid` cannot have the lazy mode, if it cannot: the kernel gives
/// userfaultfd to an unprivileged user only with
/// `vm.unprivileged_userfaultfd = 1` or through a `/dev/userfaultfd` it may
/// open, and the preload then runs as `prezero run` does.
pub(super) fn lazy_denied(uid: u32) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let sysctl = std::fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd");
    if sysctl.is_ok_and(|v| v.trim() == "1") {
        return None;
    }
    let dev = std::fs::metadata("/dev/userfaultfd").ok();
    if dev
        .is_some_and(|m| m.mode() & 0o006 == 0o006 || (m.uid() == uid && m.mode() & 0o600 == 0o600))
    {
        return None;
    }
    Some(format!(
        "the server runs as uid {uid}, whom the kernel denies userfaultfd \
         (vm.unprivileged_userfaultfd is 0 and /dev/userfaultfd is not theirs): this arm ran \
         as prezero run does"
    ))
}

/// `argv` run as `user` through setpriv (which execs), or as it is.
fn as_user(user: Option<(u32, u32)>, argv: Vec<String>) -> Result<Vec<String>> {
    let Some((uid, gid)) = user else {
        return Ok(argv);
    };
    let setpriv = find("setpriv").context("no setpriv on PATH: install util-linux")?;
    let mut v = vec![
        text(&setpriv),
        format!("--reuid={uid}"),
        format!("--regid={gid}"),
        "--clear-groups".into(),
    ];
    v.extend(argv);
    Ok(v)
}

/// A cluster made in `dir` and the timed command line with `shared_buffers`
/// MiB; `user`: who runs it, when this is root (Debian's `postgres`);
/// `packages`: what to install when the server is not there.
pub(super) fn prepare(
    dir: &Path,
    shared_buffers: u64,
    user: Option<(u32, u32)>,
    packages: &str,
) -> Result<Vec<String>> {
    let bin = server_bin(packages)?;
    let cluster = dir.join("postgres");
    std::fs::create_dir(&cluster).context("making the cluster's directory")?;
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(&cluster, Some(uid), Some(gid))
            .context("giving the cluster's directory to postgres")?;
    }
    initdb(&bin, &cluster, user)?;
    let argv = vec![
        "/bin/sh".into(),
        "-c".into(),
        SCRIPT.into(),
        "sh".into(),
        text(&cluster),
        format!("{shared_buffers}MB"),
        text(&bin),
    ];
    as_user(user, argv)
}

/// A new cluster in `cluster`, not timed.
fn initdb(bin: &Path, cluster: &Path, user: Option<(u32, u32)>) -> Result<()> {
    let argv = as_user(
        user,
        vec![
            text(&bin.join("initdb")),
            "-D".into(),
            text(cluster),
            "-U".into(),
            "postgres".into(),
            "-A".into(),
            "trust".into(),
            "--no-sync".into(),
            "--locale=C".into(),
            "-E".into(),
            "UTF8".into(),
        ],
    )?;
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(cluster)
        .stdin(Stdio::null())
        .output()
        .context("running initdb")?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!("initdb failed: {}", err.lines().last().unwrap_or("").trim());
    }
    Ok(())
}
