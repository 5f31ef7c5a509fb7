//! Tenants as cgroups: which cgroup a peer is in (read through its pidfd, as
//! its uid is), a cgroup named by a launcher that announces a tenant, and
//! what the kernel would let each allocate (`limits.rs`). The daemon opens a
//! tenant's cgroup directories once and keeps them: its children are made
//! inside them (`sys::fork_into`) and its limits are read through them, so a
//! rename or a look-alike made later reaches nothing.
//!
//! The texts are parsed in `parse.rs`, where a path from anyone is checked
//! before it is opened; every open is `openat2` beneath the hierarchy's
//! mount (`RESOLVE_BENEATH`), so no path can leave it.

mod limits;
pub(crate) mod parse;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use prezero_sys as sys;

pub(crate) use limits::Limit;
use parse::{check_path, membership, relative, Membership};

/// One mounted hierarchy the daemon charges through.
struct Root {
    dir: OwnedFd,
    /// `None`: the unified hierarchy; else a v1 one's controllers.
    v1: Option<String>,
    hugetlb_in_memory: bool,
}

/// The cgroup hierarchies of this machine, as mounted where the daemon runs.
pub(crate) struct Hierarchies {
    v2: Option<Root>,
    v1: Vec<Root>,
}

/// A tenant's cgroup, opened: its name and directories.
pub(crate) struct Opened {
    /// How the daemon, its stats and its metrics name it: its path in the
    /// hierarchy of the memory controller (v1's where memory is there, as in
    /// systemd's hybrid layout), else in the unified one.
    pub(crate) name: Vec<u8>,
    /// Its paths in every hierarchy, one string: two tenants are one cgroup
    /// only if they are in the same place in each.
    pub(crate) id: Vec<u8>,
    /// The cgroup v2 path and directory (children are made inside it).
    pub(crate) v2: Option<(Vec<u8>, OwnedFd)>,
    /// Each charging v1 hierarchy's controllers, path and directory of the
    /// tenant, with its `cgroup.procs` open for writing (a child moves itself in).
    pub(crate) v1: Vec<(String, Vec<u8>, OwnedFd, OwnedFd)>,
    /// Who owns the directory (an announcement's permission).
    pub(crate) owner: u32,
}

impl Hierarchies {
    /// Reads the mount table; a hierarchy that cannot be opened is left out.
    pub(crate) fn read() -> Hierarchies {
        let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut h = Hierarchies {
            v2: None,
            v1: Vec::new(),
        };
        for m in parse::mounts(&text) {
            let dir = std::ffi::OsStr::from_bytes(&m.dir);
            let Ok(f) = std::fs::File::open(dir) else {
                continue;
            };
            let root = Root {
                dir: f.into(),
                v1: m.v1.clone(),
                hugetlb_in_memory: m.hugetlb_in_memory,
            };
            match m.v1 {
                // A unified hierarchy beside v1 ones with no controller of
                // its own (systemd's hybrid layout) charges nothing.
                None if controllers(&root).is_empty() => {}
                None => h.v2 = Some(root),
                Some(_) => h.v1.push(root),
            }
        }
        // The memory hierarchy names a v1 tenant: it holds what is charged.
        h.v1.sort_by_key(|r| {
            !r.v1
                .as_deref()
                .is_some_and(|c| c.split(',').any(|c| c == "memory"))
        });
        h
    }

    /// Where each hierarchy that charges is mounted (a tool that makes a
    /// tenant cgroup makes it in each).
    pub(crate) fn mount_points(&self) -> Vec<std::path::PathBuf> {
        let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let charging = |m: &parse::Mount| match m.v1 {
            None => self.v2.is_some(),
            Some(_) => true,
        };
        parse::mounts(&text)
            .into_iter()
            .filter(charging)
            .map(|m| std::ffi::OsString::from_vec(m.dir).into())
            .collect()
    }

    /// Whether any hierarchy charges here: without one, tenants have no
    /// cgroup to be charged to, and none is asked for.
    pub(crate) fn in_use(&self) -> bool {
        self.v2.is_some() || !self.v1.is_empty()
    }

    /// Whether hugetlb pages count against `memory.max` (cgroup2 mounted
    /// with `memory_hugetlb_accounting`).
    pub(crate) fn hugetlb_in_memory(&self) -> bool {
        self.v2.as_ref().is_some_and(|r| r.hugetlb_in_memory)
    }

    /// The cgroup of the peer `pid` (`pidfd` its pidfd, if the kernel gave
    /// one): `/proc/PID/cgroup` read, the directories opened, then the process
    /// checked still alive through its pidfd (so the pid was not reused
    /// meanwhile) and the file read again, unchanged (so it did not move
    /// while it was looked at).
    pub(crate) fn of_peer(
        &self,
        pidfd: Option<BorrowedFd<'_>>,
        pid: i32,
    ) -> Result<Opened, String> {
        let path = format!("/proc/{pid}/cgroup");
        let read = || std::fs::read(&path).map_err(|e| format!("{path}: {e}"));
        let first = read()?;
        let m = membership(&first).map_err(|e| format!("{path}: {e}"))?;
        let opened = self.open(&m)?;
        if pidfd.is_some_and(|p| !sys::pidfd_alive(p)) {
            return Err("the peer exited while its cgroup was read".into());
        }
        if read()? != first {
            return Err("the peer moved to another cgroup while it was read".into());
        }
        Ok(opened)
    }

    /// A cgroup named by its path (an announcement, the configuration): the
    /// same path in the unified hierarchy, or in each charging v1 one.
    pub(crate) fn named(&self, path: &[u8]) -> Result<Opened, String> {
        check_path(path)?;
        let m = Membership {
            v2: self.v2.as_ref().map(|_| path.to_vec()),
            v1: self
                .v1
                .iter()
                .filter_map(|r| r.v1.clone().map(|c| (c, path.to_vec())))
                .collect(),
        };
        self.open(&m)
    }

    fn open(&self, m: &Membership) -> Result<Opened, String> {
        let open_in = |root: &Root, path: &[u8]| {
            sys::open_beneath(
                root.dir.as_fd(),
                relative(path),
                libc::O_RDONLY | libc::O_DIRECTORY,
            )
            .map_err(|e| format!("cgroup {}: {e}", parse::display(path)))
        };
        let v2 = match (&self.v2, &m.v2) {
            (Some(root), Some(path)) => Some((path.clone(), open_in(root, path)?)),
            _ => None,
        };
        let mut v1 = Vec::new();
        for root in &self.v1 {
            let ctl = root.v1.as_deref().unwrap_or_default();
            let Some((_, path)) = m.v1.iter().find(|(c, _)| c == ctl) else {
                continue;
            };
            let dir = open_in(root, path)?;
            let procs = sys::open_beneath(dir.as_fd(), b"cgroup.procs", libc::O_WRONLY)
                .map_err(|e| format!("cgroup {}: cgroup.procs: {e}", parse::display(path)))?;
            v1.push((ctl.to_owned(), path.clone(), dir, procs));
        }
        // v1's memory hierarchy comes first (`read`), where there is one.
        let memory_v1 = v1.first().filter(|e| e.0.split(',').any(|c| c == "memory"));
        let Some(name) = memory_v1
            .map(|e| e.1.clone())
            .or(v2.as_ref().map(|e| e.0.clone()))
            .or(v1.first().map(|e| e.1.clone()))
        else {
            return Err("in no cgroup hierarchy this daemon charges through".into());
        };
        let mut id = Vec::new();
        for (ctl, path) in v2
            .iter()
            .map(|e| ("", &e.0))
            .chain(v1.iter().map(|e| (&e.0[..], &e.1)))
        {
            id.extend_from_slice(ctl.as_bytes());
            id.push(b':');
            id.extend_from_slice(path);
            id.push(b'\n');
        }
        let dir = v2
            .as_ref()
            .map(|e| &e.1)
            .or(v1.first().map(|e| &e.2))
            .expect("a name has a directory");
        let owner = sys::fstat(dir.as_fd())
            .map_err(|e| format!("cgroup {}: {e}", parse::display(&name)))?
            .st_uid;
        Ok(Opened {
            name,
            id,
            v2,
            v1,
            owner,
        })
    }
}

/// The controllers of a unified hierarchy's root (`cgroup.controllers`).
fn controllers(root: &Root) -> String {
    sys::open_beneath(root.dir.as_fd(), b"cgroup.controllers", libc::O_RDONLY)
        .ok()
        .and_then(|f| std::io::read_to_string(std::fs::File::from(f)).ok())
        .unwrap_or_default()
        .trim()
        .to_owned()
}

impl Opened {
    /// Whether the cgroup is still there (a removed one's files are gone).
    pub(crate) fn exists(&self) -> bool {
        let dir = self
            .v2
            .as_ref()
            .map(|e| &e.1)
            .or(self.v1.first().map(|e| &e.2));
        dir.is_some_and(|d| sys::open_beneath(d.as_fd(), b"cgroup.procs", libc::O_RDONLY).is_ok())
    }

    /// What a child needs to run in it: made in the v2 directory, or moved
    /// into the v1 ones by writing to their `cgroup.procs`.
    pub(crate) fn entry(&self) -> (Option<BorrowedFd<'_>>, Vec<BorrowedFd<'_>>) {
        (
            self.v2.as_ref().map(|e| e.1.as_fd()),
            self.v1.iter().map(|e| e.3.as_fd()).collect(),
        )
    }

    /// Its path in the hierarchy `hier` names (`None`: the unified one; else
    /// a v1 one's controllers).
    pub(crate) fn path_in(&self, hier: Option<&str>) -> Option<&[u8]> {
        match hier {
            None => self.v2.as_ref().map(|e| &e.0[..]),
            Some(c) => self.v1.iter().find(|e| e.0 == c).map(|e| &e.1[..]),
        }
    }
}

/// Where each cgroup hierarchy that would charge a tenant of `prezero serve`
/// is mounted here (cgroup2 with controllers; v1's memory, hugetlb, cpu and
/// cpuacct): a tool that makes a tenant cgroup makes it in each.
pub fn charging_hierarchies() -> Vec<std::path::PathBuf> {
    Hierarchies::read().mount_points()
}
