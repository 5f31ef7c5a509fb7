//! Memory from `prezero serve`: `pz_service_*`, with an opaque `pz_service` per
//! connection and a `pz_service_memory` per allocation.

use std::ffi::{c_char, c_int, c_void, CStr, OsStr};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;

use super::helpers::{
    free_handle, guard, guard_service, handle, into_handle, inval, not_null, write_opt,
};
use super::region::page_kind;
use prezero_service::{AllocOptions, Client, Error, NodeChoice, ServiceMemory, Source};

/// `pz_service_alloc` flag: fail rather than map local memory when the service
/// cannot serve.
pub const PZ_SERVICE_NO_FALLBACK: u32 = 1;
/// `pz_service_alloc_on` flag: when the node asked for has too little ready,
/// take another node's memory, nearest first (without it: local memory on
/// that node, unless `PZ_SERVICE_NO_FALLBACK`).
pub const PZ_SERVICE_OTHER_NODES: u32 = 2;
/// `pz_service_alloc_on` node: the caller's (the one node its memory policy
/// binds or prefers, else the one node of every CPU it may run on, else any).
pub const PZ_NODE_CALLER: i64 = -1;
/// `pz_service_alloc_on` node: whichever has memory ready.
pub const PZ_NODE_ANY: i64 = -2;
/// `pz_service_alloc` source: the memory came from `prezero serve`.
pub const PZ_SOURCE_SERVICE: c_int = 0;
/// `pz_service_alloc` source: local memory, mapped and populated here.
pub const PZ_SOURCE_LOCAL: c_int = 1;

/// A connection to `prezero serve` (opaque). Thread-safe: calls may be made from
/// any thread at once, except `pz_service_disconnect`, the last call on it (a
/// second one is `-EINVAL`).
pub struct PzService {
    client: Client,
}

/// Memory from `pz_service_alloc` (opaque), independent of the connection that
/// served it. Thread-safe: `pz_service_memory_ptr`, `pz_service_memory_len`
/// and `pz_service_segment` may be called from any thread at once;
/// `pz_service_free` must be the last call on it (a second one is `-EINVAL`). The
/// memory is the caller's to use, from any thread, until then.
pub struct PzServiceMemory {
    memory: ServiceMemory,
}

/// Connects to `prezero serve` at `path` (NULL: `$PREZERO_SOCKET`, else
/// `/run/prezero/prezero.sock`). On success `*out` is the connection; when no
/// service answers, `*out` is NULL and the return is connect(2)'s error
/// (`-ENOENT`, `-ECONNREFUSED`, `-EACCES`): `pz_service_alloc` with a NULL
/// connection still serves, locally.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL (refused) or
/// writable for a pointer.
#[no_mangle]
pub unsafe extern "C" fn pz_service_connect(
    path: *const c_char,
    out: *mut *mut PzService,
) -> c_int {
    guard_service(|| {
        not_null(out, "output pointer")?;
        // SAFETY: out is not NULL; the caller gave a writable slot.
        unsafe { out.write(std::ptr::null_mut()) };
        let client = if path.is_null() {
            Client::connect_default()?
        } else {
            // SAFETY: the caller passes a NUL-terminated string.
            let p = unsafe { CStr::from_ptr(path) };
            Client::connect(OsStr::from_bytes(p.to_bytes()))?
        };
        if let Some(errno) = client.connect_errno() {
            return Err(Error::Refused {
                errno,
                reason: "no service".into(),
            });
        }
        // SAFETY: as above.
        unsafe { out.write(into_handle(PzService { client })) };
        Ok(())
    })
}

/// `bytes` of zeroed, populated memory on `page` pages (`PZ_PAGE_HUGE_2M` or
/// `PZ_PAGE_HUGE_1G`) into a new `*out` (left unchanged on failure), whose
/// length is `bytes` rounded up to the page size. `*source_out` (if not NULL)
/// receives where it came from: `PZ_SOURCE_SERVICE`, or `PZ_SOURCE_LOCAL` when
/// the service is absent (`svc` NULL), refused, or had too little ready (local
/// memory falls to THP if hugetlb pages run short). With
/// `PZ_SERVICE_NO_FALLBACK`, the service's refusal is the error instead
/// (`-ENOMEM`: too little ready, `-EDQUOT`: over the uid's cap, `-EACCES`:
/// uid not allowed, `-ENOTCONN`: `svc` NULL). Free with `pz_service_free`.
///
/// # Safety
/// No other thread frees `svc` during the call (any pointer is checked first);
/// `out` is NULL (refused) or writable for a pointer; `source_out` is NULL or
/// writable for an `int`.
#[no_mangle]
pub unsafe extern "C" fn pz_service_alloc(
    svc: *const PzService,
    bytes: usize,
    page: c_int,
    flags: u32,
    out: *mut *mut PzServiceMemory,
    source_out: *mut c_int,
) -> c_int {
    // SAFETY: the caller's promises, which pz_service_alloc_on takes as they are.
    unsafe { pz_service_alloc_on(svc, bytes, page, PZ_NODE_CALLER, flags, out, source_out) }
}

/// `pz_service_alloc` on a NUMA node: `node` is a node id, `PZ_NODE_CALLER`
/// (what `pz_service_alloc` asks for) or `PZ_NODE_ANY`. The service's memory
/// is on that node (checked where it is mapped), else local memory placed
/// there, unless `PZ_SERVICE_OTHER_NODES` lets another node's serve.
/// `-EINVAL` also for a node that does not exist, is offline or has no
/// memory, for any other negative `node`, and for `PZ_SERVICE_OTHER_NODES`
/// with `PZ_NODE_ANY` (any node already).
///
/// # Safety
/// As `pz_service_alloc`.
#[no_mangle]
pub unsafe extern "C" fn pz_service_alloc_on(
    svc: *const PzService,
    bytes: usize,
    page: c_int,
    node: i64,
    flags: u32,
    out: *mut *mut PzServiceMemory,
    source_out: *mut c_int,
) -> c_int {
    guard_service(|| {
        not_null(out, "output pointer")?;
        if flags & !(PZ_SERVICE_NO_FALLBACK | PZ_SERVICE_OTHER_NODES) != 0 {
            return Err(inval("unknown flags").into());
        }
        let node = match node {
            PZ_NODE_CALLER => NodeChoice::Caller,
            PZ_NODE_ANY => NodeChoice::Any,
            n => NodeChoice::Node(u32::try_from(n).map_err(|_| inval("unknown node"))?),
        };
        let opts = AllocOptions {
            fallback: flags & PZ_SERVICE_NO_FALLBACK == 0,
            node,
            other_nodes: flags & PZ_SERVICE_OTHER_NODES != 0,
            ..AllocOptions::default()
        };
        let kind = page_kind(page)?;
        let local;
        let client = if svc.is_null() {
            local = Client::local("no connection (pz_service_alloc was given NULL)");
            &local
        } else {
            // SAFETY: handle() checks svc is a live connection; the caller promises no one frees it meanwhile.
            unsafe { &handle(svc, "connection")?.client }
        };
        let memory = client.alloc_with(bytes, kind, opts)?;
        let source = match memory.source() {
            Source::Service { .. } => PZ_SOURCE_SERVICE,
            Source::Local { .. } => PZ_SOURCE_LOCAL,
        };
        // SAFETY: source_out is NULL or writable (the caller's promise).
        unsafe { write_opt(source_out, source) };
        // SAFETY: out was checked non-NULL, and is writable (the caller's promise).
        unsafe { out.write(into_handle(PzServiceMemory { memory })) };
        Ok(())
    })
}

/// The NUMA node of service memory that was asked for on one, into `*out`:
/// `-ENOENT` when the memory names none (local memory, or memory asked for on
/// any node), `-EINVAL` for a NULL or dead handle or a NULL `out`.
///
/// # Safety
/// No other thread frees `mem` during the call (any pointer is checked
/// first); `out` is NULL (refused) or writable for a `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn pz_service_memory_node(
    mem: *const PzServiceMemory,
    out: *mut u32,
) -> c_int {
    guard_service(|| {
        not_null(out, "output pointer")?;
        // SAFETY: handle() checks mem is live; the caller promises no one frees it meanwhile.
        let m = unsafe { handle(mem, "service memory")? };
        match m.memory.source() {
            Source::Service { node: Some(n), .. } => {
                // SAFETY: checked non-NULL; the caller gave a writable slot.
                unsafe { out.write(*n) };
                Ok(())
            }
            _ => Err(Error::os(
                "pz_service_memory_node",
                std::io::Error::from_raw_os_error(libc::ENOENT),
            )),
        }
    })
}

/// The first byte of the memory; NULL for a NULL handle.
///
/// # Safety
/// No other thread frees `mem` during the call (any pointer is checked first).
#[no_mangle]
pub unsafe extern "C" fn pz_service_memory_ptr(mem: *const PzServiceMemory) -> *mut c_void {
    // SAFETY: NULL or live (the caller's promise).
    unsafe { handle(mem, "memory") }.map_or(std::ptr::null_mut(), |m| m.memory.as_ptr().cast())
}

/// The memory's length in bytes (the rounded size); 0 for a NULL handle.
///
/// # Safety
/// As `pz_service_memory_ptr`.
#[no_mangle]
pub unsafe extern "C" fn pz_service_memory_len(mem: *const PzServiceMemory) -> usize {
    // SAFETY: NULL or live (the caller's promise).
    unsafe { handle(mem, "memory") }.map_or(0, |m| m.memory.len())
}

/// The `index`th segment of the memory: its memfd (owned by the library until
/// `pz_service_free`; `dup` it to keep it), its offset in the memory and its
/// mapped length, e.g. for a vhost-user memory table. `-ENOENT` past the last
/// segment (local memory has none).
///
/// # Safety
/// No other thread frees `mem` during the call (any pointer is checked
/// first); each output is NULL (refused) or writable.
#[no_mangle]
pub unsafe extern "C" fn pz_service_segment(
    mem: *const PzServiceMemory,
    index: usize,
    fd_out: *mut c_int,
    offset_out: *mut usize,
    len_out: *mut usize,
) -> c_int {
    guard_service(|| {
        if fd_out.is_null() || offset_out.is_null() || len_out.is_null() {
            return Err(inval("NULL output pointer").into());
        }
        // SAFETY: NULL (refused) or live (the caller's promise).
        let m = unsafe { handle(mem, "memory")? };
        let segs = m.memory.segments();
        let s = segs.get(index).ok_or(Error::os(
            "pz_service_segment",
            std::io::Error::from_raw_os_error(libc::ENOENT),
        ))?;
        // SAFETY: checked non-NULL, and writable (the caller's promise).
        unsafe { fd_out.write(s.fd.as_raw_fd()) };
        // SAFETY: as for fd_out.
        unsafe { offset_out.write(s.offset) };
        // SAFETY: as for fd_out.
        unsafe { len_out.write(s.len) };
        Ok(())
    })
}

/// Unmaps the memory, gives service segments back and frees the handle. NULL
/// is `-EINVAL`. Works after `pz_service_disconnect` too.
///
/// # Safety
/// This is the last call on `mem` (no other call on it runs during or after
/// it; any pointer is checked first), and nothing touches the memory or its
/// segments' fds afterwards.
#[no_mangle]
pub unsafe extern "C" fn pz_service_free(mem: *mut PzServiceMemory) -> c_int {
    // SAFETY: the caller's promise, as documented.
    guard(|| unsafe { free_handle(mem, "memory") })
}

/// Closes the connection. Memory already allocated stays valid until
/// `pz_service_free`. NULL is `-EINVAL`.
///
/// # Safety
/// This is the last call on `svc` (no other call on it runs during or after
/// it; any pointer is checked first).
#[no_mangle]
pub unsafe extern "C" fn pz_service_disconnect(svc: *mut PzService) -> c_int {
    // SAFETY: the caller's promise, as documented.
    guard(|| unsafe { free_handle(svc, "connection") })
}
