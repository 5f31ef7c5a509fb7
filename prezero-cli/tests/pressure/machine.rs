//! Programs under prezero beside a plain one, on the whole machine's memory.

use super::*;

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
                    .env("PREZERO_HISTORY", "0")
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
                        .env("PREZERO_HISTORY", "0")
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
