//! `libprezero_preload.so`: pre-zeroed, populated memory for programs that
//! were never written for it. `prezero run -- PROGRAM` loads it with
//! `LD_PRELOAD`; it takes `malloc`, `calloc`, `realloc`, `free` and the
//! aligned entry points, serves requests of at least a threshold (1 MiB)
//! from a cache of large blocks, and hands everything else to the next
//! allocator (glibc's) untouched.
//!
//! glibc returns every block above its mmap threshold to the kernel on `free`,
//! and the next `calloc` of that size faults in fresh pages that the kernel
//! zeroes on the critical path, one 4 KiB page at a time. Here a freed block
//! stays mapped and populated; a scrubber thread clears it with streaming
//! stores while the CPU has room (as Linux's "Prezeroing V2" scrubd), so the
//! next `calloc` of that size finds it zero and its pages present.
//!
//! The preload's threads are guests in the program's process (`threads/`):
//! none before the first large block (unless memory ahead was asked for),
//! none left once nothing is held; never at `SCHED_IDLE`, so an exit never
//! waits for one; no capability, `no_new_privs`, and never less restricted
//! than the program's main thread (ids, groups, seccomp, namespaces): they
//! follow a change at once where the preload sees it, and end within
//! `threads::CHECK_MS` of one it cannot.
//!
//! # Contracts
//!
//! Every module keeps these; they are stated here once, and the modules
//! point here.
//!
//! * **No malloc.** The library runs inside `malloc`, `free` and the rest,
//!   and at exit with the heap in any state: nothing in it allocates
//!   through `malloc` (no `Box`, `Vec`, `String`, `format!` or `std::fs`;
//!   text is formatted into stack buffers, lists are fixed arrays in
//!   statics, files are read with `sys` into the caller's buffer). The
//!   exceptions, each off the allocation paths and outside the cache's
//!   lock: starting a thread (std's `pthread_create` allocates; its small
//!   blocks go to the next allocator), start-up's `dlsym` (served by the
//!   arena of `next.rs`), and the clearing kernels' choice, made once when
//!   the lazy mode starts (`prezero::active_size_classes`) so that the
//!   fault handler never makes it. The malloc family reaches the next
//!   allocator only through `dlsym(RTLD_NEXT)` (`next.rs`), never glibc's
//!   `__libc_*` names. `tests/preload/tools.rs` (`imports_no_allocator`)
//!   checks what the dynamic symbol table can show of this.
//! * **Async-signal safety.** A program may call some of the functions
//!   this library takes from a signal handler (`close`, `dup2`, the
//!   `set*id` calls) on a thread interrupted anywhere, inside this library
//!   too: they never wait for a lock the interrupted thread may hold. Every
//!   lock a program thread holds other than the cache's (`POP`, `PAUSE`) is
//!   held with its signals blocked, so no handler runs on a thread inside
//!   one; where a path must reach the cache's lock from such a call it only
//!   tries it (the scrubber's wake, `cache/mod.rs`). The preload's own
//!   threads run with every signal blocked (`threads::spawn`). The malloc
//!   family itself is no more async-signal-safe than glibc's.
//! * **Lock order.** Three locks live in statics (`prezero_sys::raw`'s `sync.rs`): the
//!   threads' `PAUSE` (`threads/mod.rs`), the lazy mode's `POP`
//!   (`lazy/mod.rs`) and the cache's lock (`cache/lock.rs`). `PAUSE` comes
//!   first: a stop holds it while its owners' hooks run, and under it the
//!   lazy mode's hand-over takes `POP` and the scrubber's wake tries the
//!   cache's lock; `PAUSE` is never taken with either of the others held,
//!   and a thread of ours never waits for it. `POP` and the cache's lock
//!   are never held together, in any order: the cache calls its hooks
//!   without its lock (`cache/hooks.rs`). Whoever holds `POP` touches no
//!   registered memory and takes no other lock (a fault there would wait
//!   on the handler, which waits on `POP`). Around `fork` only the cache's
//!   lock is held (`cache/fork.rs`); a child resets `POP` and `PAUSE`,
//!   which a thread of the parent's may have held.
//!
//! * `entry/`: every C symbol the library exports, and nothing else: the
//!   allocator's entry points and start-up (`mod.rs`), the calls that change
//!   who the program is, `set*id`, `unshare`, `setns` and `prctl`
//!   (`threads.rs`), `syscall(2)` (`syscall.rs`), the calls the lazy mode
//!   takes, `mmap` and its family, `close` and `dup2` and theirs, `mlock`
//!   and its (`lazy.rs`). What they do lives in the folders below.
//! * `blocks/`: which part of the reserved range is which block (pure): the
//!   model, the choice of a run, split and merge, the background work's
//!   Busy blocks.
//! * `next.rs`: the next allocator, and the arena that serves start-up.
//! * `cache/`: the cache itself: the lock (`mod.rs`), the entry points'
//!   large path (`requests.rs`), the range's mappings and the limits
//!   (`range.rs`), the scrubber (`scrubber.rs`), fork (`fork.rs`), and the
//!   hooks the lazy mode sets (`hooks.rs`).
//! * `nodes.rs`: the NUMA nodes, and which lane of the cache a request
//!   belongs to.
//! * `lazy/`: the lazy mode (`PREZERO_LAZY=1`): large blocks populated on
//!   their first touch by a fault handler that moves pre-zeroed huge pages
//!   in from a reserve, and the program's own large mappings with them.
//!   It uses the cache; the cache never names it, and reaches it only
//!   through the hooks it sets at start-up (`cache/hooks.rs`: the start at
//!   the first large block, `realloc`'s move, free memory given back): the
//!   two folders import in one direction only.
//! * `pressure/`: PSI, the memory cgroup's events (v2) or eventfds (v1),
//!   watched (`sources.rs` opens them): under pressure what is held ahead
//!   goes back, as each holder (the cache, the lazy mode) registered at
//!   start-up (`pressure::Hooks`).
//! * `threads/`: the preload's threads as guests: who they may be and when
//!   they follow the program (`guest.rs`), stopped around a call that
//!   changes who it is and started again after it (`stop.rs`; the calls
//!   themselves are `entry/threads.rs` and `entry/syscall.rs`), out of its
//!   way on the CPU (`polite.rs`). A registry: each owner of threads (the
//!   lazy mode, the cache, the pressure watcher) registers how its threads
//!   are woken and started again (`threads::Hooks`) before it starts one.
//! * `config.rs`: the `PREZERO_*` environment, as `prezero_sys::env`
//!   defines and reads it; `stats.rs`: the counters.
//! * `sys`: every call into libc, none of which allocates, is
//!   `prezero_sys::raw`, the allocation-free half of the workspace's OS
//!   layer (userfaultfd, pagemap, signal masks, the locks that live in
//!   statics, who a thread is, calls made past the functions this library
//!   interposes, the memory cgroup's files and room, `/proc/meminfo`, the
//!   THP mode, and the test build's injected failures).
//!
//! The modules are layers, each importing only those below it (no circle,
//! at file or folder level), and only what its row names
//! (`scripts/check-imports.py` checks every import against this table):
//!
//! ```text
//! entry/                              every exported symbol: all below
//! lazy/                               cache/ and below
//! cache/                              stats.rs and below, and blocks/
//! stats.rs                            pressure/ (its event count)
//! pressure/                           threads/, config.rs
//! config.rs, threads/, nodes.rs       nothing of the crate's (prezero_sys)
//! next.rs, blocks/ (pure)             nothing of the crate's
//! ```
//!
//! A lower layer reaches a higher one only through hooks the higher one
//! sets at start-up: the cache's (`cache/hooks.rs`, set by the lazy mode),
//! the threads' (`threads::Hooks`) and the pressure watcher's
//! (`pressure::Hooks`). Each is a static set at start-up and read with one
//! atomic load, without a lock; no hook allocates.
//!
//! Ownership is a range check: every block lives in one reserved address
//! range, so `free` knows in a comparison whether a pointer is ours.

// The test harness leaves out the entry points (it would allocate with
// them), so what only they use looks dead there.
#![cfg_attr(test, allow(dead_code))]

mod blocks;
mod cache;
mod config;
mod lazy;
mod next;
mod nodes;
mod pressure;
mod stats;
mod threads;

// The OS layer's allocation-free half: every call the preload makes into libc.
use prezero_sys::raw as sys;

#[cfg(not(test))]
mod entry;
