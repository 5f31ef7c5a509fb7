//! The C entry points that take the place of the C library's allocator.
//! Large requests go to the cache; everything else, and anything the cache
//! cannot do, to the next allocator, so a failure in here costs the program
//! the speed-up, never a byte or a crash.
//!
//! Start-up: the first call resolves the next allocator (`dlsym`, which may
//! call `malloc` again: those calls, and calls from other threads meanwhile,
//! are served from a static arena), then reads the environment and reserves
//! the range; in the program `prezero run` executes, a constructor makes that
//! call when the library is loaded, so its prefill and lazy reserve fill
//! from then. Not in a test build: the test harness would allocate with it.
//!
//! These functions are the C library's allocator interface, so they name its
//! types and errno values (`libc::c_int`, `EINVAL`, `ENOMEM`); the calls they
//! make into libc, errno's set-up among them, go through `sys` like every
//! other file's.
//!
//! Every other C symbol the library exports is beside this file:
//! `threads.rs` (`set*id`, `unshare`, `setns`: `crate::threads`) and
//! `lazy.rs` (`mmap` and its family, the calls that close descriptors,
//! `mlock` and its family: `crate::lazy`).

/// The C library's function `$name` of type `$ty`, found once
/// (`dlsym(RTLD_NEXT)`); `None` where it has none. Before the modules
/// below, which use it.
macro_rules! next_fn {
    ($name:expr, $ty:ty) => {{
        static AT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut at = AT.load(std::sync::atomic::Ordering::Relaxed);
        if at == 0 {
            at = crate::sys::next_symbol($name).unwrap_or(0);
            AT.store(at, std::sync::atomic::Ordering::Relaxed);
        }
        // SAFETY: the next definition of the C function of that name, whose
        // signature the type states.
        (at != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(at) })
    }};
}

mod lazy;
mod syscall;
mod threads;

use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};

use crate::cache;
use crate::config::Config;
use crate::next::{self, Next};
use crate::stats::{self, Count};
use crate::sys::{self, set_errno};

const UNINIT: u8 = 0;
/// Finding the next allocator: only the arena serves.
const BOOTING: u8 = 1;
/// The next allocator serves everything (the cache could not start).
const FORWARD: u8 = 2;
/// The cache serves large requests.
const READY: u8 = 3;
/// No next allocator: only the arena (never seen with a dynamic libc).
const NONE: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// Requests of at least this many bytes are large: the cache's
/// (`Config::threshold`, `PREZERO_THRESHOLD`); none before start-up.
static LARGE_FROM: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Where small requests and frees of memory not ours go: our own slow paths
/// until start-up has found the next allocator, then its `malloc`, `calloc`,
/// `free` and `realloc` (the `memchr` crate's self-replacing pointer). After
/// start-up a program of small allocations pays a comparison or two and one
/// jump per call: no state to check, no NULL test. `free` and `realloc` stay
/// on the slow paths, which know the start-up arena, if the arena served any
/// call (see [`next::close_arena`]). Each pointer is stored with `Release`
/// and loaded with `Acquire` (see [`boot`]).
struct NextFns {
    /// A `next::Malloc`.
    malloc: AtomicPtr<()>,
    /// A `next::Calloc`.
    calloc: AtomicPtr<()>,
    /// A `next::Free`.
    free: AtomicPtr<()>,
    /// A `next::Realloc`.
    realloc: AtomicPtr<()>,
}

static NEXT_FNS: NextFns = NextFns {
    malloc: AtomicPtr::new(malloc_slow as *mut ()),
    calloc: AtomicPtr::new(calloc_slow as *mut ()),
    free: AtomicPtr::new(free_slow as *mut ()),
    realloc: AtomicPtr::new(realloc_slow as *mut ()),
};

struct NextCell(std::cell::UnsafeCell<Option<Next>>);
// SAFETY: written once by the booting thread before STATE leaves BOOTING
// (Release), read only after STATE says so (Acquire).
unsafe impl Sync for NextCell {}
static NEXT: NextCell = NextCell(std::cell::UnsafeCell::new(None));

/// The next allocator once known, and whether the cache serves.
#[inline]
fn state() -> (Option<&'static Next>, bool) {
    let mut s = STATE.load(Ordering::Acquire);
    if s == UNINIT
        && STATE
            .compare_exchange(UNINIT, BOOTING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    {
        s = boot();
    }
    match s {
        // SAFETY: NEXT was written before STATE became FORWARD or READY.
        FORWARD => (unsafe { (*NEXT.0.get()).as_ref() }, false),
        // SAFETY: as above.
        READY => (unsafe { (*NEXT.0.get()).as_ref() }, true),
        _ => (None, false),
    }
}

/// Start-up, if no call has made it yet: a program may map memory (the
/// lazy mode's `mmap`) before it allocates any.
#[inline]
pub fn boot_once() {
    let _ = state();
}

/// The program `prezero run` executes starts when it is loaded, not at its
/// first allocation: its prefill and its lazy reserve fill while it computes.
/// (A program that computed for 2 s before it mapped anything had filled no
/// reserve by then: its faults were served by copying zeroes.) Any other
/// process starts at its first call, as before.
#[used]
#[link_section = ".init_array"]
static START_AT_LOAD: extern "C" fn() = start_at_load;

extern "C" fn start_at_load() {
    // While the process has one thread: a registration racing another
    // thread's first stop could miss a fork between the two.
    crate::threads::at_load();
    if crate::config::is_program() {
        boot_once();
    }
}

// Once per process: kept out of the entry points' fast paths.
#[cold]
#[inline(never)]
fn boot() -> u8 {
    let Some(n) = next::resolve() else {
        STATE.store(NONE, Ordering::Release);
        return NONE;
    };
    // SAFETY: only this thread writes NEXT, before publishing STATE.
    unsafe { *NEXT.0.get() = Some(n) };
    STATE.store(FORWARD, Ordering::Release);
    // After STATE, so a thread still in the arena's allocation when it closes
    // finds the next allocator known.
    let arena_used = next::close_arena();
    // After STATE, Release (read with Acquire: plain loads on x86): a thread
    // that has taken one pointer's new value and still finds another's slow
    // path there finds the next allocator known when it gets there, so its
    // block is forwarded, not leaked.
    NEXT_FNS
        .malloc
        .store(n.malloc as *mut (), Ordering::Release);
    NEXT_FNS
        .calloc
        .store(n.calloc as *mut (), Ordering::Release);
    if !arena_used {
        NEXT_FNS.free.store(n.free as *mut (), Ordering::Release);
        NEXT_FNS
            .realloc
            .store(n.realloc as *mut (), Ordering::Release);
    }
    let cfg = Config::from_env();
    LARGE_FROM.store(cfg.threshold, Ordering::Relaxed);
    let started = cache::start(cfg);
    // After the cache, whose range it registers; its mappings need no cache.
    crate::lazy::configure(&cfg);
    if cfg.stats {
        sys::atexit(at_exit);
    }
    if cfg.lazy && cfg.program && cfg.history {
        sys::atexit(crate::lazy::history::record);
    }
    if !started {
        return FORWARD;
    }
    STATE.store(READY, Ordering::Release);
    READY
}

extern "C" fn at_exit() {
    stats::print();
    crate::lazy::stats::print();
}

/// A large block from the cache, else from the next allocator.
fn large(size: usize, align: usize, zeroed: bool, n: &Next) -> *mut c_void {
    let p = cache::alloc(size, align, zeroed);
    if !p.is_null() {
        return p;
    }
    stats::CACHE.add(Count::Fallbacks, 1);
    if zeroed {
        // SAFETY: the next allocator's own calloc, with valid arguments.
        unsafe { (n.calloc)(1, size) }
    } else if align <= 16 {
        // SAFETY: the next allocator's own malloc.
        unsafe { (n.malloc)(size) }
    } else {
        let mut out = std::ptr::null_mut();
        // SAFETY: the next allocator's own posix_memalign; `align` is a
        // power of two above 16 and `out` a local.
        match unsafe { (n.posix_memalign)(&mut out, align, size) } {
            0 => out,
            e => {
                set_errno(e);
                std::ptr::null_mut()
            }
        }
    }
}

fn wants_cache(size: usize) -> bool {
    size >= LARGE_FROM.load(Ordering::Relaxed)
}

/// # Safety
/// As C's `malloc`.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    if size < LARGE_FROM.load(Ordering::Relaxed) {
        let f = NEXT_FNS.malloc.load(Ordering::Acquire);
        // SAFETY: NEXT_FNS.malloc holds `malloc_slow` or the next allocator's
        // malloc, both of this signature.
        let f = unsafe { std::mem::transmute::<*mut (), next::Malloc>(f) };
        // SAFETY: either, with the caller's arguments.
        return unsafe { f(size) };
    }
    malloc_slow(size)
}

#[inline(never)]
extern "C" fn malloc_slow(size: usize) -> *mut c_void {
    match state() {
        (Some(n), true) if wants_cache(size) => large(size, 16, false, n),
        // SAFETY: forwarded with the caller's arguments.
        (Some(n), _) => unsafe { (n.malloc)(size) },
        // Closed: start-up has just found the next allocator.
        (None, _) => next::arena_alloc(size).unwrap_or_else(|| malloc_slow(size)),
    }
}

/// # Safety
/// As C's `calloc`.
#[no_mangle]
pub unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    if let Some(total) = count.checked_mul(size) {
        if total < LARGE_FROM.load(Ordering::Relaxed) {
            let f = NEXT_FNS.calloc.load(Ordering::Acquire);
            // SAFETY: NEXT_FNS.calloc holds `calloc_slow` or the next allocator's
            // calloc, both of this signature.
            let f = unsafe { std::mem::transmute::<*mut (), next::Calloc>(f) };
            // SAFETY: either, with the caller's arguments.
            return unsafe { f(count, size) };
        }
    }
    calloc_slow(count, size)
}

#[inline(never)]
extern "C" fn calloc_slow(count: usize, size: usize) -> *mut c_void {
    let Some(total) = count.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    match state() {
        (Some(n), true) if wants_cache(total) => large(total, 16, true, n),
        // SAFETY: forwarded with the caller's arguments.
        (Some(n), _) => unsafe { (n.calloc)(count, size) },
        // The arena is static and never reused: zero. Closed: start-up has
        // just found the next allocator.
        (None, _) => next::arena_alloc(total).unwrap_or_else(|| calloc_slow(count, size)),
    }
}

/// # Safety
/// As C's `free`.
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    let a = p as usize;
    if cache::owns(a) {
        return cache::free(a);
    }
    let f = NEXT_FNS.free.load(Ordering::Acquire);
    // SAFETY: NEXT_FNS.free holds `free_slow` or the next allocator's free, both
    // of this signature.
    let f = unsafe { std::mem::transmute::<*mut (), next::Free>(f) };
    // SAFETY: `p` is not the cache's, and the next allocator's free is there
    // only if the arena served nothing: so `p` is the next allocator's, NULL,
    // or the program's bug, as it would be without us.
    unsafe { f(p) }
}

/// `free` of memory not the cache's before start-up has found the next
/// allocator, or in a process whose start-up used the arena (whose memory is
/// never reused).
#[inline(never)]
extern "C" fn free_slow(p: *mut c_void) {
    if p.is_null() || next::in_arena(p as usize) {
        return;
    }
    if let (Some(n), _) = state() {
        // SAFETY: not ours: the next allocator's (or the program's bug, as
        // it would be without us).
        unsafe { (n.free)(p) }
    }
}

/// # Safety
/// As C's `realloc`.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    let a = p as usize;
    // Small, and not the cache's: the next allocator's business whatever `p`
    // is (NULL, or `size` 0, it answers as it would without us), unless the
    // arena's, which NEXT_FNS.realloc then knows (it is `realloc_slow`).
    if size < LARGE_FROM.load(Ordering::Relaxed) && !cache::owns(a) {
        let f = NEXT_FNS.realloc.load(Ordering::Acquire);
        // SAFETY: NEXT_FNS.realloc holds `realloc_slow` or the next allocator's
        // realloc, both of this signature.
        let f = unsafe { std::mem::transmute::<*mut (), next::Realloc>(f) };
        // SAFETY: the next allocator's only if no pointer is the arena's, and
        // `p` is not the cache's.
        return unsafe { f(p, size) };
    }
    realloc_slow(p, size)
}

#[inline(never)]
extern "C" fn realloc_slow(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        // SAFETY: as malloc.
        return unsafe { malloc(size) };
    }
    let a = p as usize;
    if size == 0 && !next::in_arena(a) {
        // glibc frees and returns NULL.
        // SAFETY: as free.
        unsafe { free(p) };
        return std::ptr::null_mut();
    }
    let (n, ready) = state();
    let copy_to_new = |old: usize| {
        // SAFETY: as malloc.
        let q = unsafe { malloc(size) };
        if !q.is_null() {
            // SAFETY: `p` holds at least `old` bytes, `q` at least `size`;
            // distinct allocations.
            unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), old.min(size)) };
            // SAFETY: as free.
            unsafe { free(p) };
        }
        q
    };
    if next::in_arena(a) {
        return copy_to_new(next::arena_size(a));
    }
    if cache::owns(a) {
        let large_from = LARGE_FROM.load(Ordering::Relaxed);
        return match cache::realloc(a, size, large_from) {
            Some(Ok(q)) => q,
            Some(Err(old)) => copy_to_new(old),
            None => {
                stats::CACHE.add(Count::BadFrees, 1);
                set_errno(libc::EINVAL);
                std::ptr::null_mut()
            }
        };
    }
    let Some(n) = n else {
        return std::ptr::null_mut();
    };
    if ready && wants_cache(size) {
        // Into the cache: from here on it grows without copying.
        // SAFETY: `p` is the next allocator's.
        let old = unsafe { (n.usable_size)(p) };
        return copy_to_new(old);
    }
    // SAFETY: forwarded with the caller's arguments.
    unsafe { (n.realloc)(p, size) }
}

/// # Safety
/// As C's `reallocarray`.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, count: usize, size: usize) -> *mut c_void {
    match count.checked_mul(size) {
        // SAFETY: as realloc.
        Some(total) => unsafe { realloc(p, total) },
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

/// `size` bytes aligned to `align` (a power of two, checked by the caller).
fn aligned(align: usize, size: usize) -> *mut c_void {
    match state() {
        (Some(n), true) if wants_cache(size) => large(size, align, false, n),
        (Some(n), _) => {
            let mut out = std::ptr::null_mut();
            let align = align.max(std::mem::size_of::<usize>());
            // SAFETY: the next allocator's posix_memalign with a valid alignment.
            match unsafe { (n.posix_memalign)(&mut out, align, size) } {
                0 => out,
                e => {
                    set_errno(e);
                    std::ptr::null_mut()
                }
            }
        }
        (None, _) if align <= 16 => next::arena_alloc(size).unwrap_or_else(|| aligned(align, size)),
        (None, _) => std::ptr::null_mut(),
    }
}

/// # Safety
/// As C's `posix_memalign`.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
) -> libc::c_int {
    if out.is_null() {
        return libc::EINVAL;
    }
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<usize>()) {
        return libc::EINVAL;
    }
    let p = aligned(align, size);
    // Size 0 too: glibc answers it with a unique pointer, so a NULL is a
    // failure (an alignment no one can honour), never a success.
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a writable pointer (checked non-NULL).
    unsafe { *out = p };
    0
}

/// # Safety
/// As C's `aligned_alloc`.
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        // Never the cache's: the next allocator answers as it would without
        // us (glibc 2.36 rounds the alignment up, 2.38 refuses with EINVAL).
        if let (
            Some(Next {
                aligned_alloc: Some(f),
                ..
            }),
            _,
        ) = state()
        {
            // SAFETY: forwarded with the caller's arguments.
            return unsafe { f(align, size) };
        }
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    aligned(align, size)
}

/// # Safety
/// As C's `memalign`.
#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    // glibc rounds a non-power-of-two alignment up.
    match align.checked_next_power_of_two() {
        Some(a) => aligned(a, size),
        None => {
            set_errno(libc::EINVAL);
            std::ptr::null_mut()
        }
    }
}

/// ENOSYS where the C library has no such function (it never does: the
/// program could not have been linked to it): `failed`, the call's failure.
fn missing<T>(failed: T) -> T {
    set_errno(libc::ENOSYS);
    failed
}

fn page() -> usize {
    sys::page_size()
}

/// # Safety
/// As C's `valloc`.
#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    aligned(page(), size)
}

/// # Safety
/// As C's `pvalloc`.
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    match size.max(1).checked_next_multiple_of(page()) {
        Some(s) => aligned(page(), s),
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

/// # Safety
/// As C's `malloc_usable_size`.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    let a = p as usize;
    if p.is_null() {
        return 0;
    }
    if next::in_arena(a) {
        return next::arena_size(a);
    }
    if cache::owns(a) {
        return cache::usable_size(a).unwrap_or(0);
    }
    match state() {
        // SAFETY: the next allocator's pointer.
        (Some(n), _) => unsafe { (n.usable_size)(p) },
        _ => 0,
    }
}
