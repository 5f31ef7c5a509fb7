//! Faults injected under `prezero serve` (issue 30, part 4): a full disk under
//! the ledger and the metrics file, and ENOMEM from `memfd_create` and
//! `fallocate` (the library's `PREZERO_SYS_FAULT`, in debug builds). In each
//! the daemon keeps serving what it can, logs what it cannot, and never hands
//! out a segment it did not finish: every hand-out is checked zero and whole.
//!
//! Tests skip (printing why) when the hugetlb pages cannot be reserved (not
//! root, or no memory), and the full disk when a tmpfs cannot be mounted.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use prezero::service::ServiceMemory;

fn wait_for_log(d: &Daemon, needle: &str, limit: Duration) {
    wait_for(&format!("'{needle}' in the log"), limit, || {
        d.log().contains(needle)
    });
}

/// Bytes ready in the daemon's pool.
fn ready_bytes(d: &Daemon) -> u64 {
    let p = d.stats().pools[0];
    p.ready * p.segment_size
}

/// A hand-out checked zero and whole (`bytes` long, in segments that tile it).
fn checked(m: ServiceMemory, bytes: usize) -> ServiceMemory {
    assert_all_zero(&m);
    assert_eq!(m.len(), bytes);
    let tiled: usize = m.segments().iter().map(|s| s.len).sum();
    assert_eq!(tiled, bytes, "the segments tile the hand-out");
    m
}

// ---------------------------------------------------------------------------
// A full disk.

/// A tmpfs of 64 KiB mounted for one test, unmounted on drop.
struct SmallFs {
    dir: PathBuf,
}

impl SmallFs {
    /// Mounts it (root only), or says why not.
    fn mount(name: &str) -> Option<SmallFs> {
        let dir = std::env::temp_dir().join(format!("prezero-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Mode 0755: the metrics file's directory may not be everyone's to write.
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k,mode=0755", "prezero-test"])
            .arg(&dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(SmallFs { dir }),
            Ok(o) => {
                let _ = std::fs::remove_dir(&dir);
                eprintln!(
                    "skipped: cannot mount a 64 KiB tmpfs: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                eprintln!("skipped: cannot run mount: {e}");
                None
            }
        }
    }

    /// Takes every free block, into a file of its own (`name`).
    fn fill(&self, name: &str) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.dir.join(name)).unwrap();
        let block = [0x55u8; 4096];
        loop {
            match f.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling the tmpfs: {e}"),
            }
        }
    }

    /// Gives back what the `fill`s took.
    fn make_room(&self, names: &[&str]) {
        for name in names {
            std::fs::remove_file(self.dir.join(name)).unwrap();
        }
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Every segment of `held` is in the ledger file, which reads whole.
fn all_recorded(ledger: &Path, held: &[ServiceMemory]) {
    let listed = ledger_files(ledger).unwrap_or_else(|e| panic!("the ledger file: {e}"));
    for m in held {
        for f in files_of(m) {
            assert!(
                listed.contains(&f),
                "segment {f:?} was handed out but the ledger file does not list it: \
                 a restart would not find it"
            );
        }
    }
}

#[test]
fn a_full_disk_under_the_ledger_and_the_metrics_file_stops_growth_not_service() {
    let Some(fs) = SmallFs::mount("full-disk") else {
        return;
    };
    let ledger = fs.dir.join("serve.ledger");
    let metrics = fs.dir.join("serve.prom");
    let (l, m) = (ledger.to_str().unwrap(), metrics.to_str().unwrap());
    let Some(mut d) = Daemon::start(
        "target=32M,cap=128M,segment=16M",
        &[
            "--ledger",
            l,
            "--metrics-textfile",
            m,
            "--metrics-interval",
            "0.2",
        ],
    ) else {
        return;
    };
    let cannot_metrics = |d: &Daemon| d.log().matches("cannot write the metrics file").count();
    let c = d.client();
    let mut held = vec![checked(from_service(&c, 16 * MB).unwrap(), 16 * MB)];
    wait_for(
        "the pool back at its target",
        Duration::from_secs(10),
        || ready_bytes(&d) == 32 * MB as u64,
    );
    all_recorded(&ledger, &held);

    fs.fill("filler");
    // The next hand-out makes the pool grow; the new segment cannot be recorded.
    held.push(checked(from_service(&c, 16 * MB).unwrap(), 16 * MB));
    wait_for_log(&d, "cannot write the ledger", Duration::from_secs(10));
    wait_for(
        "the metrics writer to fail",
        Duration::from_secs(10),
        || cannot_metrics(&d) == 1,
    );
    d.assert_serves();
    // Whatever is ready is handed out; all of it is in the ledger file.
    while let Ok(m) = from_service(&c, 16 * MB) {
        held.push(checked(m, 16 * MB));
    }
    all_recorded(&ledger, &held);
    let tmp = fs.dir.join("serve.ledger.tmp");
    assert!(!tmp.exists(), "a failed write left its temporary file");

    // A restart on the full disk finds what is held from the file, and charges it.
    drop(c);
    d.kill9();
    d.restart();
    let c = d.client();
    let s = d.stats();
    let charged: u64 = s.tenants.iter().map(|t| t.charged).sum();
    assert_eq!(
        charged,
        (held.len() * 16 * MB) as u64,
        "every held segment charged after the restart:\n{}",
        d.log()
    );
    d.assert_serves();
    // Full again (the restart replaced the metrics file with an empty one),
    // and everything ready taken, so the pool wants to grow.
    fs.fill("filler2");
    while let Ok(m) = from_service(&c, 16 * MB) {
        held.push(checked(m, 16 * MB));
    }
    wait_for(
        "the metrics writer to fail again",
        Duration::from_secs(10),
        || cannot_metrics(&d) == 2,
    );
    all_recorded(&ledger, &held);

    // Room again: the pool grows back, and both files are written again.
    fs.make_room(&["filler", "filler2"]);
    wait_for(
        "the pool back at its target",
        Duration::from_secs(15),
        || ready_bytes(&d) >= 32 * MB as u64,
    );
    wait_for_log(
        &d,
        &format!("the ledger {l} is written again"),
        Duration::from_secs(10),
    );
    wait_for_log(
        &d,
        &format!("the metrics file {m} is written again"),
        Duration::from_secs(10),
    );
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert!(text.contains("prezero_"), "{text}");
    held.push(checked(from_service(&c, 16 * MB).unwrap(), 16 * MB));
    all_recorded(&ledger, &held);
    drop(held);
    d.wait_all_ready();
    assert_eq!(d.stats().verify_failures, 0);
}

// ---------------------------------------------------------------------------
// ENOMEM from memfd_create and fallocate.

const FAULT_ENV: &str = "PREZERO_SYS_FAULT";

#[test]
fn enomem_from_memfd_create_costs_a_segment_not_the_daemon() {
    // Call 1 is the lease probe, 2 and 3 the segments made at start-up (3
    // fails), 4 the one the worker makes up for it, 5 the growth after the
    // first hand-out.
    let Some(d) = Daemon::start_env(
        "target=32M,cap=48M,segment=16M",
        &[],
        &[(FAULT_ENV, "memfd_create:3,memfd_create:5")],
    ) else {
        return;
    };
    wait_for_log(
        &d,
        "injected fault: memfd_create call 3",
        Duration::from_secs(5),
    );
    assert!(d.log().contains("1 of 2 segments"), "{}", d.log());
    d.assert_serves();
    wait_for("the pool made up", Duration::from_secs(10), || {
        ready_bytes(&d) == 32 * MB as u64
    });
    let c = d.client();
    let a = checked(from_service(&c, 16 * MB).unwrap(), 16 * MB);
    wait_for_log(&d, "cannot grow toward its target", Duration::from_secs(10));
    d.assert_serves();
    let b = checked(from_service(&c, 16 * MB).unwrap(), 16 * MB);
    // Retried (every 5 s): the third segment comes.
    let third = from_service_within(&c, 16 * MB, Duration::from_secs(15));
    let third = checked(third, 16 * MB);
    drop((a, b, third));
    d.wait_all_ready();
}

#[test]
fn enomem_from_memfd_create_for_the_lease_probe_stops_start_up_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("prezero-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(bin())
        .args([
            "serve",
            "--pool",
            "2MB:target=2M,cap=2M,segment=2M",
            "--socket",
        ])
        .arg(dir.join("s.sock"))
        .env(FAULT_ENV, "memfd_create:1")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("memfd_create") && err.contains("Cannot allocate memory"),
        "{err}"
    );
}

#[test]
fn enomem_from_fallocate_costs_the_segment_being_refreshed_not_the_daemon() {
    let Some(d) = Daemon::start_env(
        "target=32M,cap=32M,segment=16M",
        &["--reuse", "fresh"],
        &[(FAULT_ENV, "fallocate:1")],
    ) else {
        return;
    };
    let c = d.client();
    let mut m = checked(from_service(&c, 16 * MB).unwrap(), 16 * MB);
    m.as_mut_slice().fill(0x5a);
    let gone = files_of(&m);
    drop(m);
    wait_for_log(
        &d,
        "injected fault: fallocate call 1",
        Duration::from_secs(10),
    );
    wait_for_log(&d, "destroyed", Duration::from_secs(10));
    d.assert_serves();
    // The pool grows back; the segment whose punch failed is never handed out.
    wait_for(
        "the pool back at its target",
        Duration::from_secs(10),
        || ready_bytes(&d) == 32 * MB as u64,
    );
    let all = checked(from_service(&c, 32 * MB).unwrap(), 32 * MB);
    for f in files_of(&all) {
        assert!(
            !gone.contains(&f),
            "the segment whose punch failed came back"
        );
    }
    drop(all);
    d.wait_all_ready();
}
