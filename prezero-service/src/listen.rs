//! The daemon's listening socket: a daemon already serving the path is
//! refused, a stale socket file replaced, the directory checked private, and
//! the file opened, by mode or ACL, to exactly the uids and groups allowed.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use super::client::connect_socket;
use super::log;
use crate::{Error, Result};
use prezero_sys::{self as sys, UnixAddr};

/// How long the start-up check waits for a daemon already on the socket.
const LIVE_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// A daemon already answering at `path` is an error, and so is one whose
/// backlog is full (it is alive, only busy or stopped); a stale socket file is
/// not.
pub(super) fn refuse_if_served(path: &Path) -> Result<()> {
    if !path.exists() {
        return Ok(());
    }
    match connect_socket(path, LIVE_CHECK_TIMEOUT) {
        Ok(_) => Err(Error::invalid(format!(
            "{} is served by a running daemon",
            path.display()
        ))),
        Err(e) if e.kind() == io::ErrorKind::TimedOut => Err(Error::invalid(format!(
            "{} is served by a running daemon that accepts no connection (its backlog \
             stayed full for {} s)",
            path.display(),
            LIVE_CHECK_TIMEOUT.as_secs()
        ))),
        Err(_) => Ok(()),
    }
}

/// The directory `path` (a socket or the ledger) lies in.
pub(super) fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// The socket's directory, before the daemon does anything else: made if
/// it is missing and its parent exists (owned by this process's uid, mode
/// 0755 so that clients of other uids reach the socket: said in the log),
/// refused if its parent is missing too (a path mistyped is not created as
/// root); then checked private.
pub(super) fn prepare_dir(path: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let dir = dir_of(path);
    if !dir.exists() {
        let parent = dir_of(dir);
        if !parent.is_dir() {
            return Err(Error::invalid(format!(
                "the socket directory {} does not exist, nor does {}: make it first (the \
                 systemd unit has RuntimeDirectory=prezero for /run/prezero)",
                dir.display(),
                parent.display()
            )));
        }
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(dir)
            .map_err(|e| Error::os("create the socket directory", e))?;
        // Whatever the umask took away.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::os("set the socket directory's mode", e))?;
        log(&format!(
            "made the socket directory {} (owner uid {}, mode 0755)",
            dir.display(),
            sys::geteuid()
        ));
    }
    check_private_dir(dir)
}

/// Creates the listening socket in the directory [`prepare_dir`] made ready:
/// a stale socket file replaced, a live one refused. The file starts at mode
/// 0600 and [`restrict_socket`] opens it to the allowed uids and groups.
pub(super) fn bind(path: &Path) -> Result<OwnedFd> {
    let addr = UnixAddr::new(path).map_err(|e| Error::invalid(e.to_string()))?;
    check_private_dir(dir_of(path))?;
    if path.exists() {
        refuse_if_served(path)?;
        std::fs::remove_file(path).map_err(|e| Error::os("remove stale socket", e))?;
    }
    let sock = sys::seqpacket_socket(libc::SOCK_NONBLOCK).map_err(|e| Error::os("socket", e))?;
    // The socket file is created with mode 0777 & ~umask: nobody else may
    // connect before its permissions are set.
    let old = sys::umask(0o177);
    let bound = sys::bind(sock.as_fd(), &addr);
    sys::umask(old);
    bound.map_err(|e| Error::os("bind", e))?;
    sys::listen(sock.as_fd()).map_err(|e| Error::os("listen", e))?;
    Ok(sock)
}

/// The socket's directory must be the daemon's (or root's), and others may
/// not write to it unless it is sticky: else another user could swap the
/// socket or the ledger for a link between their creation and their use.
fn check_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(dir).map_err(|e| Error::os("stat the socket directory", e))?;
    let me = sys::geteuid();
    let shared = md.mode() & 0o022 != 0 && md.mode() & 0o1000 == 0;
    if (md.uid() != me && md.uid() != 0) || shared {
        return Err(Error::invalid(format!(
            "the socket directory {} must belong to uid {me} or root and not be writable by \
             others (unless sticky): another user could replace the socket or the ledger",
            dir.display()
        )));
    }
    Ok(())
}

/// Lets exactly root, the daemon's uid, `uids` and members of `gids` connect:
/// the kernel checks write permission on the socket file at connect(2), so a
/// uid that may not use the service cannot even fill the listen backlog. The
/// file stays 0600 with a POSIX ACL (`system.posix_acl_access`) naming the
/// others; where the file system has no ACLs and others are allowed, it falls
/// back to mode 0666 (and `SO_PEERCRED` alone decides), which it logs.
pub(super) fn restrict_socket(path: &Path, uids: &[u32], gids: &[u32]) {
    if uids.is_empty() && gids.is_empty() {
        return;
    }
    const USER_OBJ: u16 = 0x01;
    const USER: u16 = 0x02;
    const GROUP_OBJ: u16 = 0x04;
    const GROUP: u16 = 0x08;
    const MASK: u16 = 0x10;
    const OTHER: u16 = 0x20;
    const RW: u16 = 6;
    const NO_ID: u32 = u32::MAX;
    let mut entries = vec![(USER_OBJ, RW, NO_ID)];
    let mut uids = uids.to_vec();
    uids.sort_unstable();
    uids.dedup();
    let mut gids = gids.to_vec();
    gids.sort_unstable();
    gids.dedup();
    entries.extend(uids.iter().map(|&u| (USER, RW, u)));
    entries.push((GROUP_OBJ, 0, NO_ID));
    entries.extend(gids.iter().map(|&g| (GROUP, RW, g)));
    entries.push((MASK, RW, NO_ID));
    entries.push((OTHER, 0, NO_ID));
    // The xattr format of <linux/posix_acl_xattr.h>: version 2, then entries.
    let mut blob = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        blob.extend(tag.to_le_bytes());
        blob.extend(perm.to_le_bytes());
        blob.extend(id.to_le_bytes());
    }
    let Err(e) = sys::lsetxattr(path, c"system.posix_acl_access", &blob) else {
        return;
    };
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666));
    log(&format!(
        "cannot set an ACL on {} ({e}): mode 0666, and peer credentials alone decide who is served",
        path.display()
    ));
}
