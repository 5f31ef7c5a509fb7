//! Tenants and other helper processes: this test binary run again as one of
//! its ignored tests (a role), often under a test uid that needs no passwd
//! entry. The role reads one command a line on stdin and answers each with
//! one line that starts with [`MARK`] on stdout, so the test decides the
//! order of every step between processes.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Daemon;

/// Starts every answer line of a role (libtest writes its own lines too).
pub const MARK: &str = "@@ ";

/// Whether tenants can be run here (as other uids: root only); says why not.
pub fn can_run_tenants() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    prezero_testkit::skip("root", "running tenants under other uids needs root");
    false
}

/// A daemon that `uids` may use, started only if tenants can be run.
pub fn tenant_daemon(uids: &[u32], pool: &str, extra: &[&str]) -> Option<Daemon> {
    if !can_run_tenants() {
        return None;
    }
    let uids: Vec<String> = uids.iter().map(u32::to_string).collect();
    let mut args: Vec<&str> = uids.iter().flat_map(|u| ["--allow-uid", u]).collect();
    args.extend(extra);
    Daemon::start(pool, &args)
}

/// This test binary again, running only the ignored test `role`, from `/`,
/// its stdin, stdout and stderr piped. The caller adds the role's
/// environment and credentials.
pub fn role_command(role: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        role,
        "--nocapture",
        "--test-threads=1",
    ])
    .current_dir("/")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    cmd
}

/// One role process: its answers, and everything it wrote for failure
/// messages. Killed on drop.
pub struct RoleProcess {
    /// Who it is, in messages ("tenant uid 64201").
    who: String,
    pub child: Child,
    stdin: ChildStdin,
    answers: Receiver<String>,
    output: Arc<Mutex<String>>,
}

impl RoleProcess {
    /// Starts `cmd` (from [`role_command`]); `who` names it in messages.
    pub fn spawn(mut cmd: Command, who: String) -> RoleProcess {
        let mut child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot run {} as {who}: {e}",
                cmd.get_program().to_string_lossy()
            )
        });
        let output = Arc::new(Mutex::new(String::new()));
        let (tx, answers) = std::sync::mpsc::channel();
        collect(child.stdout.take().unwrap(), Some(tx), output.clone());
        collect(child.stderr.take().unwrap(), None, output.clone());
        let stdin = child.stdin.take().unwrap();
        RoleProcess {
            who,
            child,
            stdin,
            answers,
            output,
        }
    }

    pub fn output(&self) -> String {
        self.output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The next answer (what follows [`MARK`]), or `None` if none came
    /// within `limit` or the process ended.
    pub fn answer(&mut self, limit: Duration) -> Option<String> {
        self.answers.recv_timeout(limit).ok()
    }

    /// Sends one command line; a panic if the process is gone.
    pub fn send(&mut self, cmd: &str) {
        if let Err(e) = writeln!(self.stdin, "{cmd}").and_then(|()| self.stdin.flush()) {
            panic!("{} is gone ({e}):\n{}", self.who, self.output());
        }
    }
}

impl Drop for RoleProcess {
    fn drop(&mut self) {
        // Our own child, by its handle.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Collects lines of a role's stdout or stderr; answers go to `answers`.
fn collect(
    from: impl Read + Send + 'static,
    answers: Option<Sender<String>>,
    output: Arc<Mutex<String>>,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            if let (Some(tx), Some(at)) = (&answers, line.find(MARK)) {
                let _ = tx.send(line[at + MARK.len()..].to_owned());
            }
            let mut o = output.lock().unwrap_or_else(|e| e.into_inner());
            o.push_str(&line);
            o.push('\n');
        }
    });
}

/// The role's side: one answer line, flushed at once.
pub fn say(s: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{MARK}{s}");
    let _ = out.flush();
}
