//! Every command has its page, every example parses as the command it
//! shows, and every page has the sections a man page is opened for.

use clap::CommandFactory;

use super::{annotate, generate, page, pages};
use crate::Cli;

/// Every command a person can run (not the hidden ones), by page name.
fn commands() -> Vec<String> {
    fn walk(cmd: &clap::Command, name: &str, out: &mut Vec<String>) {
        out.push(name.to_owned());
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            if sub.get_name() != "help" {
                walk(sub, &format!("{name}-{}", sub.get_name()), out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&Cli::command(), "prezero", &mut out);
    out
}

#[test]
fn every_command_has_a_page_and_every_page_a_command() {
    let commands = commands();
    for c in &commands {
        let p = page(c).unwrap_or_else(|| panic!("{c} has no page in manual/pages.rs"));
        assert!(!p.examples.is_empty(), "{c} has no example");
    }
    for p in pages::all() {
        assert!(
            commands.iter().any(|c| c == p.name),
            "{}: no such command",
            p.name
        );
    }
}

#[test]
fn every_example_parses_as_the_command_it_shows() {
    for p in pages::all() {
        for (_, line) in p.examples {
            // Variables before the command are the shell's.
            let words: Vec<&str> = line
                .split_whitespace()
                .skip_while(|w| w.contains('=') && !w.starts_with('-'))
                .collect();
            assert_eq!(words.first(), Some(&"prezero"), "{line}");
            let m = Cli::command()
                .try_get_matches_from(&words)
                .unwrap_or_else(|e| panic!("{}: {line}\n{e}", p.name));
            // The example is on the page of the command it runs.
            let mut name = String::from("prezero");
            let mut at = &m;
            while let Some((sub, sm)) = at.subcommand() {
                name = format!("{name}-{sub}");
                at = sm;
            }
            assert!(
                p.name == name || p.name == "prezero" || name.starts_with(&format!("{}-", p.name)),
                "{line} is on {}'s page",
                p.name
            );
        }
    }
}

#[test]
fn every_page_has_its_sections_and_run_every_preload_variable() {
    let dir = prezero_testkit::TempDir::new("man-pages");
    generate(Cli::command(), &dir).unwrap();
    for c in commands() {
        let file = dir.join(format!("{c}.1"));
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{c}.1: {e}"));
        for section in [
            ".SH NAME",
            ".SH SYNOPSIS",
            ".SH OPTIONS",
            ".SH EXAMPLES",
            ".SH ENVIRONMENT",
            ".SH FILES",
            ".SH \"EXIT STATUS\"",
            ".SH \"SEE ALSO\"",
        ] {
            assert!(text.contains(section), "{c}.1 has no {section}");
        }
        assert!(text.contains("PREZERO_CPU"), "{c}.1");
    }
    let run = std::fs::read_to_string(dir.join("prezero-run.1")).unwrap();
    for v in prezero_sys::env::ALL {
        assert!(run.contains(v.name), "prezero-run.1 lacks {}", v.name);
    }
    let serve = std::fs::read_to_string(dir.join("prezero-serve.1")).unwrap();
    assert!(serve.contains("/etc/prezero/prezero.toml") && serve.contains("prezero\\-client"));
    // groff's own check of each page, where groff is installed.
    let out = std::process::Command::new("groff")
        .args(["-man", "-ww", "-z", "-Tutf8"])
        .args(commands().iter().map(|c| dir.join(format!("{c}.1"))))
        .output();
    match out {
        Ok(o) => assert!(
            o.status.success() && o.stderr.is_empty(),
            "groff: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => prezero_testkit::skip("tool", format!("groff ({e}): apt-get install groff-base")),
    }
}

#[test]
fn long_help_ends_with_the_examples() {
    let mut cli = annotate(Cli::command());
    let serve = cli.find_subcommand_mut("serve").unwrap();
    let help = serve.render_long_help().to_string();
    assert!(
        help.contains("Examples:\n  prezero serve --config /etc/prezero/prezero.toml"),
        "{help}"
    );
    assert!(help.contains("More in man prezero-serve."), "{help}");
    let mut cli = annotate(Cli::command());
    let exec = cli
        .find_subcommand_mut("client")
        .and_then(|c| c.find_subcommand_mut("exec"))
        .unwrap();
    assert!(exec
        .render_long_help()
        .to_string()
        .contains("man prezero-client-exec"));
}
