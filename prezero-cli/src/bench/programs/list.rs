//! The programs `bench programs` runs: what each is, the Debian package it
//! comes from, and how it is made ready (its inputs generated, its
//! command line) in the run's scratch directory, its sizes scaled to the
//! memory this machine has left.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::{find, inputs, postgres, text};
use crate::bench::run::NUMPY;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Program {
    JavaPretouch,
    PythonBytearray,
    Sort,
    Sqlite,
    Gcc,
    Numpy,
    NumpyTests,
    Postgres,
    Zstd,
    JavaFill,
}

pub(super) const ALL: [Program; 10] = [
    Program::JavaPretouch,
    Program::PythonBytearray,
    Program::Sort,
    Program::Sqlite,
    Program::Gcc,
    Program::Numpy,
    Program::NumpyTests,
    Program::Postgres,
    Program::Zstd,
    Program::JavaFill,
];

/// What `--quick` runs: the two whose part in `bench all --quick` stays
/// within ~20 s on 2 CPUs (one that pays for zeroed memory, one that does not).
pub(super) const QUICK: [Program; 2] = [Program::PythonBytearray, Program::Sort];

/// Where a program runs and how large it is.
pub(super) struct Setting<'a> {
    /// The run's scratch directory (generated inputs, a database).
    pub(super) dir: &'a Path,
    /// The sizes' share of their full values (1: as the issue gives them).
    pub(super) scale: f64,
    /// The user a program that refuses root runs as, when this is root.
    pub(super) user: Option<(u32, u32)>,
}

impl Setting<'_> {
    /// `full` MiB scaled, at least 16 MiB.
    pub(super) fn mib(&self, full: u64) -> u64 {
        ((full as f64 * self.scale) as u64).max(16)
    }
}

/// A program ready to run: its command line, the variables it needs, the
/// user it runs as (root's children: `None`), a word its stdout must hold,
/// and why its lazy arm cannot be lazy, when known before it runs.
pub(super) struct Ready {
    pub(super) argv: Vec<OsString>,
    pub(super) env: Vec<(OsString, OsString)>,
    pub(super) user: Option<(u32, u32)>,
    pub(super) expect: Option<&'static str>,
    pub(super) lazy_denied: Option<String>,
}

impl Ready {
    fn new(argv: Vec<String>) -> Ready {
        Ready {
            argv: argv.into_iter().map(OsString::from).collect(),
            env: Vec::new(),
            user: None,
            expect: None,
            lazy_denied: None,
        }
    }

    fn expecting(self, word: &'static str) -> Ready {
        Ready {
            expect: Some(word),
            ..self
        }
    }
}

impl Program {
    pub(super) fn name(self) -> &'static str {
        match self {
            Program::JavaPretouch => "java-pretouch",
            Program::PythonBytearray => "python-bytearray",
            Program::Sort => "sort",
            Program::Sqlite => "sqlite",
            Program::Gcc => "gcc",
            Program::Numpy => "numpy",
            Program::NumpyTests => "numpy-tests",
            Program::Postgres => "postgres",
            Program::Zstd => "zstd",
            Program::JavaFill => "java-fill",
        }
    }

    /// The Debian packages that hold it.
    pub(super) fn packages(self) -> &'static str {
        match self {
            Program::JavaPretouch => "default-jre-headless",
            Program::PythonBytearray => "python3-minimal",
            Program::Sort => "coreutils",
            Program::Sqlite => "sqlite3",
            Program::Gcc => "gcc",
            Program::Numpy => "python3-numpy",
            Program::NumpyTests => "python3-numpy python3-pytest python3-hypothesis",
            Program::Postgres => "postgresql",
            Program::Zstd => "zstd",
            Program::JavaFill => "default-jdk-headless",
        }
    }

    /// Whether its time is the first touch of large zeroed memory: the
    /// programs the issue asks to be 2x faster under `--lazy`.
    pub(super) fn first_touch(self) -> bool {
        matches!(
            self,
            Program::JavaPretouch | Program::PythonBytearray | Program::Numpy
        )
    }

    /// What it does, for the table.
    pub(super) fn what(self, s: &Setting) -> String {
        match self {
            Program::JavaPretouch => format!(
                "java -Xms{0}m -Xmx{0}m -XX:+AlwaysPreTouch -XX:+UseParallelGC -version",
                s.mib(2048)
            ),
            Program::PythonBytearray => format!(
                "python3: bytearray({} MiB), then bytearray({} MiB)",
                s.mib(1024),
                s.mib(512)
            ),
            Program::Sort => format!(
                "LC_ALL=C sort -S {}M of {SORT_LINES} generated lines",
                s.mib(2048)
            ),
            Program::Sqlite => format!(
                "sqlite3 :memory:, a {} MiB page cache, 1M rows inserted",
                s.mib(1024)
            ),
            Program::Gcc => format!("gcc -O2 -c of a generated {GCC_FUNCTIONS}-function file"),
            Program::Numpy => format!(
                "numpy: np.zeros({} MiB); a += 1.0 twice; 10 times",
                s.mib(512)
            ),
            Program::NumpyTests => "pytest of numpy's core/tests/test_numeric.py".into(),
            Program::Postgres => format!(
                "postgres (shared_buffers {} MiB) started, pgbench -i -s 20 (2M rows), stopped",
                s.mib(1024)
            ),
            Program::Zstd => format!("zstd --long=31 -T1 of a generated {} MiB file", s.mib(256)),
            Program::JavaFill => format!(
                "java -Xmx{}m: {JAVA_ROUNDS} rounds of {} arrays of 16 MiB filled",
                s.mib(2048),
                java_arrays(s)
            ),
        }
    }

    /// Made ready in `s.dir`, or why it cannot run here (what to install).
    pub(super) fn prepare(self, s: &Setting) -> Result<Ready> {
        match self {
            Program::JavaPretouch => {
                let heap = s.mib(2048);
                Ok(Ready::new(vec![
                    need("java", self)?,
                    format!("-Xms{heap}m"),
                    format!("-Xmx{heap}m"),
                    "-XX:+AlwaysPreTouch".into(),
                    "-XX:+UseParallelGC".into(),
                    "-version".into(),
                ]))
            }
            Program::PythonBytearray | Program::Numpy | Program::NumpyTests => {
                self.python_program(s)
            }
            Program::Sort => {
                let input = s.dir.join("sort.txt");
                inputs::lines(&input, SORT_LINES)?;
                let mut r = Ready::new(vec![
                    need("sort", self)?,
                    format!("-S{}M", s.mib(2048)),
                    "-o".into(),
                    "/dev/null".into(),
                    text(&input),
                ]);
                r.env.push(("LC_ALL".into(), "C".into()));
                Ok(r)
            }
            Program::Sqlite => {
                let sql = format!(
                    "PRAGMA cache_size=-{};\
                     CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);\
                     WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000000) \
                     INSERT INTO t SELECT x, hex(randomblob(16)) FROM c;\
                     SELECT count(*) FROM t;",
                    s.mib(1024) * 1024
                );
                let argv = vec![need("sqlite3", self)?, ":memory:".into(), sql];
                Ok(Ready::new(argv).expecting("1000000"))
            }
            Program::Gcc => {
                let source = s.dir.join("functions.c");
                inputs::c_functions(&source, GCC_FUNCTIONS)?;
                let object = text(&s.dir.join("functions.o"));
                let argv = vec![need("gcc", self)?, "-O2".into(), "-c".into(), text(&source)];
                Ok(Ready::new([argv, vec!["-o".into(), object]].concat()))
            }
            Program::Postgres => {
                // PostgreSQL refuses to run as root.
                let user = if prezero_sys::geteuid() == 0 {
                    Some(
                        s.user
                            .context("root, and no postgres user to run the server as")?,
                    )
                } else {
                    None
                };
                let argv = postgres::prepare(s.dir, s.mib(1024), user, self.packages())?;
                Ok(Ready {
                    user,
                    lazy_denied: user.and_then(|(uid, _)| postgres::lazy_denied(uid)),
                    ..Ready::new(argv).expecting("loaded")
                })
            }
            Program::Zstd => {
                let input = s.dir.join("zstd.in");
                inputs::repeating(&input, (s.mib(256) as usize) << 20)?;
                let argv = ["--long=31", "-T1", "-q", "-f", "-o", "/dev/null"];
                let argv = std::iter::once(need("zstd", self)?).chain(argv.map(String::from));
                Ok(Ready::new(argv.chain([text(&input)]).collect()))
            }
            Program::JavaFill => java_fill(s, self),
        }
    }

    /// Made ready: the programs of Debian's Python.
    fn python_program(self, s: &Setting) -> Result<Ready> {
        match self {
            Program::PythonBytearray => {
                let script = format!(
                    "b = bytearray({} << 20)\nb2 = bytearray({} << 20)\n\
                     print('ok' if b[-1] == 0 and b2[-1] == 0 else 'bad')\n",
                    s.mib(1024),
                    s.mib(512)
                );
                Ok(Ready::new(vec![python(self)?, "-c".into(), script]).expecting("ok"))
            }
            Program::Numpy => {
                let py = python(self)?;
                importable(&py, "numpy", self)?;
                let elements = s.mib(512) << 17;
                let argv = vec![py, "-c".into(), NUMPY.into(), elements.to_string()];
                Ok(Ready::new([argv, vec!["10".into()]].concat()).expecting("bad=0"))
            }
            Program::NumpyTests => {
                let py = python(self)?;
                importable(&py, "numpy, pytest, hypothesis", self)?;
                let tests = numpy_dir(&py)?.join("core/tests/test_numeric.py");
                if !tests.is_file() {
                    bail!("no {}: install {}", tests.display(), self.packages());
                }
                let argv = ["-m", "pytest", "-q", "-p", "no:cacheprovider"];
                let argv = std::iter::once(py).chain(argv.map(String::from));
                Ok(Ready::new(argv.chain([text(&tests)]).collect()).expecting(" passed"))
            }
            _ => unreachable!("{} is not a Python program", self.name()),
        }
    }
}

const GCC_FUNCTIONS: usize = 1000;
const JAVA_ROUNDS: u32 = 4;

const SORT_LINES: usize = 2_000_000;

/// The live arrays of 16 MiB a round of java-fill holds: a quarter of its heap.
fn java_arrays(s: &Setting) -> u64 {
    (s.mib(2048) / 64).max(1)
}

/// A Java program compiled into the scratch directory: each round it fills
/// arrays of 16 MiB (a word per 4 KiB, on memory the JVM zeroed) and keeps
/// them until the round ends.
fn java_fill(s: &Setting, p: Program) -> Result<Ready> {
    let javac = need("javac", p)?;
    let classes = s.dir.join("java");
    std::fs::create_dir_all(&classes).context("making the java directory")?;
    let source = classes.join("Fill.java");
    std::fs::write(&source, JAVA_FILL).context("writing Fill.java")?;
    let out = Command::new(&javac)
        .arg("-d")
        .arg(&classes)
        .arg(&source)
        .stdin(Stdio::null())
        .output()
        .context("running javac")?;
    if !out.status.success() {
        bail!(
            "javac failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(Ready::new(vec![
        need("java", p)?,
        format!("-Xmx{}m", s.mib(2048)),
        "-XX:+UseParallelGC".into(),
        "-cp".into(),
        text(&classes),
        "Fill".into(),
        java_arrays(s).to_string(),
        JAVA_ROUNDS.to_string(),
    ])
    .expecting("ok"))
}

const JAVA_FILL: &str = r#"public class Fill {
    public static void main(String[] args) {
        int arrays = Integer.parseInt(args[0]), rounds = Integer.parseInt(args[1]);
        long sum = 0;
        for (int r = 0; r < rounds; r++) {
            long[][] live = new long[arrays][];
            for (int i = 0; i < arrays; i++) {
                long[] x = new long[2 << 20];
                for (int j = 0; j < x.length; j += 512) x[j] = i + j + 1;
                live[i] = x;
            }
            for (long[] x : live) sum += x[x.length - 512];
        }
        System.out.println(sum > 0 ? "ok" : "bad");
    }
}
"#;

/// `exe` found on PATH, or what to install.
pub(super) fn need(exe: &str, p: Program) -> Result<String> {
    find(exe)
        .map(|e| text(&e))
        .with_context(|| format!("no {exe} on PATH: install {}", p.packages()))
}

/// Debian's own Python, not a shim first on PATH (pyenv's starts a shell
/// and another interpreter, whose modules are not Debian's).
fn python(p: Program) -> Result<String> {
    const DEBIAN: &str = "/usr/bin/python3";
    if !Path::new(DEBIAN).is_file() {
        bail!("no {DEBIAN}: install {}", p.packages());
    }
    Ok(DEBIAN.into())
}

/// Whether `python` imports `modules`, or what to install.
fn importable(python: &str, modules: &str, p: Program) -> Result<()> {
    let ok = Command::new(python)
        .args(["-c", &format!("import {modules}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        bail!("{python} cannot import {modules}: install {}", p.packages());
    }
    Ok(())
}

/// Where `python`'s numpy is installed.
fn numpy_dir(python: &str) -> Result<PathBuf> {
    let out = Command::new(python)
        .args([
            "-c",
            "import os, numpy; print(os.path.dirname(numpy.__file__))",
        ])
        .stdin(Stdio::null())
        .output()
        .context("asking python3 where numpy is")?;
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}
