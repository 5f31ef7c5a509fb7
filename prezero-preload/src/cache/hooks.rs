//! What the lazy mode does at three points of the cache's work, reached
//! through hooks it sets once at start-up: the lazy mode uses the cache,
//! and the cache never names it. With no hooks set (the lazy mode was not
//! asked for, or has not been configured yet) the cache does the plain
//! thing.
//!
//! The contract, which every hook keeps and the cache relies on:
//!
//! * Locks (the crate's lock order: `lib.rs`): the cache calls a hook
//!   without its lock held, and a hook never takes the cache's lock; what the cache passes into a hook (the plain
//!   move's `again`) takes none of the cache's either. A lock a hook holds
//!   (the lazy mode's `POP`, which its `realloc_move` holds across the plain
//!   move) and the cache's lock are never held together, in any order.
//! * Memory: a hook allocates nothing through malloc (the crate's
//!   contract, `lib.rs`: it runs inside
//!   `malloc`, `realloc` and `free`; the lazy mode's start, in
//!   `before_alloc`, makes its threads through the preload's own thread
//!   layer), and touches no block of the cache's but those it is given, as
//!   it says below.
//! * Signals and fork: a hook is safe where its caller is, as the code it
//!   replaced was; one blocks what it must itself (the lazy mode blocks a
//!   program thread's signals while it holds `POP`). The hooks stay set in
//!   a forked child, which runs without the lazy mode: each hook of the
//!   lazy mode's does the plain thing there.
//! * Set once per process, before the cache serves the program (the entry
//!   points' start-up); read with one atomic load, no lock.

use std::sync::OnceLock;

/// How a block that the cache's `realloc` moves reached its new place.
pub enum Moved {
    /// The new block holds the bytes, the old one has no pages left;
    /// `remapped`: the old one is a fresh mapping, without its lane's
    /// advice and memory policy.
    Emptied { remapped: bool },
    /// The new block holds the bytes, the old one may still hold some of
    /// its pages: freed as any block.
    Filled,
    /// Part of the new block is another mapping now (`sys::NotMoved::Lost`):
    /// it stays in use for ever, and the caller copies to the next allocator.
    Lost,
    /// Nothing the caller can use moved: it copies the bytes.
    Copy,
}

/// The hooks (see the contract above).
pub struct Hooks {
    /// Before the cache hands a block to the program (`alloc`), on the
    /// calling thread: the lazy mode starts with the process's first large
    /// block, before any of its pages is touched.
    pub before_alloc: fn(),
    /// `realloc` moves the program's block `[p, p + old)` to the block at
    /// `q` just granted to the same caller (`old` bytes at least, in the
    /// same lane): both blocks are the caller's, the new one with no bytes
    /// of the program's yet. The hook moves the pages itself or calls
    /// [`super::move_plain`] for the plain move, and says how they went;
    /// the cache then frees or copies as [`Moved`] says. The lazy mode
    /// holds `POP` from before the move to after the range's mappings are
    /// registered again (`lazy/realloc.rs`).
    pub realloc_move: fn(p: usize, old: usize, q: usize) -> Moved,
    /// The cache is about to drop the pages of the free block
    /// `[start, start + len)` (the cap, idle, pressure): its bytes are
    /// no one's, and the block is Busy (no one else touches it) until the
    /// cache has dropped them. The lazy mode moves its whole huge pages
    /// into its reserve first.
    pub releasing: fn(start: usize, len: usize),
}

static HOOKS: OnceLock<Hooks> = OnceLock::new();

/// Sets the hooks, once: a second call changes nothing.
pub fn set_hooks(h: Hooks) {
    let _ = HOOKS.set(h);
}

/// The hooks, if set.
pub(super) fn hooks() -> Option<&'static Hooks> {
    HOOKS.get()
}
