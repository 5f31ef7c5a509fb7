#!/usr/bin/env bash
# Two real programs' own test suites, with and without libprezero_preload.so,
# and under its lazy mode (PREZERO_LAZY=1 as `prezero run --lazy` sets it): they
# must pass exactly as they pass without it (the same counts of passed, failed,
# skipped), the preload must have served large blocks (its PREZERO_STATS=1 line
# says how many), at a threshold of 64 KiB so that most of their buffers go
# through it, and the lazy mode must have answered page faults (where it cannot
# run here, its arm says why and is compared all the same).
#
#   1. CPython's regrtest on the modules that move big buffers (bytes, array,
#      mmap, zlib, struct, memoryview, bz2, lzma, hashlib, bigaddrspace).
#   2. numpy's own tests for array creation and arithmetic, memmap, fft and
#      the lib functions, with pytest (installed with hypothesis into a venv
#      that sees the system's numpy; numpy too if there is none).
#
# What cannot run prints `skipped: ...` with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
# Absolute: the suites run from other directories.
mkdir -p "$target" && target=$(cd "$target" && pwd)
# Its own target dir, as prezero-preload/tests/preload/ builds it (built alone the
# package takes prezero without its C ABI; in the workspace's dir each would rebuild
# prezero over the other's).
CARGO_TARGET_DIR=$target/preload cargo build -q -p prezero-preload
so=$(realpath "$target/preload/debug/libprezero_preload.so")
py=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
threshold=64K

# Runs "$@" plainly, under the preload and under its lazy mode, at the same
# time (each is mostly one busy thread, and only the results are compared);
# their outputs go to $work/{plain,preload,lazy}.out, the preload's stats lines
# to $work/stats and the lazy mode's to $work/lazy-stats. The lazy arm starts
# as `prezero run --lazy` starts a program (PREZERO_PREFILL_PID: its reserve
# fills from start-up).
both() {
  timeout 600 env -u LD_PRELOAD "$@" >"$work/plain.out" 2>&1 &
  local plain=$!
  timeout 600 env PREZERO_THRESHOLD=$threshold PREZERO_STATS=1 PREZERO_LAZY=1 LD_PRELOAD="$so" \
    sh -c 'PREZERO_PREFILL_PID=$$ exec "$@"' sh "$@" >"$work/lazy.out" 2>&1 &
  local lazy=$!
  timeout 600 env PREZERO_THRESHOLD=$threshold PREZERO_STATS=1 LD_PRELOAD="$so" "$@" \
    >"$work/preload.out" 2>&1 || true
  wait $plain || true
  wait $lazy || true
  grep -h '^prezero-preload: pid' "$work/preload.out" >"$work/stats" || true
  grep -h '^prezero-preload: lazy: pid' "$work/lazy.out" >"$work/lazy-stats" || true
}

# Sums the large blocks served over every stats line (subprocesses print theirs).
served() { awk '{ for (i = 1; i < NF; i++) if ($(i+1) == "large") s += $i } END { print s + 0 }' "$work/stats"; }

# Sums the faults the lazy mode answered over every lazy line.
faults() { awk '{ for (i = 1; i < NF; i++) if ($(i+1) == "faults:") s += $i } END { print s + 0 }' "$work/lazy-stats"; }

# compare NAME PLAIN_SUMMARY PRELOAD_SUMMARY LAZY_SUMMARY
compare() {
  local name=$1 plain=$2 pre=$3 lazy=$4 n f why
  n=$(served)
  f=$(faults)
  why=$(grep -m1 '^prezero: --lazy: ' "$work/lazy.out" || true)
  if [ -z "$plain" ]; then
    echo "FAIL: $name: no summary from the plain run:"; tail -20 "$work/plain.out"; status=1; return
  fi
  if [ "$plain" != "$pre" ]; then
    echo "FAIL: $name: without the preload: $plain"
    echo "      with it:                  ${pre:-(no summary)}"
    tail -40 "$work/preload.out"
    status=1
  elif [ "$n" -eq 0 ]; then
    echo "FAIL: $name: the preload served no large block (stats: $(cat "$work/stats"))"
    status=1
  elif [ "$plain" != "$lazy" ]; then
    echo "FAIL: $name: without the preload:       $plain"
    echo "      under its lazy mode:            ${lazy:-(no summary)}"
    tail -40 "$work/lazy.out"
    status=1
  elif [ "$f" -eq 0 ] && [ -z "$why" ]; then
    echo "FAIL: $name: the lazy mode answered no fault (lines: $(cat "$work/lazy-stats"))"
    status=1
  else
    echo "$name: the same with and without the preload: $plain; $n large blocks from the cache"
    echo "$name: the same under the lazy mode: ${why:-$f faults answered}"
  fi
}

# ---- 1. CPython's regrtest -------------------------------------------------
if ! command -v "$py" >/dev/null 2>&1; then
  echo "skipped: CPython's regrtest (no $py)"
elif ! "$py" -c 'import test.support, test.libregrtest' >/dev/null 2>&1; then
  echo "skipped: CPython's regrtest ($py has no test package; Debian's python3 needs libpython3-testsuite)"
else
  tests=(test_bytes test_array test_mmap test_zlib test_struct test_memoryview test_bz2 test_lzma
         test_hashlib test_bigaddrspace)
  both "$py" -m test "${tests[@]}"
  summary() { grep -E '^(Total tests:|Result:|Tests result:)' "$1" | tr '\n' ' ' | sed 's/ *$//'; }
  compare "CPython $("$py" -c 'import platform; print(platform.python_version())') regrtest (${#tests[@]} modules)" \
    "$(summary "$work/plain.out")" "$(summary "$work/preload.out")" "$(summary "$work/lazy.out")"
fi

# ---- 2. numpy's tests with pytest -----------------------------------------
venv="$target/preload-venv"
if ! command -v "$py" >/dev/null 2>&1; then
  echo "skipped: numpy's tests (no $py)"
elif ! { [ -x "$venv/bin/python" ] || "$py" -m venv --system-site-packages "$venv" >/dev/null 2>&1; }; then
  echo "skipped: numpy's tests ($py -m venv failed: Debian needs python3-venv)"
  rm -rf "$venv"
elif ! { "$venv/bin/python" -c 'import numpy, pytest, hypothesis' >/dev/null 2>&1 \
         || timeout 300 "$venv/bin/python" -m pip install -q pytest hypothesis numpy >/dev/null 2>&1; }; then
  echo "skipped: numpy's tests (pip could not install pytest, hypothesis and numpy)"
else
  np=$("$venv/bin/python" -c 'import numpy, os; print(os.path.dirname(numpy.__file__))')
  files=()
  for f in _core/tests/test_numeric.py _core/tests/test_memmap.py fft lib/tests/test_function_base.py; do
    [ -e "$np/$f" ] && files+=("$np/$f")
  done
  if [ ${#files[@]} -eq 0 ]; then
    echo "skipped: numpy's tests (numpy $("$venv/bin/python" -c 'import numpy; print(numpy.__version__)') ships none of them)"
  else
    (cd "$work" && both "$venv/bin/python" -m pytest -q -p no:cacheprovider "${files[@]}")
    # "3224 passed, 73 skipped, 2 xfailed, 4 warnings in 10.91s": the counts
    # without the warnings and the time.
    summary() {
      grep -E '^[0-9]+ (passed|failed|error)' "$1" | tail -1 | sed -E 's/ in [0-9.]+s.*//; s/, [0-9]+ warnings?//'
    }
    compare "numpy $("$venv/bin/python" -c 'import numpy; print(numpy.__version__)') pytest (${#files[@]} test modules)" \
      "$(summary "$work/plain.out")" "$(summary "$work/preload.out")" "$(summary "$work/lazy.out")"
  fi
fi
exit $status
