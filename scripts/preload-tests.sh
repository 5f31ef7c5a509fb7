#!/usr/bin/env bash
# The tests of libprezero_preload.so (issue 16) that need tools installed, for
# CI (.ci/run calls it after `cargo test --workspace`, which runs the rest of
# prezero-preload/tests/preload.rs: the C test programs under the preload):
#
#   * valgrind (Debian's package, best effort), then the tests that use it
#     and the sanitizer builds again: memcheck under the preload, the C test
#     program built with ASan (without the preload: ASan replaces malloc) and
#     with UBSan (under it);
#   * two real programs' own test suites with and without the preload
#     (scripts/preload-suites.sh: CPython's regrtest and numpy's pytest tests;
#     pytest and hypothesis come from PyPI into a venv).
#
# --all: every test of the crate (unit tests and tests/preload.rs) first.
# Whatever cannot be installed or run prints `skipped: ...` with the reason.
# About a minute here.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v valgrind >/dev/null 2>&1; then
  (export DEBIAN_FRONTEND=noninteractive
   apt_install() { timeout 600 apt-get install -y -qq --no-install-recommends valgrind >/dev/null 2>&1; }
   apt_install || { timeout 300 apt-get update -qq >/dev/null 2>&1 && apt_install; }) \
    || echo "skipped: installing valgrind (the memcheck test skips)"
fi
if ! command -v gcc >/dev/null 2>&1; then
  echo "skipped: the C test programs under the preload (no gcc)"
elif [ "${1:-}" = --all ]; then
  cargo test -p prezero-preload
else
  log=$(mktemp)
  if cargo test -p prezero-preload --test preload -- valgrind sanitizer --nocapture >"$log" 2>&1; then
    grep -E '^(test |skipped|note)' "$log" || true
    rm -f "$log"
  else
    cat "$log"
    rm -f "$log"
    exit 1
  fi
fi
scripts/preload-suites.sh
