#!/usr/bin/env bash
# Miri: undefined behaviour that a native run would not show.
# - The library's unsafe code that Miri can run: the portable clearing kernel
#   (clear::portable), the portable template copy and the register form of the
#   template fill over 8-byte words (template::portable, which drives
#   template/words.rs), a pool's chunks handed out as slices and raw pointers
#   (pool::tests, a pool built without CPUID, sysfs or scrubber threads), and
#   the C ABI's helpers (prezero-capi's helpers: pointer and length checks,
#   out-params, handles, the panic boundary).
# - The pure models: the pool's state machine (pool::state), the service's
#   ledger model (prezero-service's ledger::model) and the preload's block model
#   (prezero-preload's blocks).
# - The preload's cache lock (prezero-sys's raw::sync TagMutex: a futex word that says who
#   holds it) and the frees left for its next holder (cache::deferred): atomics
#   and futexes shared by threads.
# Not here: the SIMD and asm kernels and everything that picks a kernel (that
# takes CPUID, which is inline asm, as are rep stosb, movnti and clzero), and
# whatever asks the OS for more than an anonymous mmap. Miri is some thousand
# times slower than a native run, so the tests sweep fewer lengths and
# explorations go less deep under it (cfg(miri)).
# Needs a nightly toolchain with miri: without one, a line says why it was skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

skip() { echo "skipped: Miri ($1)"; exit 0; }
rustup toolchain list 2>/dev/null | grep -q '^nightly' || skip "no nightly toolchain"
if ! cargo +nightly miri --version >/dev/null 2>&1; then
  timeout 300 rustup component add miri --toolchain nightly >/dev/null 2>&1 \
    || skip "rustup could not add miri to the nightly toolchain"
fi
# Miri's own standard library, built once (it is kept in ~/.cache/miri).
cargo +nightly miri setup >/dev/null 2>&1 || skip "miri could not build its sysroot"

# The pool keeps its chunks' addresses as integers (its state is plain data)
# and turns them back into pointers: exposed provenance, which Miri accepts
# under this flag instead of warning.
MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-permissive-provenance" \
  cargo +nightly miri test -q -p prezero --lib -- \
  clear::portable template::portable pool::tests pool::state
cargo +nightly miri test -q -p prezero-service --lib -- ledger::model
# The C ABI's helpers.
cargo +nightly miri test -q -p prezero-capi --lib -- helpers
# The block tests leak their block lists on purpose: Blocks holds a `&'static mut`
# list, as the preload's own lists are mappings kept for the life of the process.
MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-ignore-leaks" \
  cargo +nightly miri test -q -p prezero-preload --lib -- blocks:: cache::deferred::
cargo +nightly miri test -q -p prezero-sys --lib -- raw::sync::
