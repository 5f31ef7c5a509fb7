//! Tenant cgroups from the command line: `prezero client prepare` (memory
//! made ready inside a cgroup before its tenant starts, as a VMM launcher
//! asks for it) and how `client stats` and `prezero info` show each cgroup.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use anyhow::{bail, Result};
use serde_json::json;

use prezero::PageKind;
use prezero_service::{CgroupStats, ServiceStats};

use super::{no_service, Common};
use crate::units::{fmt_size, parse_size};

#[derive(clap::Args)]
pub struct PrepareArgs {
    /// The cgroup's path in the daemon's hierarchy (/machine.slice/vm1.scope).
    cgroup: PathBuf,
    /// Bytes to keep ready there (K/M/G/T suffixes); 0 withdraws.
    size: String,
    /// 2MB or 1GB.
    #[arg(long, default_value = "2MB")]
    page: String,
    #[command(flatten)]
    common: Common,
}

pub(super) fn prepare(args: &PrepareArgs) -> Result<()> {
    let bytes = if args.size == "0" {
        0
    } else {
        parse_size(&args.size)?
    };
    let page: PageKind = args.page.parse()?;
    let client = args.common.client()?;
    if !client.is_connected() {
        return Err(no_service(&client));
    }
    let path = args.cgroup.as_os_str().as_bytes();
    if path.first() != Some(&b'/') {
        bail!(
            "{}: a cgroup path starts at its hierarchy's root, with /",
            args.cgroup.display()
        );
    }
    let (target, placed) = client.prepare(path, bytes as u64, page)?;
    println!(
        "cgroup {}: {} prepared on {page} pages ({} there now, charged to it)",
        args.cgroup.display(),
        fmt_size(target as usize),
        fmt_size(placed as usize)
    );
    Ok(())
}

/// A cgroup's name as people read it: its bytes, anything that is not
/// printable UTF-8 escaped.
fn name(c: &CgroupStats) -> String {
    String::from_utf8_lossy(&c.name).escape_debug().to_string()
}

fn ms(ns: u64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

/// One line per tenant cgroup.
pub(crate) fn print_rows(s: &ServiceStats) {
    for c in &s.cgroups {
        println!(
            "cgroup {}: {} connections, {} charged to it by the kernel ({} prepared), \
             {} lent of the shared pool; cleaned {} at {} of CPU in it, {} in the daemon's; \
             {} refused at its limits",
            name(c),
            c.connections,
            fmt_size(c.placed as usize),
            fmt_size(c.prepared as usize),
            fmt_size(c.lent as usize),
            fmt_size(c.cleaned_bytes as usize),
            ms(c.cpu_in_ns),
            ms(c.cpu_daemon_ns),
            c.refusals
        );
    }
    if s.cgroups_omitted > 0 {
        println!(
            "({} more cgroups did not fit the answer)",
            s.cgroups_omitted
        );
    }
}

/// The rows as JSON (names as text, not-UTF-8 bytes replaced).
pub(crate) fn json_rows(s: &ServiceStats) -> serde_json::Value {
    json!(s
        .cgroups
        .iter()
        .map(|c| json!({
            "cgroup": String::from_utf8_lossy(&c.name), "connections": c.connections,
            "placed": c.placed, "lent": c.lent, "prepared": c.prepared,
            "cleaned_bytes": c.cleaned_bytes, "cpu_in_ns": c.cpu_in_ns,
            "cpu_daemon_ns": c.cpu_daemon_ns, "refusals": c.refusals,
        }))
        .collect::<Vec<_>>())
}
