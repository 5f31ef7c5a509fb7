#!/usr/bin/env bash
# Installs libprezero.so, libprezero.a, prezero.h and prezero.pc into PREFIX:
#   scripts/install.sh /usr/local
#   PKG_CONFIG_PATH=/usr/local/lib/pkgconfig cc app.c $(pkg-config --cflags --libs prezero)
# --debug installs the dev build (debug assertions on; what the C tests use, so CI
# builds the library once).
set -euo pipefail
profile=release
if [ "${1:-}" = --debug ]; then profile=debug; shift; fi
prefix=${1:?usage: scripts/install.sh [--debug] PREFIX}
cd "$(dirname "$0")/.."
if [ $profile = release ]; then cargo build --release -p prezero; else cargo build -p prezero; fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 644 target/$profile/libprezero.a "$prefix/lib/libprezero.a"
install -m 755 target/$profile/libprezero.so "$prefix/lib/libprezero.so"
install -m 644 include/prezero.h "$prefix/include/prezero.h"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" prezero.pc.in > "$prefix/lib/pkgconfig/prezero.pc"
echo "installed prezero $version into $prefix"
