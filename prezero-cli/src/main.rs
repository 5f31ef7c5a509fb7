//! `prezero`: what this machine offers for clearing memory, and benchmarks that
//! measure each strategy beside what the kernel and glibc do today.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod bench;
mod calibrate;
mod client;
mod generate;
mod info;
mod manual;
mod output;
mod report;
mod rows;
mod run;
mod serve;
mod stats;
mod table;
mod units;

#[derive(Parser)]
#[command(
    name = "prezero",
    version,
    about = "Zeroed memory as fast as the hardware allows"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// CPU features, caches, page sizes, and the kernel Auto picks per size class.
    Info(info::Args),
    /// Measure this machine and write the profile Auto follows (under a minute).
    Calibrate(calibrate::Args),
    /// The HTML report again, from a `bench all --json-out` file.
    Report(report::Args),
    /// Benchmarks (GB/s, mean +- stdev, every result verified zero).
    Bench {
        #[command(subcommand)]
        which: bench::Which,
    },
    /// Run an unmodified program with pre-zeroed, populated large blocks
    /// (LD_PRELOAD of libprezero_preload.so, then exec).
    Run(run::Args),
    /// The node-wide service: pre-zeroed hugetlb memory handed out as memfds.
    Serve(serve::Args),
    /// Talk to `prezero serve`: alloc, stats, churn, exec.
    Client {
        #[command(subcommand)]
        which: client::Which,
    },
    /// Man pages and shell completions, for packaging.
    #[command(hide = true)]
    Generate(generate::Args),
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away
    // (`prezero bench ... | head`) instead of panicking on a broken pipe.
    let _ = prezero_sys::default_signal(libc::SIGPIPE);
    // Parsed as derived, with each command's examples at the end of its
    // --help (the man pages' EXAMPLES).
    let matches = manual::annotate(Cli::command()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // A mask the CPU cannot honour would make every figure a pretence.
    prezero::cpu::strict_mask();
    let cpu = prezero::cpu();
    if let Some(e) = &cpu.mask_error {
        let mask = cpu.mask.as_deref().unwrap_or_default();
        eprintln!("prezero: PREZERO_CPU={mask}: {e}; stopping");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Info(args) => info::run(&args),
        Command::Calibrate(args) => calibrate::run(&args),
        Command::Report(args) => report::run(&args),
        Command::Bench { which } => bench::run(which),
        Command::Run(args) => run::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Client { which } => client::run(which),
        Command::Generate(args) => generate::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("prezero: {}", message(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error with every cause under it, on one line: "what we were doing: why".
/// A cause its error has already printed (the library's `Os` errors say their
/// OS error and also give it as their source) is not said twice.
pub(crate) fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain().map(|c| c.to_string()) {
        if out.is_empty() {
            out = cause;
        } else if !out.ends_with(&cause) {
            out = format!("{out}: {cause}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use anyhow::Context;
    use clap::CommandFactory;

    use super::{message, Cli};

    /// `--help` of every command describes every option it lists.
    #[test]
    fn every_option_of_every_command_is_described() {
        fn walk(cmd: &clap::Command, path: &str, bare: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.get_help().is_none() && id != "help" && id != "version" {
                    bare.push(format!("{path} --{id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), bare);
            }
        }
        let mut bare = Vec::new();
        walk(&Cli::command(), "prezero", &mut bare);
        assert!(bare.is_empty(), "options without a description: {bare:?}");
    }

    #[test]
    fn an_error_says_what_failed_and_why_once() {
        let e = std::fs::read("/nonexistent/profile.json")
            .context("cannot read the profile /nonexistent/profile.json")
            .unwrap_err();
        assert_eq!(
            message(&e),
            "cannot read the profile /nonexistent/profile.json: No such file or directory (os error 2)"
        );
        let os = prezero::Error::Os {
            call: "mmap",
            source: std::io::Error::from_raw_os_error(libc::ENOMEM),
        };
        let e = anyhow::Error::new(os).context("2M of memory");
        assert_eq!(
            message(&e),
            "2M of memory: mmap failed: Cannot allocate memory (os error 12)"
        );
    }
}
