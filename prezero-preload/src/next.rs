//! The allocator we stand in front of (glibc's, or whatever is next in the
//! lookup order), found with `dlsym(RTLD_NEXT)`, and a bump arena that
//! serves the calls made before it is found (`dlsym` itself may allocate).

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::sys;

/// C's `malloc`.
pub type Malloc = unsafe extern "C" fn(usize) -> *mut c_void;
/// C's `free`.
pub type Free = unsafe extern "C" fn(*mut c_void);
/// C's `realloc`.
pub type Realloc = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
/// C's `calloc`.
pub type Calloc = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type PosixMemalign = unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> libc::c_int;
type UsableSize = unsafe extern "C" fn(*mut c_void) -> usize;
type AlignedAlloc = unsafe extern "C" fn(usize, usize) -> *mut c_void;

/// The next allocator's entry points.
#[derive(Clone, Copy)]
pub struct Next {
    /// Its `malloc`.
    pub malloc: Malloc,
    /// Its `free`.
    pub free: Free,
    /// Its `calloc`.
    pub calloc: Calloc,
    /// Its `realloc`.
    pub realloc: Realloc,
    /// Its `posix_memalign`: every aligned request the cache does not take.
    pub posix_memalign: PosixMemalign,
    /// Its `malloc_usable_size`.
    pub usable_size: UsableSize,
    /// Only for alignments that are not a power of two, whose treatment
    /// differs between C library versions (glibc before 2.38 rounds them up
    /// as memalign does, later ones fail with EINVAL): its own answer.
    pub aligned_alloc: Option<AlignedAlloc>,
}

/// Resolves every entry point, or none (`aligned_alloc` is optional).
pub fn resolve() -> Option<Next> {
    let (m, f, c, r, pm, us) = (
        sys::next_symbol(c"malloc")?,
        sys::next_symbol(c"free")?,
        sys::next_symbol(c"calloc")?,
        sys::next_symbol(c"realloc")?,
        sys::next_symbol(c"posix_memalign")?,
        sys::next_symbol(c"malloc_usable_size")?,
    );
    let aa = sys::next_symbol(c"aligned_alloc");
    // SAFETY: the address is the next definition of the C function of that
    // name, whose signature the type states (so for each below).
    let malloc = unsafe { std::mem::transmute::<usize, Malloc>(m) };
    // SAFETY: as for malloc.
    let free = unsafe { std::mem::transmute::<usize, Free>(f) };
    // SAFETY: as for malloc.
    let calloc = unsafe { std::mem::transmute::<usize, Calloc>(c) };
    // SAFETY: as for malloc.
    let realloc = unsafe { std::mem::transmute::<usize, Realloc>(r) };
    // SAFETY: as for malloc.
    let posix_memalign = unsafe { std::mem::transmute::<usize, PosixMemalign>(pm) };
    // SAFETY: as for malloc.
    let usable_size = unsafe { std::mem::transmute::<usize, UsableSize>(us) };
    // SAFETY: as for malloc.
    let aligned_alloc = aa.map(|a| unsafe { std::mem::transmute::<usize, AlignedAlloc>(a) });
    Some(Next {
        malloc,
        free,
        calloc,
        realloc,
        posix_memalign,
        usable_size,
        aligned_alloc,
    })
}

/// Bytes of the bump arena: what `dlsym` and the start-up ask for is small.
const ARENA: usize = 256 << 10;

#[repr(C, align(64))]
struct Arena([u8; ARENA]);

static mut BOOT: Arena = Arena([0; ARENA]);
/// Bytes handed out, and [`CLOSED`] once start-up has found the next
/// allocator: one atomic, so a thread that allocated from the arena before the
/// close is seen by [`close_arena`], and none allocates after it.
static BOOT_USED: AtomicUsize = AtomicUsize::new(0);
const CLOSED: usize = 1 << (usize::BITS - 1);

/// Each arena allocation is preceded by its size, for `realloc` and
/// `malloc_usable_size`.
const HEADER: usize = 16;

fn arena_base() -> usize {
    // Only the address: the bytes are handed out below, each range to one caller.
    std::ptr::addr_of_mut!(BOOT) as usize
}

/// Whether `p` came from the arena (its memory is never given back).
#[inline]
pub fn in_arena(p: usize) -> bool {
    p.wrapping_sub(arena_base()) < ARENA
}

/// `size` bytes (zero: the arena is static and never reused), aligned to 16,
/// or null with `ENOMEM` when the arena is spent; `None` once it is closed
/// (the next allocator is known then: ask it).
pub fn arena_alloc(size: usize) -> Option<*mut c_void> {
    let spent = || {
        sys::set_errno(libc::ENOMEM);
        Some(std::ptr::null_mut())
    };
    let Some(need) = size
        .checked_next_multiple_of(16)
        .and_then(|s| s.checked_add(HEADER))
    else {
        return spent();
    };
    let mut at = BOOT_USED.load(Ordering::Acquire);
    loop {
        if at & CLOSED != 0 {
            return None;
        }
        // Not `at + need`, which a size near usize::MAX wraps round to a
        // small number: while open, at <= ARENA.
        if need > ARENA - at {
            return spent();
        }
        match BOOT_USED.compare_exchange_weak(at, at + need, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => break,
            Err(now) => at = now,
        }
    }
    let p = arena_base() + at;
    // SAFETY: [p, p + need) was reserved for this call alone by the exchange.
    unsafe { (p as *mut usize).write(size) };
    Some((p + HEADER) as *mut c_void)
}

/// Ends the arena's allocations (called once the next allocator is known) and
/// tells whether it made any: if none, no pointer the program holds can be the
/// arena's, and `free` and `realloc` need not ask.
pub fn close_arena() -> bool {
    BOOT_USED.fetch_or(CLOSED, Ordering::AcqRel) != 0
}

/// The size an arena allocation was made with.
pub fn arena_size(p: usize) -> usize {
    // SAFETY: `p` came from `arena_alloc`, which wrote the size before it.
    unsafe { ((p - HEADER) as *const usize).read() }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The only test of the arena: closing it is for the life of the process.
    #[test]
    fn the_arena_serves_until_closed_and_tells_whether_it_served() {
        let p = arena_alloc(24).expect("open").cast::<u8>();
        assert!(in_arena(p as usize) && (p as usize).is_multiple_of(16));
        assert_eq!(arena_size(p as usize), 24);
        // SAFETY: 24 bytes just handed out, zero as the arena promises.
        assert!(unsafe { std::slice::from_raw_parts(p, 24) }
            .iter()
            .all(|&b| b == 0));
        assert_eq!(
            arena_alloc(usize::MAX),
            Some(std::ptr::null_mut()),
            "an impossible size"
        );
        // One whose header fits but whose end wraps round from where the arena is.
        assert_eq!(arena_alloc(usize::MAX - 63), Some(std::ptr::null_mut()));
        assert_eq!(
            arena_alloc(ARENA),
            Some(std::ptr::null_mut()),
            "more than is left"
        );
        let q = arena_alloc(8).expect("open").cast::<u8>();
        assert!(
            q as usize >= p as usize + 24 + HEADER,
            "nothing handed out twice"
        );
        assert!(close_arena(), "it served two calls");
        assert_eq!(arena_alloc(8), None, "closed");
        assert!(in_arena(p as usize), "its pointers stay its own");
    }
}
