//! The man pages, one per command (`prezero-serve.1` and so on), each from
//! the command's one definition: its clap definition gives NAME, SYNOPSIS,
//! DESCRIPTION, OPTIONS and SUBCOMMANDS (clap_mangen), its [`Page`] in
//! `pages.rs` the EXAMPLES, FILES and EXIT STATUS, the environment the
//! command reads (`environment.rs`, the preload's variables from the
//! library's own `env` contract) and SEE ALSO (its parent and children, and
//! what the page names). The examples are also what `--help` ends with
//! ([`annotate`]), and every one of them parses as the command it shows
//! (a test).

mod environment;
mod pages;

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use roff::{bold, roman, Roff};

pub(crate) use environment::Env;
use pages::page;

/// What a command's man page says beyond its clap definition.
pub(crate) struct Page {
    /// The page's name: `prezero`, `prezero-serve`, `prezero-bench-clear`.
    pub name: &'static str,
    /// What each example does, and its command line (a `prezero` command).
    pub examples: &'static [(&'static str, &'static str)],
    /// The environment groups it reads, beyond the library's (every
    /// command's).
    pub env: &'static [Env],
    /// Files it reads or writes, beyond the profile (every command's): the
    /// path, and what it is.
    pub files: &'static [(&'static str, &'static str)],
    /// Exit statuses beyond 0, 1 and 2 (every command's), or in their place.
    pub exit: &'static [(&'static str, &'static str)],
    /// Pages to see beyond its parent and children (`systemd.unit(5)`).
    pub see_also: &'static [&'static str],
}

/// Every command's exit statuses, unless its page says otherwise.
const EXIT: &[(&str, &str)] = &[
    ("0", "Success."),
    (
        "1",
        "An error, said on stderr in one line: what failed and why.",
    ),
    (
        "2",
        "Bad usage (an unknown option, a missing argument: clap's message), or a \
         PREZERO_CPU this CPU cannot honour.",
    ),
];

/// The profile every command follows (the library reads it on first use).
const PROFILE: (&str, &str) = (
    "$XDG_CONFIG_HOME/prezero/profile.json",
    "The calibration profile Auto follows (~/.config/prezero/profile.json without \
     XDG_CONFIG_HOME), written by prezero calibrate; PREZERO_PROFILE names another.",
);

/// Writes a man page per command (not the hidden ones) into `dir`.
pub fn generate(cli: clap::Command, dir: &Path) -> Result<()> {
    let mut cmd = cli.disable_help_subcommand(true);
    cmd.build();
    let mut pages = Vec::new();
    walk(&cmd, &mut pages);
    for c in pages {
        let name = c.get_display_name().unwrap_or(c.get_name()).to_owned();
        let file = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        render(&c, &mut out).with_context(|| format!("the man page {name}"))?;
        std::fs::write(&file, out).with_context(|| format!("cannot write {}", file.display()))?;
    }
    Ok(())
}

fn walk(cmd: &clap::Command, out: &mut Vec<clap::Command>) {
    out.push(cmd.clone());
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        walk(sub, out);
    }
}

/// One page: clap_mangen's sections from the definition, then this
/// module's.
fn render(cmd: &clap::Command, out: &mut dyn Write) -> Result<()> {
    let name = cmd.get_display_name().unwrap_or(cmd.get_name());
    let p = page(name).with_context(|| format!("no manual page for {name} (manual/pages.rs)"))?;
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    if cmd.has_subcommands() {
        man.render_subcommands_section(out)?;
    }
    let mut roff = Roff::new();
    examples(&mut roff, p);
    environment::section(&mut roff, p.env);
    files(&mut roff, p);
    exit_status(&mut roff, p);
    see_also(&mut roff, cmd, p);
    roff.to_writer(out)?;
    if cmd.get_version().is_some() {
        man.render_version_section(out)?;
    }
    Ok(())
}

/// A tagged paragraph: `tag` in bold, `text` below it, indented.
fn item(roff: &mut Roff, tag: &str, text: &str) {
    roff.control("TP", []).text([bold(tag)]).text([roman(text)]);
}

fn examples(roff: &mut Roff, p: &Page) {
    roff.control("SH", ["EXAMPLES"]);
    for (what, line) in p.examples {
        roff.control("PP", []).text([roman(*what)]);
        roff.control("RS", ["4"]).control("EX", []);
        roff.text([roman(*line)]);
        roff.control("EE", []).control("RE", []);
    }
}

fn files(roff: &mut Roff, p: &Page) {
    roff.control("SH", ["FILES"]);
    for (path, what) in p.files.iter().chain([&PROFILE]) {
        item(roff, path, what);
    }
}

fn exit_status(roff: &mut Roff, p: &Page) {
    roff.control("SH", ["EXIT STATUS"]);
    // The page's own meaning of a status in its place, the others after.
    let mut statuses: Vec<(&str, &str)> = EXIT.to_vec();
    for &(status, what) in p.exit {
        match statuses.iter_mut().find(|e| e.0 == status) {
            Some(e) => e.1 = what,
            None => statuses.push((status, what)),
        }
    }
    for (status, what) in statuses {
        item(roff, status, what);
    }
}

/// Its parent, its children, then what the page names; each `name(1)`.
fn see_also(roff: &mut Roff, cmd: &clap::Command, p: &Page) {
    let name = cmd.get_display_name().unwrap_or(cmd.get_name());
    let mut refs: Vec<String> = Vec::new();
    if let Some((parent, _)) = name.rsplit_once('-') {
        refs.push(format!("{parent}(1)"));
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        refs.push(format!("{name}-{}(1)", sub.get_name()));
    }
    refs.extend(p.see_also.iter().map(|s| s.to_string()));
    roff.control("SH", ["SEE ALSO"]);
    let mut line = Vec::new();
    for (i, r) in refs.iter().enumerate() {
        let (page, section) = r.split_once('(').unwrap_or((r, ""));
        line.push(bold(page));
        line.push(roman(format!(
            "({section}{}",
            if i + 1 < refs.len() { ", " } else { "" }
        )));
    }
    roff.text(line);
}

/// `cli` with each command's examples at the end of its `--help`.
pub fn annotate(cli: clap::Command) -> clap::Command {
    let mut cmd = cli;
    let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_owned();
    annotate_as(&mut cmd, &name);
    cmd
}

fn annotate_as(cmd: &mut clap::Command, name: &str) {
    if let Some(p) = page(name) {
        let mut text = String::from("Examples:\n");
        for (what, line) in p.examples {
            text.push_str(&format!("  {line}\n      {what}\n"));
        }
        text.push_str(&format!("\nMore in man {name}."));
        *cmd = std::mem::take(cmd).after_long_help(text);
    }
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    for sub in subs {
        let full = format!("{name}-{sub}");
        *cmd = std::mem::take(cmd).mut_subcommand(&sub, |mut s| {
            annotate_as(&mut s, &full);
            s
        });
    }
}

#[cfg(test)]
mod tests;
