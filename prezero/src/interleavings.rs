//! An exhaustive interleaving checker for models of the cross-thread protocols:
//! the pool's (`pool/interleavings.rs`) and the preload cache's (its
//! `cache/interleavings.rs`). loom's idea, run on a model instead of the code:
//! the real code makes system calls and waits with timeouts, which loom cannot
//! run, so each model is the real pure bookkeeping (`pool::state::State`, the
//! preload's `Blocks`) driven by threads written as steps of the real code.
//!
//! A model is the shared data and each thread's place in its program. A step is
//! what a thread does between two points where another thread may run: a whole
//! critical section (no other thread can see inside one, so running it at once
//! loses no interleaving), one atomic operation, one notify, the start or the end
//! of work on memory outside the lock. The checker runs every order of the
//! threads' steps to the end of their (finite) programs, each distinct state
//! once, and checks the model's invariant in every state and its end where no
//! thread can move (a thread blocked for good: a deadlock, or a wake-up lost).

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;

/// A protocol's threads over their shared data.
pub trait Model: Clone + Eq + Hash + Debug {
    /// How many threads there are.
    fn threads(&self) -> usize;

    /// The states thread `t`'s next step can lead to (more than one where the
    /// outcome is not the code's to choose: a system call failing, a timeout);
    /// none where it cannot move: finished, or blocked on a condition.
    fn steps(&self, t: usize) -> Vec<Self>;

    /// What must hold in every state: `Err` says what is broken.
    fn check(&self) -> Result<(), String>;

    /// What must hold where no thread can move: `Err` says who is stuck and why.
    fn end(&self) -> Result<(), String>;
}

/// Runs every interleaving of `start`'s threads and returns how many distinct
/// states they reach.
///
/// # Panics
/// Where a state breaks the invariant or an end is not allowed: with the
/// threads whose steps led there, in order, and the state.
pub fn explore<M: Model>(start: M) -> usize {
    let mut seen = HashSet::new();
    let mut path = Vec::new();
    visit(start, &mut seen, &mut path);
    seen.len()
}

fn visit<M: Model>(state: M, seen: &mut HashSet<M>, path: &mut Vec<usize>) {
    // Marked before its successors: a thread that loops comes back to it.
    if !seen.insert(state.clone()) {
        return;
    }
    if let Err(e) = state.check() {
        fail(&e, path, &state);
    }
    let mut moved = false;
    for t in 0..state.threads() {
        for next in state.steps(t) {
            moved = true;
            path.push(t);
            visit(next, seen, path);
            path.pop();
        }
    }
    if !moved {
        if let Err(e) = state.end() {
            fail(&e, path, &state);
        }
    }
}

fn fail(what: &str, path: &[usize], state: &impl Debug) -> ! {
    panic!("{what}\nafter the steps of threads {path:?}\nin {state:#?}")
}

/// For a model's test that it follows the code: panics unless `lines` appear
/// in this order in the item of `source` that starts at `item` (up to the `}`
/// at its indentation), as the model's steps take them.
pub fn in_order(source: &str, item: &str, lines: &[&str]) {
    let start = source.find(item).unwrap_or_else(|| panic!("no {item}"));
    let line_start = source[..start].rfind('\n').map_or(0, |i| i + 1);
    let indent = &source[line_start..start];
    let end = source[start..]
        .find(&format!("\n{indent}}}\n"))
        .map_or(source.len(), |i| start + i);
    let mut at = start;
    for line in lines {
        match source[at..end].find(line) {
            Some(i) => at += i + line.len(),
            None => {
                panic!("{item}: `{line}` is not where the model has it (after the lines before it)")
            }
        }
    }
}
