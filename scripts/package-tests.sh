#!/usr/bin/env bash
# The Debian package as an operator meets it: built (from the dev
# build CI has already; scripts/package-deb.sh without --debug makes the
# release one), checked by lintian, installed by dpkg into a fresh root, its
# `prezero info` run from there, its unit verified and scored by
# systemd-analyze, `prezero serve` started with the unit's ExecStart line and
# the packaged configuration (a temporary socket; a few hugetlb pages
# reserved, and given back), a client served, `man prezero` rendered.
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

deb=$(scripts/package-deb.sh --debug 2>"$work/build.log") || { cat "$work/build.log"; exit 1; }
echo "package: $deb, $(du -k "$deb" | cut -f1) KiB, $(dpkg-deb -c "$deb" | grep -vc '/$') files"

# Two warnings stay, both about shipping the library in the package of the
# command and daemon rather than in libprezero0.N and libprezero-dev of its
# own (a split for an upload to Debian, not for a package built here):
# link-to-shared-library-in-wrong-package, package-name-doesnt-match-sonames.
if command -v lintian >/dev/null; then
  lintian --allow-root "$deb" | tee "$work/lintian" || true
  if grep -v -e link-to-shared-library-in-wrong-package -e package-name-doesnt-match-sonames \
    "$work/lintian" | grep -q '^[EW]:'; then
    echo "lintian: errors or warnings beyond the two explained above" >&2
    exit 1
  fi
else
  echo "skipped: lintian (not installed)"
fi

root=$work/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
: >"$root/var/lib/dpkg/status"
# A fresh root has no libc6 package to depend on, and no ldconfig to trigger.
dpkg --root="$root" --force-depends --force-not-root --no-triggers -i "$deb" >"$work/dpkg.log" 2>&1 \
  || { cat "$work/dpkg.log"; exit 1; }
prezero=$root/usr/bin/prezero
"$prezero" info >"$work/info"
head -n 3 "$work/info"
test -f "$root/etc/prezero/prezero.toml"
grep -qx /etc/prezero/prezero.toml "$root/var/lib/dpkg/info/prezero.conffiles"

unit=$root/usr/lib/systemd/system/prezero.service
if command -v systemd-analyze >/dev/null; then
  sed "s|ExecStart=/usr/bin/prezero|ExecStart=$prezero|" "$unit" >"$work/prezero.service"
  MANPATH=$root/usr/share/man systemd-analyze verify "$work/prezero.service"
  systemd-analyze security --offline=true --root="$root" prezero.service >"$work/security"
  tail -n 1 "$work/security"
else
  echo "skipped: systemd-analyze (not installed)"
fi

# The unit's command, its paths in the root; the socket moved where a test may
# make it (flags override the configuration file).
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
read -r -a cmd <<<"${exec_start//\/usr\/bin\/prezero/$prezero}"
cmd=("${cmd[@]//\/etc\/prezero/$root/etc/prezero}")
sock=$work/run/prezero.sock
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

if command -v man >/dev/null; then
  MANWIDTH=80 man -l "$root/usr/share/man/man1/prezero.1.gz" >"$work/man"
  head -n 5 "$work/man"
  MANWIDTH=80 man -l "$root/usr/share/man/man1/prezero-serve.1.gz" | grep -q -- '--socket'
else
  echo "skipped: man (not installed)"
fi
echo "package tests: ok"
