//! `prezero client exec`: take zeroed memory from `prezero serve` as memfds
//! and exec an unmodified program (a VMM) with them inherited, named on its
//! command line by placeholders: `{path}` (`/proc/self/fd/N`), `{fd}`,
//! `{size}`, or `{path0}`, `{fd1}`, `{size2}`... per segment.
//!
//! The placeholders must name every segment: the program would otherwise hold
//! one it never uses (quarantined, charged) for its whole life.
//!
//! After the exec the client's socket is gone (close-on-exec), so the daemon
//! quarantines the segments, and keeps them so for as long as the program, or
//! anything it hands a file or mapping to, holds them.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;

use anyhow::{anyhow, bail, Context, Result};
use prezero::PageKind;
use prezero_service::{AllocOptions, Source};

use crate::units::{fmt_size, parse_size};

#[derive(clap::Args)]
pub struct ExecArgs {
    /// Bytes of memory (K/M/G/T suffixes), rounded up to the page size.
    #[arg(long)]
    size: String,
    /// 2MB or 1GB.
    #[arg(long, default_value = "2MB")]
    page: String,
    #[command(flatten)]
    common: super::Common,
    #[command(flatten)]
    node: super::NodeArgs,
    /// Fail rather than fall back to a local memfd.
    #[arg(long)]
    no_fallback: bool,
    /// Say nothing about where the memory came from, nor warn when no
    /// placeholder names it.
    #[arg(short, long)]
    quiet: bool,
    /// The program and its arguments, after `--`. In the arguments `{path}`,
    /// `{fd}` and `{size}` (bytes) name the memory's file; with several
    /// segments `{path0}`, `{fd0}`, `{size0}`, `{path1}`...; `{{` and `}}`
    /// are literal braces.
    #[arg(
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM [ARGS]"
    )]
    command: Vec<OsString>,
}

/// What a placeholder stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Var {
    Path,
    Fd,
    Size,
}

impl Var {
    fn name(self) -> &'static str {
        match self {
            Var::Path => "path",
            Var::Fd => "fd",
            Var::Size => "size",
        }
    }
}

/// One argument, parsed: literal bytes and placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Lit(Vec<u8>),
    /// `{path}` (no index) or `{path3}`.
    Var(Var, Option<usize>),
}

/// One file of the memory, as the placeholders see it.
#[derive(Debug, Clone, Copy)]
struct File {
    fd: i32,
    /// Bytes of the request it covers.
    size: usize,
}

const KNOWN: &str = "the placeholders are {path}, {fd} and {size}, and per segment {path0}, \
                     {fd0}, {size0}, {path1}...; {{ and }} are literal braces";

/// Splits `arg` into literals and placeholders; a syntax error (an unbalanced
/// brace, an unknown name) is an error naming the argument.
fn parse(arg: &[u8]) -> Result<Vec<Piece>> {
    let shown = String::from_utf8_lossy(arg);
    let mut out = Vec::new();
    let mut lit = Vec::new();
    let mut i = 0;
    while i < arg.len() {
        match arg[i] {
            b'{' if arg.get(i + 1) == Some(&b'{') => {
                lit.push(b'{');
                i += 2;
            }
            b'}' if arg.get(i + 1) == Some(&b'}') => {
                lit.push(b'}');
                i += 2;
            }
            b'}' => {
                bail!(
                    "argument '{shown}': '}}' at byte {i} closes no placeholder (write }}}} for a literal brace)"
                )
            }
            b'{' => {
                let Some(len) = arg[i + 1..].iter().position(|&b| b == b'}') else {
                    bail!(
                        "argument '{shown}': '{{' at byte {i} is never closed (write {{{{ for a literal brace)"
                    );
                };
                let name = &arg[i + 1..i + 1 + len];
                let digits = name.iter().rev().take_while(|b| b.is_ascii_digit()).count();
                let (word, index) = name.split_at(name.len() - digits);
                let var = match word {
                    b"path" => Var::Path,
                    b"fd" => Var::Fd,
                    b"size" => Var::Size,
                    _ => {
                        bail!(
                            "argument '{shown}': unknown placeholder {{{}}}: {KNOWN}",
                            String::from_utf8_lossy(name)
                        )
                    }
                };
                let index = match index {
                    [] => None,
                    d => Some(
                        std::str::from_utf8(d)
                            .ok()
                            .and_then(|d| d.parse().ok())
                            .with_context(|| {
                                format!("argument '{shown}': segment index too large")
                            })?,
                    ),
                };
                if !lit.is_empty() {
                    out.push(Piece::Lit(std::mem::take(&mut lit)));
                }
                out.push(Piece::Var(var, index));
                i += len + 2;
            }
            b => {
                lit.push(b);
                i += 1;
            }
        }
    }
    if !lit.is_empty() || out.is_empty() {
        out.push(Piece::Lit(lit));
    }
    Ok(out)
}

/// The argument with every placeholder replaced by `files`' values. A
/// placeholder without an index needs exactly one file; an index must name one.
/// `too_many` is the advice for when one file was wanted and there are several.
fn render(arg: &[u8], pieces: &[Piece], files: &[File], too_many: &str) -> Result<Vec<u8>> {
    let shown = String::from_utf8_lossy(arg);
    let mut out = Vec::with_capacity(arg.len() + 16);
    for p in pieces {
        match *p {
            Piece::Lit(ref b) => out.extend_from_slice(b),
            Piece::Var(var, index) => {
                let name = var.name();
                let f = match index {
                    None if files.len() == 1 => files[0],
                    None => {
                        bail!(
                            "argument '{shown}': {{{name}}} names one file, but the memory is {} \
                             segments: name each ({{{name}0}} .. {{{name}{}}}), or {too_many}",
                            files.len(),
                            files.len() - 1
                        )
                    }
                    Some(i) => *files.get(i).with_context(|| {
                        format!(
                            "argument '{shown}': {{{name}{i}}}: the memory is {} segment{}, \
                             {{{name}0}} .. {{{name}{}}}",
                            files.len(),
                            if files.len() == 1 { "" } else { "s" },
                            files.len() - 1
                        )
                    })?,
                };
                let value = match var {
                    Var::Path => format!("/proc/self/fd/{}", f.fd),
                    Var::Fd => f.fd.to_string(),
                    Var::Size => f.size.to_string(),
                };
                out.extend_from_slice(value.as_bytes());
            }
        }
    }
    Ok(out)
}

/// Whether the placeholders of `parsed` (already rendered, so every index is
/// in range and an unindexed one means the only file) name every one of
/// `files`. An error naming the segments none names when some are named; a
/// warning when nothing is (the program may find its descriptors itself).
fn check_named(parsed: &[Vec<Piece>], files: &[File]) -> Result<Option<String>> {
    let mut named = vec![false; files.len()];
    let mut any = false;
    for piece in parsed.iter().flatten() {
        if let Piece::Var(_, index) = *piece {
            any = true;
            if let Some(n) = named.get_mut(index.unwrap_or(0)) {
                *n = true;
            }
        }
    }
    if !any {
        let fds = files
            .iter()
            .map(|f| f.fd.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        return Ok(Some(format!(
            "no placeholder names the memory: the program inherits it (fd {fds}) and must find \
             it itself; {{path}}, {{fd}} or {{size}} in its arguments name it"
        )));
    }
    let unnamed: Vec<usize> = (0..files.len()).filter(|&i| !named[i]).collect();
    if unnamed.is_empty() {
        return Ok(None);
    }
    let list =
        |f: &dyn Fn(usize) -> String| unnamed.iter().map(|&i| f(i)).collect::<Vec<_>>().join(", ");
    Err(anyhow!(
        "the memory is {} segments and no placeholder names segment{} {}: the program would \
         hold {} unused (quarantined, and charged to you) for as long as it runs; name every \
         segment ({}, or the {{fd}} and {{size}} forms)",
        files.len(),
        if unnamed.len() == 1 { "" } else { "s" },
        list(&|i| i.to_string()),
        if unnamed.len() == 1 { "it" } else { "them" },
        list(&|i| format!("{{path{i}}}")),
    ))
}

pub fn run(args: &ExecArgs) -> Result<()> {
    let size = parse_size(&args.size)?;
    let page: PageKind = args.page.parse()?;
    let (program, rest) = args
        .command
        .split_first()
        .context("no program to run: prezero client exec --size SIZE -- PROGRAM ARGS...")?;
    // Syntax errors before any memory is taken.
    let parsed = rest
        .iter()
        .map(|a| parse(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()?;
    let client = args.common.client()?;
    let opts = args.node.apply(AllocOptions {
        fallback: !args.no_fallback,
        ..AllocOptions::default()
    })?;
    let mem = client
        .alloc_files(size, page, opts)
        .with_context(|| format!("{} of memory", fmt_size(size)))?;
    let len = mem.len();
    let files: Vec<File> = mem
        .segments()
        .iter()
        .map(|s| File {
            fd: s.fd.as_raw_fd(),
            size: s.len,
        })
        .collect();
    let too_many = format!(
        "serve a pool whose segments hold the whole request (prezero serve --pool {}:segment={},...)",
        page.name(),
        fmt_size(len)
    );
    let argv = rest
        .iter()
        .zip(&parsed)
        .map(|(a, p)| render(a.as_bytes(), p, &files, &too_many).map(OsString::from_vec))
        .collect::<Result<Vec<_>, _>>()?;
    let unnamed = check_named(&parsed, &files)?;
    if !args.quiet {
        let fds = files
            .iter()
            .map(|f| f.fd.to_string())
            .collect::<Vec<_>>()
            .join(",");
        match mem.source() {
            Source::Service {
                segments,
                segment_size,
                node,
            } => eprintln!(
                "prezero: {} on {} pages from prezero serve at {}: {segments} segment{} of {}{} (fd {fds})",
                fmt_size(len),
                mem.page(),
                client.path().display(),
                if *segments == 1 { "" } else { "s" },
                fmt_size(*segment_size),
                super::on_node(*node)
            ),
            Source::Local { reason } => {
                if mem.page().is_hugetlb() {
                    eprintln!(
                        "prezero: {} on {} pages from a local memfd (fd {fds}): {reason}",
                        fmt_size(len),
                        mem.page()
                    )
                } else {
                    eprintln!(
                        "prezero: warning: {} from a plain local memfd, not hugetlb (fd {fds}): {reason}",
                        fmt_size(len)
                    )
                }
            }
        }
    }
    if let (Some(warning), false) = (unnamed, args.quiet) {
        eprintln!("prezero: warning: {warning}");
    }
    let mut cmd = std::process::Command::new(program);
    cmd.args(&argv);
    mem.pass_to(&mut cmd)?;
    // Only returns on failure; on success the files live on in the program,
    // and the exec closed the connection, which releases them.
    let e = cmd.exec();
    drop(mem);
    eprintln!("prezero: cannot run {}: {e}", program.to_string_lossy());
    std::process::exit(match e.raw_os_error() {
        Some(libc::ENOENT) => 127,
        _ => 126,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The argument expanded, or the error's text.
    fn expand(arg: &str, files: &[File]) -> Result<String, String> {
        let p = parse(arg.as_bytes()).map_err(|e| format!("{e:#}"))?;
        render(arg.as_bytes(), &p, files, "ADVICE")
            .map(|b| String::from_utf8(b).unwrap())
            .map_err(|e| format!("{e:#}"))
    }

    const ONE: [File; 1] = [File {
        fd: 5,
        size: 64 << 20,
    }];
    const TWO: [File; 2] = [
        File {
            fd: 5,
            size: 256 << 20,
        },
        File {
            fd: 7,
            size: 128 << 20,
        },
    ];

    #[test]
    fn placeholders_expand_alone_and_inside_larger_arguments() {
        assert_eq!(expand("{path}", &ONE).unwrap(), "/proc/self/fd/5");
        assert_eq!(expand("{fd}", &ONE).unwrap(), "5");
        assert_eq!(expand("{size}", &ONE).unwrap(), "67108864");
        assert_eq!(
            expand(
                "memory-backend-file,id=m,size={size},mem-path={path},share=on",
                &ONE
            )
            .unwrap(),
            "memory-backend-file,id=m,size=67108864,mem-path=/proc/self/fd/5,share=on"
        );
        assert_eq!(
            expand("{path0}:{size0}", &ONE).unwrap(),
            "/proc/self/fd/5:67108864"
        );
        assert_eq!(
            expand("a={path0},{size0} b={path1},{size1} fd={fd1}", &TWO).unwrap(),
            "a=/proc/self/fd/5,268435456 b=/proc/self/fd/7,134217728 fd=7"
        );
        assert_eq!(expand("-m", &TWO).unwrap(), "-m");
        assert_eq!(expand("", &ONE).unwrap(), "");
    }

    #[test]
    fn doubled_braces_are_literal() {
        assert_eq!(expand("{{path}}", &ONE).unwrap(), "{path}");
        assert_eq!(
            expand(r#"{{"mem-path":"{path}"}}"#, &ONE).unwrap(),
            r#"{"mem-path":"/proc/self/fd/5"}"#
        );
        assert_eq!(expand("}}{{", &TWO).unwrap(), "}{");
    }

    #[test]
    fn bad_placeholders_are_clear_errors() {
        for (arg, files, want) in [
            ("mem-path={path", &ONE[..], "never closed"),
            ("{", &ONE[..], "write {{"),
            ("a}b", &ONE[..], "closes no placeholder"),
            ("{nope}", &ONE[..], "unknown placeholder {nope}"),
            ("{}", &ONE[..], "unknown placeholder {}"),
            ("{Path}", &ONE[..], "unknown placeholder"),
            ("{path-1}", &ONE[..], "unknown placeholder"),
            ("{path99999999999999999999999}", &ONE[..], "too large"),
            (
                "{path1}",
                &ONE[..],
                "{path1}: the memory is 1 segment, {path0} .. {path0}",
            ),
            ("{size2}", &TWO[..], "the memory is 2 segments"),
            (
                "x={path}",
                &TWO[..],
                "{path} names one file, but the memory is 2 segments",
            ),
            ("{fd}", &TWO[..], "({fd0} .. {fd1}), or ADVICE"),
        ] {
            let e = expand(arg, files).unwrap_err();
            assert!(e.contains(want), "{arg}: {e}");
            assert!(e.contains(&format!("argument '{arg}'")), "{arg}: {e}");
        }
        // Unknown names and unbalanced braces fail before any memory is taken.
        assert!(parse(b"{sz}").is_err() && parse(b"{path3}").is_ok());
    }

    /// The warning, if any, or the error's text.
    fn named(args: &[&str], files: &[File]) -> Result<Option<String>, String> {
        let parsed: Vec<_> = args.iter().map(|a| parse(a.as_bytes()).unwrap()).collect();
        check_named(&parsed, files).map_err(|e| format!("{e:#}"))
    }

    const THREE: [File; 3] = [TWO[0], TWO[1], File { fd: 9, size: 4096 }];

    #[test]
    fn every_segment_must_be_named_and_naming_none_is_a_warning() {
        for (args, files) in [
            (&["-m", "{path}"][..], &ONE[..]),
            (&["{size0}"][..], &ONE[..]),
            (&["{fd1},{fd0}"][..], &TWO[..]),
            (&["{path0}", "x", "{size2}{size1}", "{fd0}"][..], &THREE[..]),
        ] {
            assert_eq!(named(args, files), Ok(None), "{args:?}");
        }
        let e = named(&["{path0}", "{size0}"], &THREE).unwrap_err();
        assert!(
            e.contains("the memory is 3 segments and no placeholder names segments 1, 2: ")
                && e.contains("hold them unused (quarantined, and charged to you)")
                && e.contains("({path1}, {path2}, or the {fd} and {size} forms)"),
            "{e}"
        );
        let e = named(&["{fd0}", "{size2}"], &THREE).unwrap_err();
        assert!(
            e.contains("names segment 1: ")
                && e.contains("hold it unused")
                && e.contains("({path1}, "),
            "{e}"
        );
        // Literal braces name nothing.
        for args in [&[][..], &["-m", "64M"][..], &["{{path}}"][..]] {
            let w = named(args, &TWO).unwrap().unwrap();
            assert!(
                w.starts_with("no placeholder names the memory: the program inherits it (fd 5, 7)"),
                "{args:?}: {w}"
            );
        }
    }
}
