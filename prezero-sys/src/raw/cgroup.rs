//! The memory the process's memory cgroup has left: its limit less its
//! usage, the least over it and its ancestors (v2's `memory.max` and
//! `memory.current`, v1's `memory.limit_in_bytes` and
//! `memory.usage_in_bytes`, under `/sys/fs/cgroup`), read once at start-up
//! into stack buffers (this runs inside `malloc`). A program in a container
//! of 512 MiB must not fill a reserve sized by the host's memory.

use std::ffi::CStr;

use crate::raw as sys;
use crate::size::read_size;

/// Where a hierarchy's files are, and the two it has for a limit and usage.
#[derive(Debug, PartialEq, Eq)]
struct Hierarchy {
    root: &'static [u8],
    limit: &'static [u8],
    usage: &'static [u8],
    /// `memory.stat`'s line of the cgroup's inactive file pages, which the
    /// usage counts and reclaim takes first.
    inactive_file: &'static [u8],
}

const V2: Hierarchy = Hierarchy {
    root: b"/sys/fs/cgroup",
    limit: b"memory.max",
    usage: b"memory.current",
    inactive_file: b"inactive_file ",
};

const V1: Hierarchy = Hierarchy {
    root: b"/sys/fs/cgroup/memory",
    limit: b"memory.limit_in_bytes",
    usage: b"memory.usage_in_bytes",
    inactive_file: b"total_inactive_file ",
};

/// A line of `/proc/self/cgroup` (`ID:CONTROLLERS:PATH`): the memory
/// hierarchy it names, and the cgroup's path in it, if it is one (v2's
/// line has no controllers; v1's memory line lists `memory`).
fn memory_line(line: &[u8]) -> Option<(Hierarchy, &[u8])> {
    let mut parts = line.splitn(3, |&b| b == b':');
    let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
    if controllers.is_empty() {
        Some((V2, path))
    } else if controllers.split(|&b| b == b',').any(|c| c == b"memory") {
        Some((V1, path))
    } else {
        None
    }
}

/// The cgroup at `path` and its ancestors, deepest last, each as the length
/// of `path` that names it (`/a/b`: the mount's root, `/a`, `/a/b`). The
/// machine's root has no limit (v2) or none that binds (v1); in a cgroup
/// namespace, or a container that mounts its own cgroup, the mount's root
/// is the container's cgroup, with its limit (and `/proc/self/cgroup`'s
/// path may name nothing under the mount).
fn ancestors(path: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let path = path.strip_suffix(b"/").unwrap_or(path);
    std::iter::once(0).chain((1..=path.len()).filter(move |&i| i == path.len() || path[i] == b'/'))
}

/// The number in the file `root` `dir` `/` `name` (`None` for `max`, or a
/// file that is not there).
fn read_number(root: &[u8], dir: &[u8], name: &[u8]) -> Option<usize> {
    let mut buf = [0u8; 64];
    let n = read_start(root, dir, name, &mut buf)?;
    read_size(&buf[..n]).ok()
}

/// The start of the file `root` `dir` `/` `name` into `buf`: its length.
fn read_start(root: &[u8], dir: &[u8], name: &[u8], buf: &mut [u8]) -> Option<usize> {
    let mut path = [0u8; 512];
    let parts = [root, dir, b"/", name, b"\0"];
    let mut at = 0;
    for p in parts {
        path.get_mut(at..at + p.len())?.copy_from_slice(p);
        at += p.len();
    }
    let path = CStr::from_bytes_until_nul(&path).ok()?;
    sys::read_file_start(path, buf).ok()
}

/// The value of `memory.stat`'s line `field` (`"inactive_file "`) in `dir`.
fn read_stat(h: &Hierarchy, dir: &[u8]) -> Option<usize> {
    let mut buf = [0u8; 8192];
    let n = read_start(h.root, dir, b"memory.stat", &mut buf)?;
    let line = buf[..n]
        .split(|&b| b == b'\n')
        .find_map(|l| l.strip_prefix(h.inactive_file))?;
    read_size(line).ok()
}

/// The memory the process's cgroups have left, if any has a limit: its
/// limit less its usage, plus the inactive file pages the usage counts
/// (reclaim takes them first: a container that reads files sits near its
/// limit without being short).
pub fn room() -> Option<usize> {
    // Files that are not there (another hierarchy, a container's view) set
    // errno, which `malloc` and `free` must keep.
    let _kept = sys::KeepErrno::new();
    let mut buf = [0u8; 4096];
    let n = sys::read_file_start(c"/proc/self/cgroup", &mut buf).ok()?;
    let mut least: Option<usize> = None;
    for line in buf[..n].split(|&b| b == b'\n') {
        let Some((h, path)) = memory_line(line) else {
            continue;
        };
        for end in ancestors(path) {
            let dir = &path[..end];
            let Some(limit) = read_number(h.root, dir, h.limit) else {
                continue;
            };
            let used = read_number(h.root, dir, h.usage).unwrap_or(0);
            let file = read_stat(&h, dir).unwrap_or(0);
            let room = limit.saturating_sub(used).saturating_add(file);
            least = Some(least.map_or(room, |l| l.min(room)));
        }
    }
    least
}

/// The process's cgroup v1 memory directory, or the ancestor of it, whose
/// limit is the least: its path (`/sys/fs/cgroup/memory/...`, no
/// trailing slash) written into `out`, its length, and the limit. `None`
/// without a v1 memory hierarchy or a limit in it.
pub fn v1_limited(out: &mut [u8]) -> Option<(usize, usize)> {
    let _kept = sys::KeepErrno::new();
    let mut buf = [0u8; 4096];
    let n = sys::read_file_start(c"/proc/self/cgroup", &mut buf).ok()?;
    let path = buf[..n]
        .split(|&b| b == b'\n')
        .find_map(|l| match memory_line(l) {
            Some((h, path)) if h == V1 => Some(path),
            _ => None,
        })?;
    // v1 reads "no limit" as a page-rounded i64::MAX.
    let (dir, limit) = ancestors(path)
        .filter_map(|end| Some((end, read_number(V1.root, &path[..end], V1.limit)?)))
        .filter(|&(_, limit)| limit < 1 << 60)
        .min_by_key(|&(_, limit)| limit)?;
    let mut at = 0;
    for p in [V1.root, &path[..dir]] {
        out.get_mut(at..at + p.len())?.copy_from_slice(p);
        at += p.len();
    }
    Some((at, limit))
}

/// The usage of the v1 cgroup [`v1_limited`] names.
pub fn v1_usage() -> Option<usize> {
    let mut dir = [0u8; 4096];
    let (len, _) = v1_limited(&mut dir)?;
    let at = dir[..len].strip_prefix(V1.root)?;
    read_number(V1.root, at, V1.usage)
}

/// The path of the file `name` of the process's cgroup v2 directory
/// (`/sys/fs/cgroup` and the path of `/proc/self/cgroup`'s `0::` line),
/// written into `out`; `None` where there is no v2 line or it does not fit.
pub fn v2_file<'a>(name: &[u8], out: &'a mut [u8]) -> Option<&'a CStr> {
    let mut buf = [0u8; 4096];
    let n = sys::read_file_start(c"/proc/self/cgroup", &mut buf).ok()?;
    let path = buf[..n]
        .split(|&b| b == b'\n')
        .find_map(|l| match memory_line(l) {
            Some((h, path)) if h == V2 => Some(path),
            _ => None,
        })?;
    let path = path.strip_suffix(b"/").unwrap_or(path);
    let mut at = 0;
    for p in [V2.root, path, b"/", name, b"\0"] {
        out.get_mut(at..at + p.len())?.copy_from_slice(p);
        at += p.len();
    }
    CStr::from_bytes_until_nul(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_lines_of_both_versions() {
        assert_eq!(
            memory_line(b"0::/user.slice/a.scope"),
            Some((V2, &b"/user.slice/a.scope"[..]))
        );
        assert_eq!(memory_line(b"4:memory:/box"), Some((V1, &b"/box"[..])));
        assert_eq!(
            memory_line(b"7:cpu,memory,pids:/box"),
            Some((V1, &b"/box"[..]))
        );
        assert_eq!(memory_line(b"3:cpu,cpuacct:/box"), None);
        assert_eq!(memory_line(b"2:name=systemd:/"), None);
        assert_eq!(memory_line(b""), None);
    }

    #[test]
    fn a_cgroup_its_ancestors_and_the_mounts_root() {
        let names = |p: &'static [u8]| ancestors(p).map(|e| &p[..e]).collect::<Vec<_>>();
        assert_eq!(names(b"/a/b/c"), [&b""[..], b"/a", b"/a/b", b"/a/b/c"]);
        assert_eq!(names(b"/a/"), [&b""[..], b"/a"]);
        assert_eq!(names(b"/"), [&b""[..]]);
    }
}
