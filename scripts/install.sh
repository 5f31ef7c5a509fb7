#!/usr/bin/env bash
# Installs prezero under PREFIX: the `prezero` command, its man pages and
# shell completions, the C library (libprezero.so, libprezero.a, prezero.h,
# prezero.pc), the systemd unit and an example configuration, the docs. The
# Debian package (scripts/package-deb.sh) is this layout under /usr.
#
#   scripts/install.sh /usr/local
#   PKG_CONFIG_PATH=/usr/local/lib/pkgconfig cc app.c $(pkg-config --cflags --libs prezero)
#
# Options (before PREFIX):
#   --debug     the dev build (debug assertions on; what the C tests use, so CI
#               builds the library once)
#   --lib-only  the C library alone
# Environment: DESTDIR (stage under it, as `make install` does), LIBDIR (the
# library's directory, default PREFIX/lib; Debian's is multiarch), SYSCONFDIR
# (default PREFIX/etc; /etc for /usr), STRIP (1: debug info and unneeded
# symbols stripped; the default for the release build).
set -euo pipefail
usage() { sed -n '2,17s/^# \{0,1\}//p' "$0"; }
profile=release
lib_only=false
while [ $# -gt 0 ]; do
  case "$1" in
    --debug) profile=debug ;;
    --lib-only) lib_only=true ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "scripts/install.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
[ $# -eq 1 ] || { usage >&2; exit 2; }
if [ -n "${DESTDIR:-}" ]; then DESTDIR=$(mkdir -p "$DESTDIR" && cd "$DESTDIR" && pwd); fi
case "$1" in /*) ;; *) set -- "$PWD/$1" ;; esac
cd "$(dirname "$0")/.."
mkdir -p "${DESTDIR:-}$1"
prefix=$(cd "${DESTDIR:-}$1" && pwd)
prefix=${prefix#"${DESTDIR:-}"}
libdir=${LIBDIR:-$prefix/lib}
if [ "$prefix" = /usr ]; then sysconfdir=${SYSCONFDIR:-/etc}; else sysconfdir=${SYSCONFDIR:-$prefix/etc}; fi
at() { echo "${DESTDIR:-}$1"; }
flag=(); [ $profile = release ] && flag=(--release)
packages=(-p prezero-capi); $lib_only || packages+=(-p prezero-cli)
cargo build -q "${flag[@]}" "${packages[@]}"
out=${CARGO_TARGET_DIR:-target}/$profile
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)

install -d "$(at "$libdir/pkgconfig")" "$(at "$prefix/include")"
# The C ABI's crate (prezero-capi) builds libprezero_capi.*: installed as libprezero.
install -m 644 $out/libprezero_capi.a "$(at "$libdir/libprezero.a")"
# The file under its version, found by its SONAME (libprezero.so.0.MINOR, set by
# prezero-capi/build.rs); libprezero.so, the name `-lprezero` links, points at it.
soname=$(objdump -p $out/libprezero_capi.so | sed -n 's/^ *SONAME *//p')
install -m 644 $out/libprezero_capi.so "$(at "$libdir/libprezero.so.$version")"
ln -sf "libprezero.so.$version" "$(at "$libdir/$soname")"
ln -sf "$soname" "$(at "$libdir/libprezero.so")"
install -m 644 include/prezero.h "$(at "$prefix/include/prezero.h")"
# Outside the system's prefix the library is found through a run path in the
# programs linked with it; under /usr, in the loader's own directories, it
# needs none, and Debian's policy forbids one.
rpath=" -Wl,-rpath,\${libdir}"
[ "$prefix" = /usr ] && rpath=
sed -e "s|@PREFIX@|$prefix|" -e "s|@LIBDIR@|$libdir|" -e "s|@VERSION@|$version|" \
  -e "s|@RPATH@|$rpath|" prezero.pc.in >"$(at "$libdir/pkgconfig/prezero.pc")"
# Without debug info or unneeded symbols (the build tree keeps them): 6 MB
# instead of 40 for the command.
strip=${STRIP:-$([ $profile = release ] && echo 1 || echo 0)}
strip_all() {
  if [ "$strip" = 1 ]; then
    strip --remove-section=.comment --remove-section=.note --strip-unneeded "$@"
  fi
}
if [ "$strip" = 1 ]; then strip --strip-debug --remove-section=.comment "$(at "$libdir/libprezero.a")"; fi
strip_all "$(at "$libdir/libprezero.so.$version")"
if $lib_only; then
  echo "installed the prezero $version C library into ${DESTDIR:-}$prefix"
  exit 0
fi

install -D -m 755 $out/prezero "$(at "$prefix/bin/prezero")"
strip_all "$(at "$prefix/bin/prezero")"
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
$out/prezero generate --man "$gen/man" --completions "$gen/completions"
install -d "$(at "$prefix/share/man/man1")"
for page in "$gen"/man/*.1; do
  gzip -9n <"$page" >"$(at "$prefix/share/man/man1/$(basename "$page").gz")"
done
install -D -m 644 "$gen/completions/prezero.bash" "$(at "$prefix/share/bash-completion/completions/prezero")"
install -D -m 644 "$gen/completions/_prezero" "$(at "$prefix/share/zsh/vendor-completions/_prezero")"
install -D -m 644 "$gen/completions/prezero.fish" "$(at "$prefix/share/fish/vendor_completions.d/prezero.fish")"
docs=$prefix/share/doc/prezero
install -d "$(at "$docs")"
install -m 644 README.md SECURITY.md docs/PROTOCOL.md docs/ARCHITECTURE.md "$(at "$docs")/"
# The unit names the paths of this installation.
install -d "$(at "$prefix/lib/systemd/system")" "$(at "$sysconfdir/prezero")"
sed -e "s|/usr/local/bin/prezero|$prefix/bin/prezero|" \
  -e "s|/usr/local/lib/systemd/system|$prefix/lib/systemd/system|" \
  -e "s|/etc/prezero/prezero.toml|$sysconfdir/prezero/prezero.toml|" \
  -e "s|/usr/local/share/doc/prezero|$docs|" packaging/prezero.service \
  >"$(at "$prefix/lib/systemd/system/prezero.service")"
chmod 644 "$(at "$prefix/lib/systemd/system/prezero.service")"
install -m 644 packaging/prezero.toml "$(at "$sysconfdir/prezero/prezero.toml")"
echo "installed prezero $version into ${DESTDIR:-}$prefix"
