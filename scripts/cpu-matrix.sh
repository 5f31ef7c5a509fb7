#!/usr/bin/env bash
# Every narrower CPU this one can stand in for (PREZERO_CPU): the kernel,
# template and pool suites, and `prezero bench all --smoke` with its report,
# once per ISA level this CPU reaches and, where it has clzero (dc zva on arm64),
# without it too.
set -euo pipefail
cd "$(dirname "$0")/.."

# The dev profile is optimised (Cargo.toml), and CI has just built it for the tests: the
# same command is a no-op then (a `cargo build -p prezero-cli` would not be: without the
# dev-dependencies, libc's features differ and everything above it is rebuilt).
cargo test --workspace --no-run -q
bin=${CARGO_TARGET_DIR:-target}/debug/prezero
# The levels, and the one optional kernel feature worth running without.
case "$(uname -m)" in
  x86_64) levels=(x86-64-v2 x86-64-v3 x86-64-v4) optional=clzero ;;
  aarch64) levels=(armv8.0) optional=dc-zva ;;
  *) levels=() optional= ;;
esac
has_optional=false
if [ -n "$optional" ] && "$bin" info --json | grep -q "\"detected\":{[^}]*\"$optional\":true"; then
  has_optional=true
fi

masks=()
for l in "${levels[@]}"; do
  if ! PREZERO_CPU=$l "$bin" info >/dev/null 2>&1; then
    echo "skipped: PREZERO_CPU=$l ($(PREZERO_CPU=$l "$bin" info 2>&1 | head -1 | sed 's/^prezero: //'))"
    continue
  fi
  masks+=("$l")
  if $has_optional; then masks+=("$l,-$optional"); fi
done

reserve=()
if [ "$(id -u)" = 0 ]; then reserve=(--reserve); fi
out=target/cpu-matrix
mkdir -p "$out"
# Quiet when it passes; the whole log when it does not.
run() {
  local log=$1; shift
  if ! "$@" >"$log" 2>&1; then
    cat "$log"
    echo "failed under PREZERO_CPU=$PREZERO_CPU: $*"
    exit 1
  fi
}
for m in "${masks[@]}"; do
  export PREZERO_CPU=$m
  run "$out/$m.tests.log" cargo test --workspace --test kernels --test template --test pool -- --nocapture
  run "$out/$m.smoke.log" "$bin" bench all --smoke "${reserve[@]}" \
    --report "$out/$m.html" --json-out "$out/$m.jsonl"
  passed=$(grep -o '[0-9]* passed' "$out/$m.tests.log" | awk '{n += $1} END {print n}')
  skipped=$(grep -o "^skipped (cpu): kernel '\?[a-z0-9-]*" "$out/$m.tests.log" | awk '{print $4}' | tr -d "'" | sort -u | tr '\n' ' ')
  echo "PREZERO_CPU=$m: $passed tests passed (kernels skipped: ${skipped:-none}), bench all --smoke: $(wc -l <"$out/$m.jsonl") rows"
done
unset PREZERO_CPU
echo "cpu matrix: ${masks[*]} passed"
