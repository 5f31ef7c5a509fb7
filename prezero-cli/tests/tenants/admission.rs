//! Who is let in and who is charged: another uid after one uid's scrubbed
//! segments, a user namespace's processes, a uid in many groups, a cap kept
//! across a kill -9 and restart.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

#[test]
fn a_pool_full_of_one_uids_scrubbed_segments_still_serves_another_uid_fresh_ones() {
    // Two segments, both released by A (scrubbed in place, for A only): B's
    // request makes them fresh for B, and B's bytes are zero.
    let Some(d) = daemon_for_tenants("target=32M,cap=32M,segment=16M", &[]) else {
        return;
    };
    let mut a = Tenant::spawn(TENANT_A, &[], &d.socket);
    for _ in 0..2 {
        assert_eq!(a.ask("alloc 16M").num("nonzero"), -1);
        a.ask("fill 17");
    }
    a.ask("release");
    a.ask("release");
    a.exit();
    let mut b = Tenant::spawn(TENANT_B, &[], &d.socket);
    let got = b.ask("alloc 32M");
    assert_eq!(got.errno(), 0, "{got}");
    assert_eq!(got.num("nonzero"), -1, "{got}");
    b.ask("release");
    b.exit();
    d.assert_serves();
}

#[test]
fn a_users_processes_in_a_user_namespace_it_made_share_its_cap() {
    // A user with subordinate uids could run a process as each of them and
    // get a cap per uid; the daemon charges the namespace's owner instead.
    const SUBUID: u32 = 64210;
    let sub = SUBUID.to_string();
    let Some(d) = daemon_for_tenants(
        "target=32M,cap=32M,segment=16M",
        &["--allow-uid", &sub, "--uid-cap", "16M"],
    ) else {
        return;
    };
    let (mut a, _) = holding_a_segment(&d, TENANT_A, 1);
    // A process of A's in a user namespace A made, which root maps as
    // newuidmap does for a rootless container (0: A itself, 1: SUBUID from
    // /etc/subuid); it waits on a FIFO for the map, then becomes uid 1 there:
    // SUBUID to everyone outside.
    let go = d.dir.join("go");
    let c = std::ffi::CString::new(go.to_str().unwrap()).unwrap();
    // SAFETY: c is NUL-terminated.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    // SAFETY: chmod of the FIFO just made (mkfifo's mode is cut by the umask).
    unsafe { libc::chmod(c.as_ptr(), 0o666) };
    let a_id = TENANT_A.to_string();
    let script = format!(
        "read x < {}; exec setpriv --reuid 1 --regid 1 --keep-groups {} client alloc 16M \
         --no-fallback --socket {}",
        go.display(),
        bin(),
        d.socket.display()
    );
    let child = Command::new("setpriv")
        .args(["--reuid", &a_id, "--regid", &a_id, "--clear-groups"])
        .args(["unshare", "--user", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(child) = child else {
        prezero_testkit::skip("tool", "setpriv and unshare (util-linux) are not installed");
        return;
    };
    let pid = child.id();
    let mine = std::fs::read_link("/proc/self/ns/user").unwrap();
    wait_for(
        "the child in its own user namespace",
        Duration::from_secs(5),
        || {
            std::fs::read_link(format!("/proc/{pid}/ns/user")).is_ok_and(|n| n != mine)
                || std::fs::metadata(format!("/proc/{pid}")).is_err()
        },
    );
    let map = format!("0 {TENANT_A} 1\n1 {SUBUID} 1\n");
    let mapped = std::fs::write(format!("/proc/{pid}/setgroups"), "deny")
        .and_then(|()| std::fs::write(format!("/proc/{pid}/uid_map"), &map))
        .and_then(|()| std::fs::write(format!("/proc/{pid}/gid_map"), &map));
    std::fs::write(&go, "go\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if let Err(e) = mapped {
        prezero_testkit::skip(
            "kernel",
            format!("user namespaces cannot be made or mapped here ({e}; {text})"),
        );
        return;
    }
    assert!(!out.status.success(), "served past A's cap: {text}");
    assert!(
        text.contains(&format!("uid {TENANT_A} holds")) && text.contains("cap"),
        "charged to A, the namespace's owner: {text}"
    );
    a.ask("release");
    a.exit();
    d.assert_serves();
}

#[test]
fn a_uid_in_300_groups_one_of_them_allowed_is_served() {
    let Some(d) = tenant_daemon(&[], ONE_SEGMENT, &["--allow-gid", &ALLOWED_GID.to_string()])
    else {
        return;
    };
    // The allowed group last, well past the first 256.
    let mut groups: Vec<u32> = (70000..70299).collect();
    groups.push(ALLOWED_GID);
    let mut member = Tenant::spawn(GROUP_MEMBER, &groups, &d.socket);
    let got = member.ask("alloc 16M");
    assert_eq!(got.errno(), 0, "{got}\n{}", d.log());
    assert_eq!(got.num("nonzero"), -1, "{got}");
    member.exit();
    // The same uid without that group is not let in.
    let others: Vec<u32> = (70000..70300).collect();
    let mut stranger = Tenant::spawn(GROUP_MEMBER, &others, &d.socket);
    let r = stranger.ask("connect-raw");
    assert_eq!(r.errno(), libc::EACCES, "{r}");
    stranger.exit();
    d.assert_serves();
}

#[test]
fn the_uid_cap_survives_a_kill_9_and_restart_while_a_tenant_still_holds() {
    let Some(mut d) = daemon_for_tenants("target=64M,cap=64M,segment=16M", &["--uid-cap", "32M"])
    else {
        return;
    };
    let mut a = Tenant::spawn(TENANT_A, &[], &d.socket);
    let held = a.ask("alloc 32M");
    assert_eq!(held.errno(), 0, "{held}");
    let r = a.ask("alloc-once 16M");
    assert_eq!(
        r.errno(),
        libc::EDQUOT,
        "the cap holds before the restart: {r}"
    );

    d.kill9();
    d.restart();
    assert!(
        d.log().contains(&format!(
            "still held by uid {TENANT_A}: taken over in quarantine and charged to that uid"
        )),
        "{}",
        d.log()
    );
    // Still holding, on a new connection: the held memory still counts.
    a.ask("connect");
    let r = a.ask("alloc-once 16M");
    assert_eq!(
        r.errno(),
        libc::EDQUOT,
        "the cap survives the restart: {r}\n{}",
        d.log()
    );
    a.exit();

    // The holder is gone: its charge goes with it.
    let mut again = Tenant::spawn(TENANT_A, &[], &d.socket);
    let t = Instant::now();
    loop {
        let r = again.ask("alloc-once 32M");
        if r.errno() == 0 {
            assert_eq!(r.num("nonzero"), -1, "{r}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the charge of the exited holder did not go away: {r}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    again.exit();
    d.assert_serves();
}
