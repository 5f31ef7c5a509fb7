//! `prezero serve` checks what would stop it before it fills any pool. It used
//! to fill its pools, then fail to write its ledger and destroy what it made,
//! or make any directory path it was given, as root, without a word.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use prezero_testkit::TempDir;

/// A directory of this test's own (the tests run at once), removed when it
/// ends, pass or fail.
fn tmp(test: &str) -> TempDir {
    TempDir::new(test)
}

/// `prezero serve args` that must fail: its stderr.
fn refused(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_prezero"))
        .arg("serve")
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} started:\n{err}");
    // No pool was filled, or tried.
    assert!(
        !err.contains("ready") && !err.contains("shortage"),
        "{args:?} filled a pool first:\n{err}"
    );
    err
}

#[test]
fn a_socket_directory_whose_parent_is_missing_is_refused() {
    let d = tmp("missing-parent");
    let sock = d.join("a/b/prezero.sock");
    let err = refused(&["--socket", sock.to_str().unwrap()]);
    assert!(err.contains("does not exist, nor does"), "{err}");
    assert!(!d.join("a").exists(), "a directory was made");
}

#[test]
fn an_unwritable_ledger_is_refused_before_any_pool_fills() {
    let d = tmp("ledger");
    let sock = d.join("prezero.sock");
    let err = refused(&[
        "--socket",
        sock.to_str().unwrap(),
        "--ledger",
        "/proc/nope/ledger",
    ]);
    assert!(
        err.contains("cannot write the ledger /proc/nope/ledger"),
        "{err}"
    );
}

#[test]
fn a_missing_socket_directory_is_made_and_said() {
    let d = tmp("made-dir");
    let dir = d.join("run");
    let sock = dir.join("prezero.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_prezero"))
        .args(["serve", "--socket", sock.to_str().unwrap()])
        .args(["--pool", "2MB:target=256M,cap=256M"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut log = String::new();
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        let Some(Ok(l)) = lines.next() else { break };
        log.push_str(&l);
        log.push('\n');
        if l.contains("listening on") {
            break;
        }
    }
    // SAFETY: kill has no memory preconditions; the child is ours.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    assert!(log.contains("listening on"), "{log}");
    assert!(
        log.contains(&format!("made the socket directory {}", dir.display())),
        "{log}"
    );
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755, "{log}");
}
