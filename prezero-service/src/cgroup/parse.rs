//! The kernel's texts about cgroups, read without trusting what a tenant
//! named: `/proc/PID/cgroup` (which cgroup a process is in), the mount table
//! (where each hierarchy is), and the checks a cgroup path must pass before
//! the daemon opens it. Pure: no system calls, so every case is a unit test.

/// Controllers whose charges follow a process that does work for a tenant:
/// the pages it faults in (memory, hugetlb) and the CPU it runs (cpu,
/// cpuacct). Never cpuset: a process moved into a cpuset has its memory
/// rebound, and the daemon's children carry nothing of their own there.
pub(crate) const CHARGING_V1: [&str; 4] = ["memory", "hugetlb", "cpu", "cpuacct"];

/// Where a process is, from `/proc/PID/cgroup`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Membership {
    /// The unified (v2) hierarchy's path, if the process is in one.
    pub(crate) v2: Option<Vec<u8>>,
    /// Each v1 hierarchy that charges (see [`CHARGING_V1`]): its controllers
    /// as the kernel lists them ("cpu,cpuacct") and the path.
    pub(crate) v1: Vec<(String, Vec<u8>)>,
}

/// Reads `/proc/PID/cgroup`: lines `ID:CONTROLLERS:PATH`, the v2 line with ID
/// 0 and no controllers. A cgroup's name cannot hold a newline (the kernel
/// refuses one at `mkdir`), so lines are lines; any other byte may be in a
/// path and is kept as it is. A path the reader's cgroup namespace cannot see
/// ("/.." first) or that is not clean is refused: the daemon would not find
/// it under its own mount.
pub(crate) fn membership(text: &[u8]) -> Result<Membership, &'static str> {
    let mut m = Membership::default();
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let mut parts = line.splitn(3, |&b| b == b':');
        let (Some(id), Some(ctl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            return Err("a line of /proc/PID/cgroup without three fields");
        };
        check_path(path)?;
        if id == b"0" && ctl.is_empty() {
            if m.v2.replace(path.to_vec()).is_some() {
                return Err("two cgroup v2 lines in /proc/PID/cgroup");
            }
            continue;
        }
        let ctl = std::str::from_utf8(ctl).map_err(|_| "a controller name that is not text")?;
        if ctl.split(',').any(|c| CHARGING_V1.contains(&c)) {
            m.v1.push((ctl.to_owned(), path.to_vec()));
        }
    }
    Ok(m)
}

/// A cgroup path as the kernel writes one: absolute, no empty, `.` or `..`
/// component, no NUL, at most 4096 bytes. "/" is the root.
pub(crate) fn check_path(path: &[u8]) -> Result<(), &'static str> {
    if path.first() != Some(&b'/') {
        return Err("a cgroup path that is not absolute (outside the daemon's cgroup namespace?)");
    }
    if path.len() > 4096 || path.contains(&0) {
        return Err("a cgroup path longer than 4096 bytes or with a NUL byte");
    }
    if path == b"/" {
        return Ok(());
    }
    let bad = path[1..]
        .split(|&b| b == b'/')
        .any(|c| c.is_empty() || c == b"." || c == b"..");
    if bad {
        return Err("a cgroup path with an empty, '.' or '..' component");
    }
    Ok(())
}

/// The path relative to a mount of its hierarchy: without the leading '/'
/// ("." for the root), as `openat2` beneath the mount's directory takes it.
pub(crate) fn relative(path: &[u8]) -> &[u8] {
    match &path[1..] {
        b"" => b".",
        rest => rest,
    }
}

/// `path` and each of its ancestors below the root, deepest first.
pub(crate) fn levels(path: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut p = path;
    while p.len() > 1 {
        out.push(p);
        let cut = p.iter().rposition(|&b| b == b'/').unwrap_or(0);
        p = &p[..cut.max(1)];
    }
    out
}

/// One cgroup mount of the mount table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    /// Where it is mounted.
    pub(crate) dir: Vec<u8>,
    /// `None` for cgroup2; the charging controllers of a v1 hierarchy.
    pub(crate) v1: Option<String>,
    /// cgroup2 mounted with `memory_hugetlb_accounting` (6.6): hugetlb pages
    /// count in `memory.current` and against `memory.max`.
    pub(crate) hugetlb_in_memory: bool,
}

/// The cgroup mounts of `/proc/self/mountinfo` whose root is the hierarchy's
/// root (a bind mount of a subtree would name paths otherwise), the first of
/// each hierarchy.
pub(crate) fn mounts(mountinfo: &str) -> Vec<Mount> {
    let mut out: Vec<Mount> = Vec::new();
    for line in mountinfo.lines() {
        let Some((head, tail)) = line.split_once(" - ") else {
            continue;
        };
        let head: Vec<&str> = head.split(' ').collect();
        let tail: Vec<&str> = tail.split(' ').collect();
        if head.len() < 5 || tail.len() < 3 || head[3] != "/" {
            continue;
        }
        let dir = unescape(head[4]);
        let opts = tail[2].split(',');
        let m = match tail[0] {
            "cgroup2" => Mount {
                dir,
                v1: None,
                hugetlb_in_memory: tail[2].split(',').any(|o| o == "memory_hugetlb_accounting"),
            },
            "cgroup" => {
                let ctl: Vec<&str> = opts.filter(|o| CHARGING_V1.contains(o)).collect();
                if ctl.is_empty() {
                    continue;
                }
                Mount {
                    dir,
                    v1: Some(ctl.join(",")),
                    hugetlb_in_memory: false,
                }
            }
            _ => continue,
        };
        if !out.iter().any(|o| o.v1 == m.v1) {
            out.push(m);
        }
    }
    out
}

/// A mount point as mountinfo writes it: space, tab, newline and backslash
/// as `\ooo`.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(d) => {
                out.push((d[0] - b'0') << 6 | (d[1] - b'0') << 3 | (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    out
}

/// A cgroup path for people and logs: valid UTF-8 as it is, anything else
/// (and control characters, quotes, backslashes) escaped, so a hostile name
/// cannot forge a log line or a metric label.
pub(crate) fn display(path: &[u8]) -> String {
    let mut out = String::with_capacity(path.len());
    for chunk in path.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' | '\\' => {
                    out.push('\\');
                    out.push(c);
                }
                c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
                c => out.push(c),
            }
        }
        for &b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v2_membership_and_the_charging_v1_ones_are_read() {
        let m = membership(b"0::/machine.slice/vm 1.scope\n").unwrap();
        assert_eq!(m.v2.as_deref(), Some(&b"/machine.slice/vm 1.scope"[..]));
        let text = b"12:cpuset:/a\n4:cpu,cpuacct:/t\n3:memory:/t\n1:name=systemd:/x\n0::/\n";
        let m = membership(text).unwrap();
        assert_eq!(m.v2.as_deref(), Some(&b"/"[..]));
        assert_eq!(
            m.v1,
            vec![
                ("cpu,cpuacct".into(), b"/t".to_vec()),
                ("memory".into(), b"/t".to_vec())
            ]
        );
    }

    #[test]
    fn paths_a_reader_cannot_find_or_that_lie_are_refused() {
        for bad in [
            &b"0::/../../outside\n"[..],
            b"0::relative\n",
            b"0::/a//b\n",
            b"0::/a/./b\n",
            b"0::/a\n0::/b\n",
            b"0:\n",
        ] {
            assert!(membership(bad).is_err(), "{}", display(bad));
        }
        // Colons, spaces, quotes and bytes that are not UTF-8 are a name's.
        let m = membership(b"0::/odd: \"name\"\xff\n").unwrap();
        assert_eq!(m.v2.unwrap(), b"/odd: \"name\"\xff");
    }

    #[test]
    fn levels_run_from_the_cgroup_up_to_below_the_root() {
        assert_eq!(levels(b"/a/b/c"), vec![&b"/a/b/c"[..], b"/a/b", b"/a"]);
        assert!(levels(b"/").is_empty());
        assert_eq!(relative(b"/"), b".");
        assert_eq!(relative(b"/a/b"), b"a/b");
    }

    #[test]
    fn mounts_are_found_with_their_options() {
        let text = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate,memory_hugetlb_accounting\n\
                    31 23 0:27 / /sys/fs/cgroup/cpu\\040x rw - cgroup cgroup rw,cpu,cpuacct\n\
                    32 23 0:28 /sub /mnt/sub rw - cgroup cgroup rw,memory\n\
                    33 23 0:29 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n";
        let m = mounts(text);
        assert_eq!(m.len(), 2);
        assert!(m[0].v1.is_none() && m[0].hugetlb_in_memory);
        assert_eq!(m[1].dir, b"/sys/fs/cgroup/cpu x");
        assert_eq!(m[1].v1.as_deref(), Some("cpu,cpuacct"));
    }

    #[test]
    fn odd_names_are_escaped_for_people() {
        assert_eq!(display(b"/a\"b\\c\x01\xff"), "/a\\\"b\\\\c\\u{1}\\xff");
    }
}
