//! Who a thread is, as the kernel says it in `/proc`: its ids, groups,
//! capabilities, `no_new_privs`, seccomp filters and namespaces. The
//! preload's threads compare theirs with the program's main thread
//! (`crate::threads`): none of them may be less restricted. Read into stack
//! buffers, numbers only.

use std::ffi::CStr;

use super::read_file_start;

/// The namespaces a thread is in, each by its inode.
const NAMESPACES: [&[u8]; 8] = [
    b"cgroup", b"ipc", b"mnt", b"net", b"pid", b"time", b"user", b"uts",
];

/// The capability sets, in `/proc`'s order.
const CAP_SETS: [&[u8]; 5] = [b"CapInh:", b"CapPrm:", b"CapEff:", b"CapBnd:", b"CapAmb:"];

/// A thread's identity and restrictions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// Real, effective, saved and file-system uid; then the same gids.
    pub ids: [u32; 8],
    /// The supplementary groups: how many, and a hash of the list.
    pub groups: (u32, u64),
    /// Inheritable, permitted, effective, bounding and ambient sets.
    pub caps: [u64; 5],
    pub no_new_privs: bool,
    /// Seccomp mode (0 none, 1 strict, 2 filter) and filters stacked.
    pub seccomp: (u32, u32),
    pub namespaces: [u64; 8],
}

/// What one identity may do that another may not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wider {
    Ids,
    Groups,
    Capabilities,
    NoNewPrivs,
    Seccomp,
    Namespace,
}

impl Identity {
    /// Thread `tid` of this process's (0: the calling thread's); `None`
    /// where it is gone or `/proc` cannot be read.
    ///
    /// pre: none.
    pub fn of(tid: u32) -> Option<Identity> {
        let mut path = [0u8; 64];
        let mut buf = [0u8; 4096];
        let n = read_file_start(task_path(tid, b"status", &mut path)?, &mut buf).ok()?;
        let mut id = Identity::parse(&buf[..n])?;
        for (i, ns) in NAMESPACES.iter().enumerate() {
            let mut name = [0u8; 16];
            name[..3].copy_from_slice(b"ns/");
            name[3..3 + ns.len()].copy_from_slice(ns);
            let path = task_path(tid, &name[..3 + ns.len()], &mut path)?;
            // A namespace this kernel has not (time before 5.6): 0 for all.
            id.namespaces[i] = inode(path).unwrap_or(0);
        }
        Some(id)
    }

    /// The fields of a `status` file's text; `None` without its ids.
    pub fn parse(text: &[u8]) -> Option<Identity> {
        let mut id = Identity::default();
        let mut seen_ids = 0;
        for line in text.split(|&b| b == b'\n') {
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let (key, value) = (&line[..=colon], &line[colon + 1..]);
            match key {
                b"Uid:" | b"Gid:" => {
                    let at = if key == b"Uid:" { 0 } else { 4 };
                    for (i, n) in numbers(value).take(4).enumerate() {
                        id.ids[at + i] = n as u32;
                    }
                    seen_ids += 1;
                }
                b"Groups:" => id.groups = hash_list(value),
                b"NoNewPrivs:" => id.no_new_privs = numbers(value).next() == Some(1),
                b"Seccomp:" => id.seccomp.0 = numbers(value).next().unwrap_or(0) as u32,
                b"Seccomp_filters:" => id.seccomp.1 = numbers(value).next().unwrap_or(0) as u32,
                _ => {
                    if let Some(i) = CAP_SETS.iter().position(|&c| c == key) {
                        id.caps[i] = hex(value);
                    }
                }
            }
        }
        (seen_ids == 2).then_some(id)
    }

    /// What `self` may do that `other` may not, if anything: other ids or
    /// groups, a capability `other` lacks (any set), no `no_new_privs`
    /// where it has it, fewer seccomp filters, another namespace.
    pub fn wider_than(&self, other: &Identity) -> Option<Wider> {
        if self.ids != other.ids {
            return Some(Wider::Ids);
        }
        if self.groups != other.groups {
            return Some(Wider::Groups);
        }
        if self.caps.iter().zip(other.caps).any(|(&s, o)| s & !o != 0) {
            return Some(Wider::Capabilities);
        }
        if other.no_new_privs && !self.no_new_privs {
            return Some(Wider::NoNewPrivs);
        }
        if other.seccomp.0 > self.seccomp.0 || other.seccomp.1 > self.seccomp.1 {
            return Some(Wider::Seccomp);
        }
        if self.namespaces != other.namespaces {
            return Some(Wider::Namespace);
        }
        None
    }
}

/// `/proc/thread-self/NAME` (tid 0) or `/proc/self/task/TID/NAME`, as a C
/// string in `buf`.
fn task_path<'a>(tid: u32, name: &[u8], buf: &'a mut [u8; 64]) -> Option<&'a CStr> {
    use std::io::Write;
    let mut w = &mut buf[..];
    if tid == 0 {
        w.write_all(b"/proc/thread-self/").ok()?;
    } else {
        write!(w, "/proc/self/task/{tid}/").ok()?;
    }
    w.write_all(name).ok()?;
    w.write_all(b"\0").ok()?;
    CStr::from_bytes_until_nul(&buf[..]).ok()
}

/// The inode of the file at `path` (following a namespace's link).
fn inode(path: &CStr) -> Option<u64> {
    // SAFETY: an all-zero stat is valid storage; stat writes it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a C string and the local stat.
    (unsafe { libc::stat(path.as_ptr(), &mut st) } == 0).then_some(st.st_ino)
}

/// The decimal numbers in `text`, in order.
fn numbers(text: &[u8]) -> impl Iterator<Item = u64> + '_ {
    text.split(|b| !b.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .filter_map(|w| std::str::from_utf8(w).ok()?.parse().ok())
}

/// A list of numbers: how many, and an FNV-1a hash of them in order.
fn hash_list(text: &[u8]) -> (u32, u64) {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    let mut n = 0;
    for v in numbers(text) {
        n += 1;
        for b in v.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    (n, h)
}

/// A hexadecimal number (a capability set), 0 if there is none.
fn hex(text: &[u8]) -> u64 {
    let digits = text.trim_ascii();
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &[u8] = b"Name:\tprog\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t1 2 \n\
CapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\n\
CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\nNoNewPrivs:\t0\nSeccomp:\t0\n\
Seccomp_filters:\t0\n";

    #[test]
    fn a_status_file_reads_as_the_kernel_wrote_it() {
        let id = Identity::parse(STATUS).unwrap();
        assert_eq!(id.ids, [0; 8]);
        assert_eq!(id.groups.0, 2);
        assert_eq!(id.caps[1], 0x1ff_ffff_ffff);
        assert!(!id.no_new_privs);
        assert_eq!(Identity::parse(b"Name:\tx\n"), None);
    }

    #[test]
    fn a_thread_without_capabilities_and_with_no_new_privs_is_not_wider() {
        let prog = Identity::parse(STATUS).unwrap();
        let ours = Identity {
            caps: [0; 5],
            no_new_privs: true,
            ..prog
        };
        assert_eq!(ours.wider_than(&prog), None);
        assert_eq!(prog.wider_than(&ours), Some(Wider::Capabilities));
        let dropped = Identity {
            ids: [65534; 8],
            ..prog
        };
        assert_eq!(ours.wider_than(&dropped), Some(Wider::Ids));
        let filtered = Identity {
            seccomp: (2, 1),
            no_new_privs: true,
            caps: [0; 5],
            ..prog
        };
        assert_eq!(ours.wider_than(&filtered), Some(Wider::Seccomp));
        let elsewhere = Identity {
            namespaces: [1, 0, 0, 0, 0, 0, 0, 0],
            ..prog
        };
        assert_eq!(ours.wider_than(&elsewhere), Some(Wider::Namespace));
    }

    #[test]
    fn this_thread_reads_itself() {
        let me = Identity::of(0).expect("/proc/thread-self/status");
        let main = Identity::of(std::process::id()).expect("the main thread's status");
        assert_eq!(me.ids, main.ids);
        assert_ne!(me.namespaces, [0; 8]);
    }
}
