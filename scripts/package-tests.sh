#!/usr/bin/env bash
# The Debian packages as an operator and a C programmer meet them: built (from
# the dev build CI has already; scripts/package-deb.sh without --debug makes
# the release ones), checked by lintian (no error, no warning, no override),
# installed by dpkg into a fresh root (prezero, libprezero0.N and
# libprezero-dev), used there (prezero info; the unit verified and scored by
# systemd-analyze; prezero serve started with the unit's ExecStart line and
# the packaged configuration, its socket and ledger in the root's
# /run/prezero, a few hugetlb pages reserved and given back; a client served;
# a C program built with pkg-config against the -dev package and run on the
# library package; the man pages rendered), then purged, and the root
# checked empty: nothing of the packages, nor of what their daemon made.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
pages_before=
cleanup() {
  [ -n "${serve_pid:-}" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
  [ -n "$pages_before" ] && echo "$pages_before" >/proc/sys/vm/nr_hugepages
  rm -rf "$work"
}
trap cleanup EXIT
command -v dpkg-deb >/dev/null || { echo "skipped: package tests (no dpkg-deb)"; exit 0; }

mapfile -t debs < <(scripts/package-deb.sh --debug 2>"$work/build.log") || { cat "$work/build.log"; exit 1; }
[ ${#debs[@]} = 3 ] || { cat "$work/build.log"; echo "expected 3 packages: ${debs[*]}" >&2; exit 1; }
names=()
for deb in "${debs[@]}"; do
  name=$(dpkg-deb -f "$deb" Package)
  names+=("$name")
  echo "package: $name, $(du -k "$deb" | cut -f1) KiB (installed $(dpkg-deb -f "$deb" Installed-Size) KiB), $(dpkg-deb -c "$deb" | grep -vc '/$') files; depends: $(dpkg-deb -f "$deb" Depends)"
done

# No error and no warning, with no override; the informational tags are shown.
# Its temporary files (mldbm-elf-*, which it leaves) go with the work directory.
if command -v lintian >/dev/null; then
  TMPDIR=$work lintian --allow-root --display-info "${debs[@]}" | tee "$work/lintian" || true
  if grep -q '^[EW]:' "$work/lintian"; then
    echo "lintian: errors or warnings" >&2
    exit 1
  fi
  echo "lintian: no error, no warning ($(grep -c '^I:' "$work/lintian" || true) informational tags)"
else
  echo "skipped: lintian (not installed)"
fi

# A fresh root with dpkg's database and the directories the machine has
# (/run). Maintainer scripts run outside it (no shell inside), told where it
# is by DPKG_ROOT; nothing to depend on (no libc6 package) or trigger.
root=$work/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/run"
: >"$root/var/lib/dpkg/status"
dpkg_root() {
  dpkg --root="$root" --force-depends --force-not-root --force-script-chrootless --no-triggers "$@" \
    >>"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; exit 1; }
}
dpkg_root -i "${debs[@]}"
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
prezero=$root/usr/bin/prezero
"$prezero" info >"$work/info"
head -n 3 "$work/info"
test -f "$root/etc/prezero/prezero.toml"
grep -qx /etc/prezero/prezero.toml "$root/var/lib/dpkg/info/prezero.conffiles"

unit=$root/usr/lib/systemd/system/prezero.service
if ! grep -q '^# .*/usr/lib/systemd/system/prezero.service' "$unit"; then
  echo "the unit's comment does not name where the package installs it" >&2
  exit 1
fi
if command -v systemd-analyze >/dev/null; then
  sed "s|ExecStart=/usr/bin/prezero|ExecStart=$prezero|" "$unit" >"$work/prezero.service"
  MANPATH=$root/usr/share/man systemd-analyze verify "$work/prezero.service"
  systemd-analyze security --offline=true --root="$root" prezero.service >"$work/security"
  tail -n 1 "$work/security"
else
  echo "skipped: systemd-analyze (not installed)"
fi

# The unit's command, its paths in the root; the socket, and so the ledger,
# in the root's /run/prezero, as the unit has them (flags override the
# configuration file).
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
read -r -a cmd <<<"${exec_start//\/usr\/bin\/prezero/$prezero}"
cmd=("${cmd[@]//\/etc\/prezero/$root/etc/prezero}")
sock=$root/run/prezero/prezero.sock
if [ "$(id -u)" = 0 ] && [ -w /proc/sys/vm/nr_hugepages ]; then
  pages_before=$(cat /proc/sys/vm/nr_hugepages)
  echo $((pages_before + 128)) >/proc/sys/vm/nr_hugepages
fi
"${cmd[@]}" --socket "$sock" --pool 2MB:target=256M,cap=256M 2>"$work/serve.log" &
serve_pid=$!
for _ in $(seq 1 300); do
  grep -q 'listening on' "$work/serve.log" && break
  sleep 0.1
done
grep -q 'listening on' "$work/serve.log" || { cat "$work/serve.log"; exit 1; }
"$prezero" client alloc 2M --socket "$sock" | tee "$work/alloc"
if [ -n "$pages_before" ]; then
  grep -q 'from service' "$work/alloc" || { echo "the packaged daemon did not serve" >&2; cat "$work/serve.log"; exit 1; }
fi
kill "$serve_pid"
wait "$serve_pid" || true
serve_pid=
test -f "$sock.ledger" || { echo "the daemon left no ledger in $root/run/prezero" >&2; exit 1; }

# A C program built against the -dev package with pkg-config (no run path:
# the library is the system's), run on the library package.
pc_libdir=$root/usr/lib/$multiarch/pkgconfig
if command -v pkg-config >/dev/null && command -v gcc >/dev/null; then
  pc=(env PKG_CONFIG_SYSROOT_DIR="$root" PKG_CONFIG_LIBDIR="$pc_libdir" pkg-config)
  libs=$("${pc[@]}" --libs prezero)
  case "$libs" in *rpath*) echo "pkg-config --libs prezero has a run path: $libs" >&2; exit 1 ;; esac
  # shellcheck disable=SC2046 # the flags are words
  gcc -std=c11 -Wall -Wextra -Werror examples/c/zero_buffer.c -o "$work/zero_buffer" \
    $("${pc[@]}" --cflags --libs prezero)
  objdump -p "$work/zero_buffer" | grep -q "NEEDED *libprezero.so.0" \
    || { echo "zero_buffer is not linked with the shared library" >&2; exit 1; }
  LD_LIBRARY_PATH=$root/usr/lib/$multiarch "$work/zero_buffer" | tee "$work/c"
  grep -q 'cleared 64 MiB' "$work/c"
  echo "pkg-config --libs prezero: $libs"
else
  echo "skipped: a C program against libprezero-dev (no pkg-config or gcc)"
fi

if command -v man >/dev/null; then
  MANWIDTH=80 man -l "$root/usr/share/man/man1/prezero.1.gz" >"$work/man"
  head -n 5 "$work/man"
  MANWIDTH=80 man -l "$root/usr/share/man/man1/prezero-serve.1.gz" >"$work/man-serve"
  for want in --socket EXAMPLES ENVIRONMENT FILES "EXIT STATUS" "SEE ALSO"; do
    grep -q -- "$want" "$work/man-serve" || { echo "prezero-serve(1) lacks $want" >&2; exit 1; }
  done
else
  echo "skipped: man (not installed)"
fi

# Purged, all three: nothing is left but dpkg's own database and the
# directories the root was made with (/run, now empty: the postrm removed
# /run/prezero, the daemon's socket directory and ledger).
dpkg_root --purge "${names[@]}"
left=$(cd "$root" && find . -mindepth 1 ! -path './var' ! -path './var/lib' ! -path './var/lib/dpkg' \
  ! -path './var/lib/dpkg/*' ! -path './run')
if [ -n "$left" ]; then
  echo "left after purging ${names[*]}:" >&2
  echo "$left" >&2
  exit 1
fi
if grep -q '^Package:' "$root/var/lib/dpkg/status"; then
  echo "dpkg still lists a package after the purge" >&2
  exit 1
fi
echo "purged: nothing left"
echo "package tests: ok"
