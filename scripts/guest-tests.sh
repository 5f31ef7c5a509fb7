#!/usr/bin/env bash
# What one machine cannot show, in guests: Debian's packaged kernel
# (linux-image-amd64, 6.1 on bookworm) under qemu-system-x86_64, in NUMA
# topologies this host lacks. The initramfs holds busybox, numactl, the test
# binaries of this build (at their paths here, so the paths compiled into them
# hold) and the shared libraries they need; scripts/guest/init runs them and
# prints one line per test, which this side asserts on.
#
#   scripts/guest-tests.sh [TOPOLOGY...]   numa2 (2 nodes x 1 vCPU), numa4 (4 nodes x
#                                           2 vCPUs, with a distance table), numa3m
#                                           (2 nodes and a CPU-only one), smp8
#                                           (1 node x 8 vCPUs); default: all four
#
# KVM where a guest boots under it, else TCG (this kernel hangs right after
# decompression under nested KVM on the machines seen so far). Without qemu,
# busybox, numactl or the kernel package it says "skipped: ..." and exits 0;
# once they are there, any failing test fails it. PREZERO_GUEST_FILTER=pattern
# runs only the tests whose name matches (grep -E).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD

skip() {
  echo "skipped: guest tests ($1)"
  exit 0
}

topologies=("$@")
[ ${#topologies[@]} -gt 0 ] || topologies=(numa2 numa4 numa3m smp8)

# Tools, from Debian's packages.
need=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
# busybox-static, not the dynamic busybox: the initramfs has no libraries for it.
[ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 || need+=(busybox-static)
command -v numactl >/dev/null 2>&1 || need+=(numactl)
command -v cpio >/dev/null 2>&1 || need+=(cpio)
if [ ${#need[@]} -gt 0 ]; then
  apt_install() { DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1; }
  apt_install "${need[@]}" || { timeout 300 apt-get update -qq >/dev/null 2>&1 && apt_install "${need[@]}"; } \
    || skip "apt-get could not install ${need[*]}"
fi

# The kernel: the package linux-image-amd64 depends on, unpacked once.
work=target/guest
mkdir -p "$work"
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$kpkg" ] || skip "apt-cache knows no linux-image-amd64 (not a Debian host?)"
kdir=$work/$kpkg
if ! ls "$kdir"/boot/vmlinuz-* >/dev/null 2>&1; then
  rm -rf "$kdir" && mkdir -p "$kdir"
  (cd "$kdir" && timeout 300 apt-get download "$kpkg" >/dev/null 2>&1) || skip "apt-get could not download $kpkg"
  dpkg-deb -x "$kdir"/*.deb "$kdir" && rm -f "$kdir"/*.deb
fi
kernel=$(ls "$kdir"/boot/vmlinuz-* | head -n 1)

# The test binaries of the workspace build (the one `cargo test --workspace`
# made: asking for one package would resolve other features and rebuild), and
# the prezero binary and preload library the CLI's tests run.
mapfile -t exes < <(cargo test --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        t = m["target"]
        kind = "lib" if t["kind"][0] in ("lib", "cdylib", "staticlib", "rlib") else t["kind"][0]
        print(m["package_id"].split("#")[0].rsplit("/", 1)[-1].split("@")[0], kind, t["name"], m["executable"])
')
cargo build --workspace -q
exe() { # package kind name -> path
  for e in "${exes[@]}"; do
    read -r p k n path <<<"$e"
    if [ "$p $k $n" = "$1 $2 $3" ]; then echo "$path"; return; fi
  done
  echo "guest-tests: no test binary $1 $2 $3" >&2
  exit 1
}

# What runs in the guest: name, then the command. The library's tests that make
# sense on another kernel and topology (the exhaustive explorations of pure
# state machines are logic, the same everywhere, and slow under TCG: they run
# natively), the NUMA placement tests, and the CLI's placement scenarios.
lib_skips="--skip service::ledger --skip pool::state::tests::every_sequence --skip service::protocol"
tests=(
  "lib-numa $(exe prezero lib prezero) numa::"
  "numa $(exe prezero test numa) --nocapture"
  "cli-numa $(exe prezero-cli test numa) --nocapture --test-threads=1"
  "region $(exe prezero test region)"
  "pool $(exe prezero test pool)"
  "lib $(exe prezero lib prezero) $lib_skips"
  "clear $(exe prezero test clear)"
  "kernels $(exe prezero test kernels)"
  "template $(exe prezero test template)"
  "lying-daemon $(exe prezero test lying_daemon)"
  # 6.1 has no UFFDIO_MOVE: prezero run --lazy says so once and runs the program.
  "cli-lazy $(exe prezero-cli test run) lazy --nocapture"
)

# The daemon's worker with many cores, and the scrubbers: in the 8-CPU guest only.
smp8_tests=(
  "cli-service $(exe prezero-cli test service) --test-threads=2"
)

build_initramfs() { # topology -> path of the image
  local dir=$work/root-$1 image=$work/initramfs-$1.cpio.gz
  rm -rf "$dir"
  mkdir -p "$dir"/{bin,sbin,usr/bin,proc,sys,dev,tmp,run,guest,lib64}
  cp /bin/busybox "$dir/bin/"
  for app in $(/bin/busybox --list); do
    [ -e "$dir/bin/$app" ] || ln -s busybox "$dir/bin/$app"
  done
  cp scripts/guest/init "$dir/init"
  cp "$(command -v numactl)" "$dir/usr/bin/"
  : >"$dir/guest/tests"
  local files=("$(command -v numactl)")
  local all=("${tests[@]}")
  [ "$1" = smp8 ] && all+=("${smp8_tests[@]}")
  for t in "${all[@]}"; do
    read -r name cmd _ <<<"$t"
    if [ -n "${PREZERO_GUEST_FILTER:-}" ] && ! grep -qE "$PREZERO_GUEST_FILTER" <<<"$name"; then
      continue
    fi
    echo "$t" >>"$dir/guest/tests"
    files+=("$cmd")
  done
  files+=("$top/target/debug/prezero")
  # The recordings some library tests read, at the path compiled into them.
  # (CARGO_MANIFEST_DIR/../machines: the crates' folders must exist too).
  mkdir -p "$dir$top"/{prezero,prezero-cli,prezero-preload} && cp -r "$top/machines" "$dir$top/"
  # Each binary at its own path, without debug info (the image is RAM in the
  # guest), and every library it links.
  local f lib
  for f in "${files[@]}"; do
    [ -e "$f" ] || continue
    mkdir -p "$dir$(dirname "$f")"
    objcopy --strip-debug "$f" "$dir$f" 2>/dev/null || cp "$f" "$dir$f"
    for lib in $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*'); do
      [ -e "$dir$lib" ] && continue
      mkdir -p "$dir$(dirname "$lib")"
      cp -L "$lib" "$dir$lib"
    done
  done
  echo 600 >"$dir/guest/limit"
  # A test that would skip for want of nodes, numactl or pages fails here.
  [ "$1" = smp8 ] || echo 1 >"$dir/guest/require-numa"
  (cd "$dir" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$image"
  echo "$image"
}

qemu_topology() { # topology -> qemu arguments
  case "$1" in
    numa2)
      echo "-smp 2 -m 2G"
      for n in 0 1; do echo "-object memory-backend-ram,id=m$n,size=1G -numa node,nodeid=$n,cpus=$n,memdev=m$n"; done ;;
    numa4)
      echo "-smp 8 -m 4G"
      for n in 0 1 2 3; do echo "-object memory-backend-ram,id=m$n,size=1G -numa node,nodeid=$n,cpus=$((2 * n))-$((2 * n + 1)),memdev=m$n"; done
      # Two sockets of two nodes each: 16 within a socket, 22 across.
      echo "-numa dist,src=0,dst=1,val=16 -numa dist,src=2,dst=3,val=16"
      echo "-numa dist,src=0,dst=2,val=22 -numa dist,src=0,dst=3,val=22"
      echo "-numa dist,src=1,dst=2,val=22 -numa dist,src=1,dst=3,val=22" ;;
    numa3m)
      # Node 2 has a CPU and no memory (a CPU-only node): its threads' pages
      # come from the nearest node that has.
      echo "-smp 3 -m 2G"
      for n in 0 1; do echo "-object memory-backend-ram,id=m$n,size=1G -numa node,nodeid=$n,cpus=$n,memdev=m$n"; done
      echo "-numa node,nodeid=2,cpus=2 -numa dist,src=0,dst=1,val=20 -numa dist,src=0,dst=2,val=12 -numa dist,src=1,dst=2,val=20" ;;
    smp8) echo "-smp 8 -m 2G" ;;
    *) echo "guest-tests: unknown topology $1 (numa2, numa4, numa3m, smp8)" >&2; exit 2 ;;
  esac
}

# KVM if a guest boots under it within seconds, once per run.
accel=tcg
if [ -w /dev/kvm ]; then
  probe=$work/probe
  rm -rf "$probe" && mkdir -p "$probe/bin"
  cp /bin/busybox "$probe/bin/" && ln -s busybox "$probe/bin/sh" && ln -s busybox "$probe/bin/poweroff"
  printf '#!/bin/sh\necho GUEST-KVM-OK\n/bin/poweroff -f\n' >"$probe/init" && chmod +x "$probe/init"
  (cd "$probe" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$work/probe.cpio.gz"
  if timeout 20 qemu-system-x86_64 -machine q35 -accel kvm -cpu host -m 512M -nographic -no-reboot \
      -kernel "$kernel" -initrd "$work/probe.cpio.gz" -append "console=ttyS0 quiet panic=-1" 2>/dev/null \
      | grep -q GUEST-KVM-OK; then
    accel=kvm
  fi
fi
cpu=max
[ $accel = kvm ] && cpu=host
echo "guest tests: kernel $(basename "$kernel") ($kpkg), accel $accel, topologies ${topologies[*]}"

failed=()
for topo in "${topologies[@]}"; do
  image=$(build_initramfs "$topo")
  log=$work/$topo.log
  start=$SECONDS
  # shellcheck disable=SC2046
  timeout 1500 qemu-system-x86_64 -machine q35 -accel $accel -cpu $cpu $(qemu_topology "$topo") \
    -nographic -no-reboot -kernel "$kernel" -initrd "$image" \
    -append "console=ttyS0 quiet panic=-1 transparent_hugepage=madvise" >"$log" 2>&1 || true
  tr -d '\r' <"$log" >"$log.txt"
  grep -E '^GUEST-(BOOT|RESULT)|^(test result|skipped)' "$log.txt" | sed "s/^/[$topo] /"
  if ! grep -q '^GUEST-DONE' "$log.txt"; then
    echo "[$topo] the guest did not finish (see $log.txt)"
    failed+=("$topo: did not finish")
  fi
  while read -r _ name rc _; do
    [ "$rc" = rc=0 ] || failed+=("$topo: $name ($rc)")
  done < <(grep '^GUEST-RESULT' "$log.txt")
  # A failure's own words, since CI keeps only what is printed here.
  if grep -q '^GUEST-RESULT .* rc=[1-9]' "$log.txt"; then
    # (sed, not head: a reader that stops early would fail the pipe, and the script.)
    grep -A30 -E '^---- .* stdout ----' "$log.txt" | sed -n "1,120s/^/[$topo] /p"
  fi
  echo "[$topo] $((SECONDS - start)) s"
done
if [ ${#failed[@]} -gt 0 ]; then
  printf 'guest tests failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "guest tests: all passed"
