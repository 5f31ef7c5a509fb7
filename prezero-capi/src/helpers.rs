//! What every area of the C ABI shares: the panic boundary, and turning C's
//! pointers, sizes and handles into Rust values or error codes.

use std::any::TypeId;
use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::RwLock;

use prezero::{Error, Result};

/// Runs `f` behind the panic boundary, turning its `Result` into a return code.
pub(super) fn guard(f: impl FnOnce() -> Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => -e.errno(),
        Err(_) => -libc::ENOTRECOVERABLE,
    }
}

/// [`guard`] for the calls that ask `prezero serve`, whose errors are the
/// service's (a refusal carries the daemon's errno).
pub(super) fn guard_service(f: impl FnOnce() -> prezero_service::Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => -e.errno(),
        Err(_) => -libc::ENOTRECOVERABLE,
    }
}

pub(super) fn inval(msg: &str) -> Error {
    Error::invalid(msg)
}

/// NULL is an error: for the pointers a call cannot do without.
pub(super) fn not_null<T>(p: *const T, what: &str) -> Result<()> {
    if p.is_null() {
        return Err(inval(&format!("NULL {what}")));
    }
    Ok(())
}

/// Writes `value` to an optional output: NULL skips it.
///
/// # Safety
/// `out` is NULL or writable for a `T`.
pub(super) unsafe fn write_opt<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: not NULL, so writable (the caller's promise).
        unsafe { out.write(value) };
    }
}

/// A writable `(ptr, len)` from C as a slice: NULL is an error unless `len == 0`;
/// a range that wraps the address space or exceeds `isize::MAX` is an error.
///
/// # Safety
/// `[ptr, ptr + len)` is writable and nothing else accesses it while the slice
/// lives (the C caller's promise, as for `memset`).
pub(super) unsafe fn bytes_mut<'a>(ptr: *mut c_void, len: usize) -> Result<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    not_null(ptr, "pointer")?;
    if len > isize::MAX as usize || (ptr as usize).checked_add(len).is_none() {
        return Err(inval("size overflows the address space"));
    }
    // SAFETY: the caller promises [ptr, ptr+len) is valid and unaliased.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr.cast(), len) })
}

/// A readable `(ptr, len)` from C as a slice, checked as [`bytes_mut`].
///
/// # Safety
/// `[ptr, ptr + len)` is readable and nothing writes it while the slice lives.
pub(super) unsafe fn bytes<'a>(ptr: *const c_void, len: usize) -> Result<&'a [u8]> {
    // SAFETY: as bytes_mut; the slice is only read.
    unsafe { bytes_mut(ptr.cast_mut(), len).map(|b| &*b) }
}

/// NUMA node ids from C: `(nodes, n)` as a slice; NULL or `n == 0` is an
/// error (a call given nodes needs one), as is a count no array could hold.
///
/// # Safety
/// `nodes` is NULL or readable for `n` ids.
pub(super) unsafe fn node_ids<'a>(nodes: *const u32, n: usize) -> Result<&'a [u32]> {
    not_null(nodes, "node array")?;
    if n == 0 || n > isize::MAX as usize / 4 {
        return Err(inval("a node count of 0, or more than an array holds"));
    }
    // SAFETY: not NULL, and readable for n ids (the caller's promise).
    Ok(unsafe { std::slice::from_raw_parts(nodes, n) })
}

/// A caller's versioned struct (its first field is `size_t struct_size`): not
/// NULL, and of the size this library was built with.
///
/// # Safety
/// `p` is NULL or readable for at least a `size_t`.
pub(super) unsafe fn versioned<T>(p: *const T, name: &str) -> Result<()> {
    not_null(p, "argument")?;
    // SAFETY: not NULL, and every versioned struct begins with its size as a size_t.
    if unsafe { p.cast::<usize>().read() } != std::mem::size_of::<T>() {
        return Err(Error::invalid(format!(
            "unknown {name}.struct_size (set it to sizeof({name}))"
        )));
    }
    Ok(())
}

/// Every live handle: its address and the type behind it. A handle C passes
/// is looked up here before it is dereferenced, so one freed already, one of
/// another type, or any other pointer is `-EINVAL`, never undefined
/// behaviour. (What the registry cannot catch: a handle freed by one thread
/// while another uses it, which the header forbids, and a freed handle whose
/// address a new handle of the same type has taken, as a closed fd's number
/// comes back.) A read lock per call:
/// calls on live handles from many threads do not wait for each other.
static LIVE: RwLock<BTreeMap<usize, TypeId>> = RwLock::new(BTreeMap::new());

fn is_live<T: 'static>(h: *const T) -> bool {
    let live = LIVE.read().unwrap_or_else(|e| e.into_inner());
    live.get(&(h as usize)) == Some(&TypeId::of::<T>())
}

fn not_live(what: &str) -> Error {
    inval(&format!("not a live {what} (freed already, or never one)"))
}

/// Hands `value` to C as an opaque handle, owned by the caller until the one
/// call that frees it ([`free_handle`]).
pub(super) fn into_handle<T: 'static>(value: T) -> *mut T {
    let h = Box::into_raw(Box::new(value));
    let mut live = LIVE.write().unwrap_or_else(|e| e.into_inner());
    live.insert(h as usize, TypeId::of::<T>());
    h
}

/// A live handle as a shared reference: NULL, a freed handle, a handle of
/// another type and any other pointer are errors.
///
/// # Safety
/// No other thread frees `h` while the reference lives (the C caller's
/// promise: a handle's free is its last call).
pub(super) unsafe fn handle<'a, T: 'static>(h: *const T, what: &str) -> Result<&'a T> {
    not_null(h, what)?;
    if !is_live(h) {
        return Err(not_live(what));
    }
    // SAFETY: registered by into_handle (a live Box of T) and not freed since;
    // shared access only.
    Ok(unsafe { &*h })
}

/// Takes a handle back from C and drops what it holds: NULL, a handle freed
/// already and anything else not live are errors.
///
/// # Safety
/// No other call on the handle runs during or after this one.
pub(super) unsafe fn free_handle<T: 'static>(h: *mut T, what: &str) -> Result<()> {
    not_null(h, what)?;
    let removed = {
        let mut live = LIVE.write().unwrap_or_else(|e| e.into_inner());
        match live.get(&(h as usize)) {
            Some(t) if *t == TypeId::of::<T>() => live.remove(&(h as usize)).is_some(),
            _ => false,
        }
    };
    if !removed {
        return Err(not_live(what));
    }
    // SAFETY: from Box::into_raw in into_handle, and just taken out of the
    // registry by this call alone, so dropped once.
    drop(unsafe { Box::from_raw(h) });
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::ptr::{null, null_mut, without_provenance, without_provenance_mut};

    use super::*;

    #[test]
    fn guard_turns_results_and_panics_into_codes() {
        assert_eq!(guard(|| Ok(())), 0);
        assert_eq!(guard(|| Err(inval("no"))), -libc::EINVAL);
        assert_eq!(
            guard(|| panic!("inside the boundary")),
            -libc::ENOTRECOVERABLE
        );
    }

    #[test]
    fn write_opt_writes_only_through_a_pointer() {
        let mut out = 0u64;
        // SAFETY: NULL, then a live u64.
        unsafe { write_opt(null_mut(), 7u64) };
        // SAFETY: a live u64, borrowed by nothing else.
        unsafe { write_opt(&mut out, 9u64) };
        assert_eq!(out, 9);
    }

    #[test]
    fn byte_ranges_are_checked_before_any_slice_is_made() {
        let mut buf = [1u8; 16];
        let p = buf.as_mut_ptr().cast::<c_void>();
        // SAFETY: every range below is NULL with no length, one no slice can
        // cover (refused before any slice is made), or `buf`'s own bytes.
        let checked = |p, len| unsafe { bytes_mut(p, len) }.map(|b| b.len());
        assert_eq!(checked(null_mut(), 0).unwrap(), 0);
        assert!(checked(null_mut(), 1).is_err());
        let top = without_provenance_mut::<c_void>(usize::MAX - 3);
        assert!(checked(top, 8).is_err(), "wraps the address space");
        assert!(checked(without_provenance_mut(8), usize::MAX / 2 + 1).is_err());
        // SAFETY: `buf`'s bytes, borrowed by nothing else.
        unsafe { bytes_mut(p, 16) }.unwrap()[15] = 0;
        // SAFETY: NULL with no length.
        assert!(unsafe { bytes(null(), 0) }.unwrap().is_empty());
        // SAFETY: NULL, refused before any slice is made.
        assert!(unsafe { bytes(null(), 1) }.is_err());
        // SAFETY: `buf`'s bytes, written by nothing while `b` lives.
        let b = unsafe { bytes(p, 16) }.unwrap();
        assert_eq!((b.len(), b[0], b[15]), (16, 1, 0));
    }

    #[test]
    fn node_ids_want_some_and_no_more_than_an_array_holds() {
        let nodes = [0u32, 2];
        // SAFETY: NULL, or `nodes` with lengths refused before any read, or its own.
        let checked = |p, n| unsafe { node_ids(p, n) }.map(<[u32]>::to_vec);
        assert!(checked(null(), 1).is_err());
        assert!(checked(nodes.as_ptr(), 0).is_err());
        assert!(checked(nodes.as_ptr(), isize::MAX as usize / 4 + 1).is_err());
        assert_eq!(checked(nodes.as_ptr(), 2).unwrap(), nodes);
    }

    #[test]
    fn versioned_structs_are_read_by_their_size_field() {
        #[repr(C)]
        struct Args {
            struct_size: usize,
            value: u32,
        }
        let mut a = Args {
            struct_size: std::mem::size_of::<Args>(),
            value: 3,
        };
        // SAFETY: NULL, or a live Args whose first field is its size.
        let checked = |p: *const Args| unsafe { versioned(p, "args") };
        assert!(checked(null()).is_err());
        assert!(checked(&a).is_ok());
        a.struct_size -= 1;
        assert!(checked(&a).is_err());
        assert_eq!(a.value, 3);
    }

    #[test]
    fn handles_are_looked_up_before_use_and_freed_once() {
        let h = into_handle(41u32);
        // SAFETY: the handle from into_handle, used and freed on this thread
        // only; the other pointers are refused before any dereference.
        let get = |p: *const u32| unsafe { handle(p, "counter") }.copied();
        // SAFETY: as `get`.
        let free = |p: *mut u32| unsafe { free_handle(p, "counter") };
        assert_eq!(get(h).unwrap(), 41);
        // SAFETY: a u32 handle asked for as a u64: refused before any dereference.
        assert!(unsafe { handle::<u64>(h.cast(), "other") }.is_err());
        // SAFETY: as above, for its free.
        assert!(unsafe { free_handle::<u64>(h.cast(), "other") }.is_err());
        assert!(get(null()).is_err());
        assert!(get(without_provenance(64)).is_err());
        free(h).unwrap();
        assert!(get(h).is_err(), "freed");
        assert!(free(h).is_err(), "freed twice");
    }
}
