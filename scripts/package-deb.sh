#!/usr/bin/env bash
# Builds the Debian packages of prezero, split as Debian splits a library from
# its users, into target/debian/ (CARGO_TARGET_DIR/debian), and prints their
# paths, one a line:
#
#   prezero          the command, its man pages and completions, the systemd
#                    unit, the configuration (a conffile), the docs
#   libprezero0.N    the shared library, named after its SONAME
#                    (libprezero.so.0.N while the version is 0.x, where a minor
#                    release may change the ABI: prezero-capi/build.rs), as
#                    Debian's policy and lintian ask
#   libprezero-dev   prezero.h, libprezero.a, prezero.pc and the libprezero.so
#                    link a program is linked with
#
# The files are those scripts/install.sh lays out under /usr, dealt out to the
# three; dpkg-deb alone, no debhelper: the layout has one owner, install.sh,
# which `make install`-style users run too. Dependencies on the C library and
# libgcc come from dpkg-shlibdeps.
#
# --debug packages the dev build (CI's, which has it built already): the same
# files, stripped the same way, slower.
set -euo pipefail
flags=()
if [ "${1:-}" = --debug ]; then flags=(--debug); fi
cd "$(dirname "$0")/.."
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
# Who built it: DEBFULLNAME and DEBEMAIL as dch takes them, else the last
# commit's author.
maintainer="${DEBFULLNAME:-$(git log -1 --format=%an 2>/dev/null || echo prezero developers)} <${DEBEMAIL:-$(git log -1 --format=%ae 2>/dev/null || echo prezero@example.org)}>"
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
libdir=usr/lib/$multiarch
out=${CARGO_TARGET_DIR:-target}/debian
# dpkg-shlibdeps reads a source tree's debian/: the packages are built in one.
src=$out/src
stage=$out/stage
rm -rf "$src" "$stage"
mkdir -p "$src/debian"
: >"$src/debian/control"
STRIP=1 DESTDIR=$stage LIBDIR=/$libdir scripts/install.sh "${flags[@]}" /usr >&2

soname=$(objdump -p "$stage/$libdir/libprezero.so" | sed -n 's/^ *SONAME *//p')
abi=${soname#libprezero.so.}
lib=libprezero$abi
dev=libprezero-dev

# Moves PATHS (relative to the staged /) into package PKG's tree.
take() {
  local pkg=$1 path
  shift
  for path in "$@"; do
    mkdir -p "$src/debian/$pkg/$(dirname "$path")"
    mv "$stage/$path" "$src/debian/$pkg/$path"
  done
}
take "$lib" "$libdir/libprezero.so.$version" "$libdir/$soname"
take "$dev" usr/include/prezero.h "$libdir/libprezero.a" "$libdir/libprezero.so" "$libdir/pkgconfig/prezero.pc"
# The rest is the command's: whatever install.sh adds goes there unless dealt
# out above (not the folders the moves emptied).
find "$stage" -mindepth 1 -depth -type d -empty -delete
mkdir -p "$src/debian/prezero"
(cd "$stage" && tar -cf - .) | (cd "$src/debian/prezero" && tar -xf -)
rm -rf "$stage"

changelog() {
  echo "prezero ($version) unstable; urgency=medium"
  echo
  echo "  * Built from the prezero workspace."
  echo
  echo " -- $maintainer  $(date -R -d @"$(git log -1 --format=%ct 2>/dev/null || date +%s)")"
}
copyright() {
  cat <<'TEXT'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: prezero

Files: *
Copyright: 2025-2026 prezero developers
License: MIT or Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0. The MIT license: permission is
 hereby granted, free of charge, to any person obtaining a copy of this
 software, to deal in it without restriction, provided that the copyright
 notice and this permission notice are included in all copies; the
 software is provided "as is", without warranty of any kind.
TEXT
}

# Each package's docs, md5sums and control file; then the .deb.
build() {
  local pkg=$1 section=$2 depends=$3 description=$4
  local root=$src/debian/$pkg
  local doc=$root/usr/share/doc/$pkg
  mkdir -p "$doc" "$root/DEBIAN"
  changelog | gzip -9n >"$doc/changelog.gz"
  copyright >"$doc/copyright"
  chmod 644 "$doc/changelog.gz" "$doc/copyright"
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z \
    | xargs -0r md5sum) >"$root/DEBIAN/md5sums"
  local size multi=
  size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  [ "$pkg" = prezero ] || multi=$'\nMulti-Arch: same'
  cat >"$root/DEBIAN/control" <<TEXT
Package: $pkg
Source: prezero
Version: $version
Architecture: $arch$multi
Maintainer: $maintainer
Installed-Size: $size
Depends: $depends
Section: $section
Priority: optional
Description: $description
TEXT
  find "$root" -type d -exec chmod 755 {} +
  local deb=$out/${pkg}_${version}_$arch.deb
  dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >&2
  echo "$deb"
}

# What the binaries need of the system (libc6, libgcc-s1), as dpkg-shlibdeps
# reads it from their ELF headers and the installed packages' shlibs.
shlibdeps() {
  (cd "$src" && dpkg-shlibdeps -O "$@" | sed -n 's/^shlibs:Depends=//p')
}
about=" prezero hands programs zeroed memory fast: clearing kernels chosen from
 the CPU's features, a pool of pre-zeroed memory with a background scrubber,
 template fills of large record arrays with streaming stores, and a daemon
 (prezero serve) that keeps hugetlb memory populated and zero for VMMs."

# The library: the loader's cache updated on install; the dependency a
# program linked against it gets (shlibs, for dpkg-shlibdeps).
# Its symbols file lists every function it exports (the pz_* ABI), each as of
# this version: a program gets the dependency the functions it calls need.
mkdir -p "$src/debian/$lib/DEBIAN"
echo "activate-noawait ldconfig" >"$src/debian/$lib/DEBIAN/triggers"
echo "libprezero $abi $lib (>= $version)" >"$src/debian/$lib/DEBIAN/shlibs"
{
  echo "$soname $lib #MINVER#"
  echo "* Build-Depends-Package: $dev"
  nm -D --defined-only "$src/debian/$lib/$libdir/libprezero.so.$version" \
    | awk -v v="$version" '{ print " " $3 "@Base " v }' | LC_ALL=C sort
} >"$src/debian/$lib/DEBIAN/symbols"
build "$lib" libs "$(shlibdeps "debian/$lib/$libdir/libprezero.so.$version")" \
  "zeroed memory as fast as the hardware allows - shared library
$about
 .
 This package holds the C library, libprezero.so.$abi."

build "$dev" libdevel "$lib (= $version)" \
  "zeroed memory as fast as the hardware allows - development files
$about
 .
 This package holds what a C program is built against: prezero.h, the
 static library, prezero.pc for pkg-config, and the libprezero.so link."

# The command: the configuration is a conffile (dpkg keeps an admin's edits,
# and removes it on purge); the maintainer scripts stop the daemon when the
# package is removed and, on purge, remove what the daemon made
# (packaging/prezero.prerm, packaging/prezero.postrm).
cmd=$src/debian/prezero
mkdir -p "$cmd/DEBIAN"
echo /etc/prezero/prezero.toml >"$cmd/DEBIAN/conffiles"
install -m 755 packaging/prezero.prerm "$cmd/DEBIAN/prerm"
install -m 755 packaging/prezero.postrm "$cmd/DEBIAN/postrm"
build prezero admin "$(shlibdeps debian/prezero/usr/bin/prezero)" \
  "zeroed memory as fast as the hardware allows - command and daemon
$about
 .
 This package holds the prezero command: prezero serve (with its systemd
 unit and configuration), prezero run, which runs unmodified programs with
 pre-zeroed, populated large blocks, and prezero bench, which measures every
 strategy beside what the kernel and glibc do."
