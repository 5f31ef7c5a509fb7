#!/usr/bin/env bash
# No source file is over 700 lines: Rust under a crate's src/ (unit-test files
# included) or tests/ (integration tests: a test binary's scenarios go in
# modules of tests/NAME/, as tests/NAME/main.rs, which keeps it one binary), and
# C (*.c, *.h: the test programs, the examples, the benches' programs). A file
# past that holds more than one responsibility or a test module that belongs in
# its own file. Lists every offender and fails.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=700

over=$(find . \( -name target -o -name .git \) -prune -o -type f \
  \( \( -name '*.rs' \( -path '*/src/*' -o -path '*/tests/*' \) \) -o -name '*.c' -o -name '*.h' \) -print0 \
  | xargs -0 -r wc -l | awk -v limit="$limit" '$2 != "total" && $1 > limit' | sort -rn)
if [ -n "$over" ]; then
  echo "source files over $limit lines (split them by responsibility, tests into their own file):"
  echo "$over"
  exit 1
fi
echo "no source file (Rust under src/ or tests/, C) is over $limit lines"
