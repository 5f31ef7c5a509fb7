#!/usr/bin/env bash
# The C side: install into a temporary prefix, build the examples against the
# installed header and library through pkg-config, run them, and run the C test
# programs plainly and under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(mktemp -d)
build=$(mktemp -d)
trap 'rm -rf "$prefix" "$build"' EXIT

scripts/install.sh --debug --lib-only "$prefix" >/dev/null
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

# With a service: a private prezero serve on a temporary socket (root, for the
# hugetlb pages it reserves and gives back), and the VMM example against it.
if [ "$(id -u)" = 0 ]; then
  cargo build -q -p prezero-cli
  sock="$build/prezero.sock"
  "${CARGO_TARGET_DIR:-target}"/debug/prezero serve --socket "$sock" --pool 2MB:target=256M,cap=256M,segment=64M --reserve 2>"$build/serve.log" &
  serve=$!
  for _ in $(seq 600); do [ -S "$sock" ] && break; kill -0 $serve 2>/dev/null || break; sleep 0.1; done
  if [ -S "$sock" ]; then
    PREZERO_SOCKET="$sock" "$build/vmm_guest_memory" 200 | tee "$build/vmm.out"
    grep -q "from prezero serve" "$build/vmm.out"
    kill -TERM $serve; wait $serve
  else
    echo "skipped: the VMM example against a service: prezero serve did not start: $(cat "$build/serve.log")"
    kill -TERM $serve 2>/dev/null || true
  fi
else
  echo "skipped: the VMM example against a service: reserving hugetlb pages needs root"
fi

static=("$prefix/lib/libprezero.a" $(pkg-config --libs-only-l --static prezero | sed 's/-lprezero//'))
for t in test_ffi stress; do
  gcc "${cflags[@]}" tests/c/$t.c -o "$build/$t" $(pkg-config --cflags --libs prezero) -pthread
  "$build/$t"
  gcc "${cflags[@]}" -g -fsanitize=address,undefined -fno-sanitize-recover=all tests/c/$t.c \
    -o "$build/$t-asan" $(pkg-config --cflags prezero) "${static[@]}" -pthread
  ASAN_OPTIONS=detect_leaks=1 "$build/$t-asan"
done
# The C ABI honours PREZERO_CPU as the library does: a narrower CPU, and a mask
# this CPU cannot honour (refused with -EINVAL, the library left on its baseline).
if [ "$(uname -m)" = x86_64 ]; then
  PREZERO_CPU=x86-64-v2,-clzero "$build/test_ffi"
  PREZERO_CPU=x86-64-v9 "$build/test_ffi" 2>/dev/null
fi
echo "c tests: examples, test_ffi and stress passed, plain and under ASan/UBSan"
