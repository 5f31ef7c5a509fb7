//! The programs' generated inputs (the same bytes every run: a fixed seed),
//! and the scratch directory that holds them, removed when the bench ends.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// A directory of this run's own under the temporary directory, removed
/// with everything in it when dropped (after an error too).
pub(super) struct Scratch(PathBuf);

impl Scratch {
    /// A new directory, `mode` (0755 when a program runs as another user and
    /// must reach its files; the inputs are generated, nothing secret).
    pub(super) fn new(mode: u32) -> Result<Scratch> {
        use std::os::unix::fs::PermissionsExt;
        let template = std::env::temp_dir().join("prezero-programs-XXXXXX");
        let dir = prezero_sys::make_temp_dir(&template)
            .with_context(|| format!("cannot make a directory like {}", template.display()))?;
        let scratch = Scratch(dir);
        std::fs::set_permissions(&scratch.0, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("chmod {}", scratch.0.display()))?;
        Ok(scratch)
    }

    pub(super) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!("prezero: cannot remove {}: {e}", self.0.display());
        }
    }
}

/// xorshift64: the generated inputs need no more than bytes that do not
/// repeat on their own.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn create(path: &Path) -> Result<BufWriter<std::fs::File>> {
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    Ok(BufWriter::with_capacity(1 << 20, f))
}

fn done(mut w: BufWriter<std::fs::File>, path: &Path) -> Result<()> {
    w.flush()
        .with_context(|| format!("writing {}", path.display()))
}

/// `n` lines of a random key and a counter, in no order: sort's input.
pub(super) fn lines(path: &Path, n: usize) -> Result<()> {
    let mut w = create(path)?;
    let mut r = Random(0x9e37_79b9_7f4a_7c15);
    for i in 0..n {
        writeln!(w, "{:016x} {i}", r.next())?;
    }
    done(w, path)
}

/// A C file of `n` functions, each a loop with a branch, for `gcc -O2`.
pub(super) fn c_functions(path: &Path, n: usize) -> Result<()> {
    let mut w = create(path)?;
    for i in 0..n {
        writeln!(
            w,
            "int f{i}(const int *a, int n) {{\n  int s = {i};\n  for (int k = 0; k < n; k++) {{\n    \
             s += a[k] * {m};\n    if (s > {t}) s ^= a[(k + {i}) % n];\n    \
             switch (s & 3) {{ case 0: s += {i}; break; case 1: s -= k; break; default: s *= 3; }}\n  \
             }}\n  return s;\n}}",
            m = i % 7 + 1,
            t = i * 13 + 5
        )?;
    }
    done(w, path)
}

/// `bytes` of text-like lines whose first quarter comes back three times,
/// each time a little changed: what a long window (zstd --long) finds.
pub(super) fn repeating(path: &Path, bytes: usize) -> Result<()> {
    let mut w = create(path)?;
    let quarter = bytes / 4;
    let mut block = Vec::with_capacity(quarter + 64);
    let mut r = Random(0x2545_f491_4f6c_dd1d);
    while block.len() < quarter {
        let x = r.next();
        let words = [
            "alpha", "beta", "gamma", "delta", "zero", "page", "fault", "clear",
        ];
        let line = format!(
            "{} {} {:x}\n",
            words[(x % 8) as usize],
            words[(x >> 8) as usize % 8],
            x >> 40
        );
        block.extend_from_slice(line.as_bytes());
    }
    block.truncate(quarter);
    for round in 0..4u8 {
        // One byte in every MiB differs from the last round's.
        for (i, chunk) in block.chunks(1 << 20).enumerate() {
            let mut c = chunk.to_vec();
            let at = i % c.len();
            c[at] = b'a' + round;
            w.write_all(&c)?;
        }
    }
    done(w, path)
}
