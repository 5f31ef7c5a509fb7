//! `prezero generate`: the man pages (one per command, `prezero-bench-run.1`
//! and so on: `manual/`) and the bash, zsh and fish completions, from the
//! clap definitions the command itself parses with: what the Debian package
//! installs (`scripts/package-deb.sh`), never out of step with the binary.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;

#[derive(clap::Args)]
pub struct Args {
    /// Write a man page per command into this directory.
    #[arg(long, value_name = "DIR")]
    man: Option<PathBuf>,
    /// Write the bash, zsh and fish completions into this directory
    /// (`prezero.bash`, `_prezero`, `prezero.fish`).
    #[arg(long, value_name = "DIR")]
    completions: Option<PathBuf>,
}

pub fn run(args: &Args) -> Result<()> {
    if args.man.is_none() && args.completions.is_none() {
        anyhow::bail!("nothing to generate: give --man DIR, --completions DIR or both");
    }
    if let Some(dir) = &args.man {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        crate::manual::generate(crate::Cli::command(), dir)
            .with_context(|| format!("cannot write the man pages to {}", dir.display()))?;
    }
    if let Some(dir) = &args.completions {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            clap_complete::generate_to(shell, &mut crate::Cli::command(), "prezero", dir)
                .with_context(|| format!("cannot write the {shell} completion"))?;
        }
    }
    Ok(())
}
