#!/usr/bin/env bash
# Builds the Debian package target/debian/prezero_VERSION_ARCH.deb: the files
# scripts/install.sh lays out under /usr (the command, its man pages and
# completions, the C library and header, the systemd unit, the docs), the
# configuration as a conffile under /etc/prezero. dpkg-deb alone, no
# debhelper: the layout has one owner, install.sh, which `make install`-style
# users run too. Prints the package's path.
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
out=target/debian
root=$out/root
rm -rf "$root"
mkdir -p "$root/DEBIAN"
STRIP=1 DESTDIR=$root LIBDIR=/usr/lib/$multiarch scripts/install.sh "${flags[@]}" /usr >&2
doc=$root/usr/share/doc/prezero
{
  echo "prezero ($version) unstable; urgency=medium"
  echo
  echo "  * Built from the prezero workspace."
  echo
  echo " -- $maintainer  $(date -R -d @"$(git log -1 --format=%ct 2>/dev/null || date +%s)")"
} | gzip -9n >"$doc/changelog.gz"
cat >"$doc/copyright" <<'TEXT'
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
chmod 644 "$doc/changelog.gz" "$doc/copyright"
echo /etc/prezero/prezero.toml >"$root/DEBIAN/conffiles"
# The shared library: the loader's cache updated on install, and the
# dependency a program linked against it gets (dpkg-shlibdeps).
echo "activate-noawait ldconfig" >"$root/DEBIAN/triggers"
soname=$(objdump -p "$root/usr/lib/$multiarch/libprezero.so" | sed -n 's/^ *SONAME *//p')
echo "libprezero ${soname#libprezero.so.} prezero (>= $version)" >"$root/DEBIAN/shlibs"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<TEXT
Package: prezero
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: libc6 (>= 2.34)
Section: admin
Priority: optional
Description: zeroed memory as fast as the hardware allows
 prezero hands programs zeroed memory fast: a library (Rust, with a C ABI)
 whose clearing kernels are chosen from the CPU's features, a daemon
 (prezero serve) that keeps hugetlb memory populated and zero for VMMs, and
 a command that runs unmodified programs with pre-zeroed, populated large
 blocks (prezero run) and measures every strategy beside what the kernel
 and glibc do (prezero bench).
TEXT
deb=$out/prezero_${version}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >&2
echo "$deb"
