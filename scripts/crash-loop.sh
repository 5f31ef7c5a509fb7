#!/usr/bin/env bash
# The service's crash loop by hand: ROUNDS (default 200) SIGKILLs of
# `prezero serve` under the load of tenants of two uids, each followed by a
# restart and every check of prezero-cli/tests/crash_loop.rs; a line per round,
# then the tally of where the kills landed. `cargo test` runs 10 rounds (CI).
# Needs root (tenants of other uids, hugetlb pages). PREZERO_CRASH_SEED=N
# repeats a run's choices (each run prints its seed).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-200}
case "$rounds" in
  ''|*[!0-9]*) echo "usage: $0 [ROUNDS]" >&2; exit 2 ;;
esac
PREZERO_CRASH_ROUNDS=$rounds cargo test -p prezero-cli --test crash_loop -- --nocapture
