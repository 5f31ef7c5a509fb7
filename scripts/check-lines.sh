#!/usr/bin/env bash
# No Rust source file under a crate's src/ (unit-test files included) is over 700
# lines: a file past that holds more than one responsibility or a test module that
# belongs in its own file. Lists every offender and fails; integration tests
# (tests/) are not held to it.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=700

over=$(find . \( -name target -o -name .git \) -prune -o -path '*/src/*' -name '*.rs' -type f -print0 \
  | xargs -0 -r wc -l | awk -v limit="$limit" '$2 != "total" && $1 > limit' | sort -rn)
if [ -n "$over" ]; then
  echo "source files over $limit lines (split them by responsibility, tests into their own file):"
  echo "$over"
  exit 1
fi
echo "no source file under src/ is over $limit lines"
