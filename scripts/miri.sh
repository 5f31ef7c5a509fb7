#!/usr/bin/env bash
# Miri over the pure models, where undefined behaviour would not show in a native
# run: the pool's state machine (prezero/src/pool/state.rs), the service's ledger
# model (prezero-service/src/ledger/) and the preload's block model
# (prezero-preload/src/blocks/). Miri is some thousand times slower than a native
# run, so their explorations go less deep under it (cfg(miri) in each test).
# Needs a nightly toolchain with miri: without one, a line says why it was skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

skip() { echo "skipped: Miri over the pure models ($1)"; exit 0; }
rustup toolchain list 2>/dev/null | grep -q '^nightly' || skip "no nightly toolchain"
if ! cargo +nightly miri --version >/dev/null 2>&1; then
  timeout 300 rustup component add miri --toolchain nightly >/dev/null 2>&1 \
    || skip "rustup could not add miri to the nightly toolchain"
fi
# Miri's own standard library, built once (it is kept in ~/.cache/miri).
cargo +nightly miri setup >/dev/null 2>&1 || skip "miri could not build its sysroot"

cargo +nightly miri test -q -p prezero --lib -- pool::state
cargo +nightly miri test -q -p prezero-service --lib -- ledger::model
# The block tests leak their block lists on purpose: Blocks holds a `&'static mut`
# list, as the preload's own lists are mappings kept for the life of the process.
MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-ignore-leaks" \
  cargo +nightly miri test -q -p prezero-preload --lib -- blocks::
