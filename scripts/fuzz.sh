#!/usr/bin/env bash
# The fuzz targets of fuzz/ (cargo-fuzz, libFuzzer), one after another, each
# one process (-jobs=1: the machines that run it have two cores):
#
#   scripts/fuzz.sh MINUTES [TARGET...]   a campaign by hand: MINUTES per target
#   scripts/fuzz.sh --ci                  the bounded pass .ci/run makes: 10 s each
#
# A campaign of every target first runs the preload's whole fault matrix
# (prezero-preload/tests/faults.rs, ignored in the ordinary suite: minutes).
#
# Without nightly or cargo-fuzz it prints `skipped: fuzzing (reason)` and
# exits 0. All targets are built once, into fuzz/target. Each run starts from
# the checked-in seeds (fuzz/seeds/TARGET) and what earlier runs here kept
# (fuzz/corpus/TARGET, not checked in), and prints a line per target: runs,
# executions per second, coverage (libFuzzer's `cov:`, edges), corpus, and the
# finding if there is one (its input is in fuzz/artifacts/TARGET). Exits 1 if
# any target found something: a finding becomes a regression test in the
# ordinary suite and is fixed.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(request reply alloc_answer size cpu_mask ffi profile config ledger)
matrix=false
case "${1:-}" in
  --ci) secs=10 ;;
  '' | *[!0-9]*) echo "usage: $0 MINUTES [TARGET...] | --ci" >&2; exit 2 ;;
  *) secs=$(($1 * 60)); shift
     if [ $# -gt 0 ]; then targets=("$@"); else matrix=true; fi ;;
esac

if $matrix; then
  cargo test -p prezero-preload --test faults -- --ignored
fi

skip() { echo "skipped: fuzzing ($1)"; exit 0; }
[ "$(uname -m)" = x86_64 ] || skip "libFuzzer with ASan is set up for x86_64 only"
rustup toolchain list 2>/dev/null | grep -q '^nightly' || skip "no nightly toolchain"
cargo fuzz --version >/dev/null 2>&1 || skip "no cargo-fuzz (cargo install --locked cargo-fuzz)"
command -v c++ >/dev/null 2>&1 || skip "no C++ compiler to build libFuzzer"

# Release with debug assertions and overflow checks (cargo-fuzz's default):
# an overflow is a finding, not a wrap.
build_log=$(mktemp)
cargo +nightly fuzz build >/dev/null 2>"$build_log" || { cat "$build_log"; exit 1; }
rm -f "$build_log"

# The C ABI target's calls start threads (clear_parallel's, a pool's scrubbers)
# that finish exiting just after the call returns: libFuzzer's leak check after
# each input took what they still held for leaks (a Thread handle, glibc's TLS
# destructor record: 80 bytes, a few calls in a thousand). LeakSanitizer's check
# at exit stays.
declare -A flags=([ffi]=-detect_leaks=0)

found=()
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t"
  log=$(mktemp)
  rc=0
  start=$SECONDS
  # -timeout: an input that runs 30 s is a finding (a hang), not a wait.
  cargo +nightly fuzz run "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
    -max_total_time="$secs" -timeout=30 -print_final_stats=1 ${flags[$t]:-} >"$log" 2>&1 || rc=$?
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log" | tail -1)
  speed=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$log" | tail -1)
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
  corp=$(sed -nE 's/.* corp: ([0-9]+)\/.*/\1/p' <<<"$last")
  if [ "$rc" = 0 ]; then
    finding=none
  else
    found+=("$t")
    finding=$(grep -m1 -E "panicked at|ERROR: [A-Za-z]+" "$log" || echo "exit $rc")
    # What went wrong, with its stack, and where the input is; the whole log beside it.
    mkdir -p "fuzz/artifacts/$t"
    cp "$log" "fuzz/artifacts/$t/run.log"
    sed -n '/panicked at\|ERROR: [A-Za-z]/,/SUMMARY/p' "$log" | head -60
    grep -E "Test unit written" "$log" || true
  fi
  echo "fuzz: $t: ${runs:-?} runs in $((SECONDS - start)) s (${speed:-?} exec/s), cov: ${cov:-?} edges, corpus ${corp:-?} inputs, findings: $finding"
  rm -f "$log"
done
if [ ${#found[@]} -gt 0 ]; then
  echo "fuzz: findings in ${found[*]} (inputs in fuzz/artifacts/)"
  exit 1
fi
