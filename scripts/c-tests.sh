#!/usr/bin/env bash
# The C side: install into a temporary prefix, build the examples against the
# installed header and library through pkg-config, run them, and run the C test
# programs plainly and under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(mktemp -d)
build=$(mktemp -d)
trap 'rm -rf "$prefix" "$build"' EXIT

scripts/install.sh "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cflags=(-std=c11 -Wall -Wextra -Werror -O2)

# The README's C example is examples/c/zero_buffer.c, byte for byte.
sed -n '/^<!-- example: examples\/c\/zero_buffer.c -->$/,/^```$/p' README.md | sed '1,2d;$d' > "$build/readme.c"
diff -u examples/c/zero_buffer.c "$build/readme.c"

for ex in examples/c/*.c; do
  name=$(basename "$ex" .c)
  gcc "${cflags[@]}" "$ex" -o "$build/$name" $(pkg-config --cflags --libs prezero) -pthread
  "$build/$name"
done

static=("$prefix/lib/libprezero.a" $(pkg-config --libs-only-l --static prezero | sed 's/-lprezero//'))
for t in test_ffi stress; do
  gcc "${cflags[@]}" tests/c/$t.c -o "$build/$t" $(pkg-config --cflags --libs prezero) -pthread
  "$build/$t"
  gcc "${cflags[@]}" -g -fsanitize=address,undefined -fno-sanitize-recover=all tests/c/$t.c \
    -o "$build/$t-asan" $(pkg-config --cflags prezero) "${static[@]}" -pthread
  ASAN_OPTIONS=detect_leaks=1 "$build/$t-asan"
done
echo "c tests: examples, test_ffi and stress passed, plain and under ASan/UBSan"
