#!/usr/bin/env bash
# What one machine cannot show, in guests: Debian's packaged kernels under
# qemu-system-x86_64, in NUMA topologies this host lacks. 6.1 is bookworm's
# linux-image-amd64; 6.12 the LTS of bookworm-backports (fetched through a
# private apt list under target/guest: the host's sources stay as they are),
# where the lazy mode runs (UFFDIO_MOVE). The initramfs holds busybox, numactl,
# the test binaries of this build and the C programs the preload's tests run
# (at their paths here, so the paths compiled into them hold) and the shared
# libraries they need; scripts/guest/init runs them and prints one line per
# test, which this side asserts on.
#
#   scripts/guest-tests.sh [[KERNEL:]TOPOLOGY...]
#       KERNEL     6.1 or 6.12 (default 6.1)
#       TOPOLOGY   numa2 (2 nodes x 1 vCPU), numa4 (4 nodes x 2 vCPUs, with a
#                  distance table), numa3m (2 nodes and a CPU-only one), smp8
#                  (1 node x 8 vCPUs)
#       no argument: every topology on both kernels (CI names its own pairs)
#
# KVM where a guest boots under it, else TCG (these kernels hang right after
# decompression under nested KVM on the machines seen so far). Without qemu,
# busybox, numactl or a kernel package it says "skipped: ..." and exits 0;
# once they are there, any failing test fails it, and so does a test that
# skips for want of what the guest has: NUMA nodes, and on 6.12 the lazy mode
# and a memory cgroup (PREZERO_REQUIRE: prezero-testkit's kinds).
# PREZERO_GUEST_FILTER=pattern runs only the tests whose name matches (grep -E).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD

skip() {
  echo "skipped: guest tests ($1)"
  exit 0
}

pairs=("$@")
if [ ${#pairs[@]} -eq 0 ]; then
  for k in 6.1 6.12; do for t in numa2 numa4 numa3m smp8; do pairs+=("$k:$t"); done; done
fi

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

# The kernels: the package linux-image-amd64 depends on, of bookworm for 6.1
# and of bookworm-backports for 6.12, each unpacked once under target/guest.
work=target/guest
mkdir -p "$work"
# The build's own target directory (CARGO_TARGET_DIR, as cargo takes it).
tdir=$(realpath -m "${CARGO_TARGET_DIR:-$top/target}")
# apt's options for the backports suite alone, from the same mirror as the
# host's own sources, with lists and cache of its own.
backports_apt() {
  local dir=$PWD/$work/apt-backports uri
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  if [ ! -s "$dir/sources.list" ]; then
    uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2; exit}')
    [ -n "$uri" ] || uri=$(awk '$1 == "deb" && $2 !~ /^\[/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
    [ -n "$uri" ] || return 1
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri bookworm-backports main" >"$dir/sources.list"
  fi
  echo "-o Dir::Etc::SourceList=$dir/sources.list -o Dir::Etc::SourceParts=/dev/null"
  echo "-o Dir::State::Lists=$dir/lists -o Dir::Cache=$dir/cache"
}
fetch_kernel() { # 6.1|6.12 -> path of its vmlinuz, or a line on stderr
  local opts=() kpkg kdir
  case "$1" in
    6.1) ;;
    6.12)
      mapfile -t opts < <(backports_apt | tr ' ' '\n') || true
      [ ${#opts[@]} -gt 0 ] || { echo "no Debian mirror in the host's apt sources" >&2; return 1; }
      ls "$work"/apt-backports/lists/*backports*Packages >/dev/null 2>&1 \
        || timeout 300 apt-get "${opts[@]}" update -qq >/dev/null 2>&1 \
        || { echo "apt-get update of bookworm-backports failed" >&2; return 1; } ;;
  esac
  kpkg=$(apt-cache "${opts[@]}" depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  case "$kpkg" in
    "linux-image-$1".*) ;;
    *) echo "linux-image-amd64 depends on '${kpkg:-nothing}', not a $1 kernel (not a bookworm host?)" >&2; return 1 ;;
  esac
  kdir=$work/$kpkg
  if ! ls "$kdir"/boot/vmlinuz-* >/dev/null 2>&1; then
    rm -rf "$kdir" && mkdir -p "$kdir"
    (cd "$kdir" && timeout 300 apt-get "${opts[@]}" download "$kpkg" >/dev/null 2>&1) \
      || { echo "apt-get could not download $kpkg" >&2; return 1; }
    dpkg-deb -x "$kdir"/*.deb "$kdir" && rm -f "$kdir"/*.deb
  fi
  ls "$kdir"/boot/vmlinuz-* | head -n 1
}
declare -A kernel_of
for pair in "${pairs[@]}"; do
  k=6.1
  [[ $pair == *:* ]] && k=${pair%%:*}
  case "$k" in 6.1|6.12) ;; *) echo "guest-tests: unknown kernel $k (6.1, 6.12)" >&2; exit 2 ;; esac
  [ -n "${kernel_of[$k]:-}" ] && continue
  kernel_of[$k]=$(fetch_kernel "$k" 2>"$work/why") || skip "the $k kernel: $(cat "$work/why")"
done

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
lib_skips="--skip pool::state::tests::every_sequence"
tests=(
  "lib-numa $(exe prezero lib prezero) numa::"
  "numa $(exe prezero test numa) --nocapture"
  "cli-numa $(exe prezero-cli test numa) --nocapture --test-threads=1"
  "region $(exe prezero test region)"
  "pool $(exe prezero test pool)"
  "lib $(exe prezero lib prezero) $lib_skips"
  "sys-lib $(exe prezero-sys lib prezero_sys)"
  "service-lib $(exe prezero-service lib prezero_service) --skip ledger:: --skip protocol::"
  "clear $(exe prezero test clear)"
  "kernels $(exe prezero test kernels)"
  "template $(exe prezero test template)"
  "lying-daemon $(exe prezero-service test lying_daemon)"
  # Who pays: two tenants in cgroups of their own, the daemon in a third
  # (cgroup v2 with hugetlb, memory and cpu: the init enables them).
  "charging $(exe prezero-cli test charging) --nocapture --test-threads=1"
  # On 6.1 (no UFFDIO_MOVE) prezero run --lazy says so once and runs the program.
  "cli-lazy $(exe prezero-cli test run) lazy --nocapture"
)

# Memory pressure: a plain program beside one under prezero that
# churns, and a memory cgroup past its high mark, on 2 GiB; in the guests that
# CI runs on each kernel with NUMA (a minute and a half each under TCG).
pressure_tests=("pressure $(exe prezero-cli test pressure) --nocapture")

# The preload's lazy mode against its C programs, on 6.12 (6.1 has no
# UFFDIO_MOVE: cli-lazy checks its fallback), in the 2-node guest (3 minutes
# under TCG). The host builds the programs here, at the paths the tests look
# in: the guests have no gcc.
lazy_tests=$(exe prezero-preload test lazy)
"$lazy_tests" --exact the_c_test_programs_build -q >/dev/null
# Preferring node 0: the suite's programs wait for the reserve to fill, and
# a process fills only its node's part (the lanes of the placement
# scenarios are cli-numa's); on both CPUs (a starved handler needs one).
lazy_612_numa2=("preload-lazy numactl --preferred=0 $lazy_tests --test-threads=1")
# And with every userfaultfd call of a kind failing from the Nth on (the
# preload's fault injection, as a memory cgroup at its limit fails them).
faults_tests=$(exe prezero-preload test faults)
"$faults_tests" --exact the_fault_injecting_library_and_programs_build -q >/dev/null
lazy_612_numa2+=("preload-faults $faults_tests --exact calls_that_fail_for_good_hang_no_fault --nocapture")
# The preload as a guest in the program's process (tests/c/guest.c): who
# its threads are after every route, an exit beside busy processes, a
# descriptor closed behind its back, a memory cgroup (v2 here), and what the
# review found (guest_review); on 6.12 with the lazy mode.
guest_tests=$(exe prezero-preload test guest)
"$guest_tests" --exact the_guest_program_builds -q >/dev/null
guest_tests_line=("preload-guest $guest_tests --test-threads=1 --nocapture")
prebuilt=("$tdir"/debug/lazy-c/* "$tdir"/preload/debug/libprezero_preload.so "$lazy_tests"
  "$tdir"/debug/preload-c/{preload_stress,libpreload_dl.so} "$tdir"/preload-fault/debug/libprezero_preload.so "$faults_tests"
  "$tdir"/debug/guest-c/{guest,guest_review} "$guest_tests")

# The daemon's worker with many cores, and the scrubbers: in the 8-CPU guest only.
smp8_tests=(
  "cli-service $(exe prezero-cli test service) --test-threads=2"
)

build_initramfs() { # kernel topology -> path of the image
  local dir=$work/root-$1-$2 image=$work/initramfs-$1-$2.cpio.gz
  rm -rf "$dir"
  mkdir -p "$dir"/{bin,sbin,usr/bin,proc,sys,dev,tmp,run,guest,lib64}
  cp /bin/busybox "$dir/bin/"
  for app in $(/bin/busybox --list); do
    [ -e "$dir/bin/$app" ] || ln -s busybox "$dir/bin/$app"
  done
  cp scripts/guest/init "$dir/init"
  cp "$(command -v numactl)" "$dir/usr/bin/"
  : >"$dir/guest/tests"
  local files=("$(command -v numactl)" "${prebuilt[@]}")
  local all=("${tests[@]}")
  [ "$2" = smp8 ] && all+=("${smp8_tests[@]}")
  [ "$1:$2" = 6.12:numa2 ] && all+=("${lazy_612_numa2[@]}")
  case "$1:$2" in 6.12:numa2 | 6.1:numa3m) all+=("${pressure_tests[@]}") ;; esac
  # The guest suite (4 minutes under TCG) in the guest with the lazy mode; 6.1's
  # (its lazy arm skips) by hand: PREZERO_GUEST_FILTER=preload-guest ... 6.1:numa3m.
  case "$1:$2" in 6.12:numa2) all+=("${guest_tests_line[@]}") ;; esac
  for t in "${all[@]}"; do
    read -r name cmd _ <<<"$t"
    if [ -n "${PREZERO_GUEST_FILTER:-}" ] && ! grep -qE "$PREZERO_GUEST_FILTER" <<<"$name"; then
      continue
    fi
    echo "$t" >>"$dir/guest/tests"
    files+=("$cmd")
  done
  files+=("$tdir/debug/prezero")
  # The recordings some library tests read, at the path compiled into them.
  # (CARGO_MANIFEST_DIR/../machines: the crates' folders must exist too).
  mkdir -p "$dir$top"/{prezero,prezero-cli,prezero-preload} && cp -r "$top/machines" "$dir$top/"
  # The preload's tests know the target dir by cargo's mark.
  mkdir -p "$dir$tdir" && cp "$tdir/CACHEDIR.TAG" "$dir$tdir/"
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
  # A test that would skip for want of a small machine fails here (every
  # guest is one), so does one that would for want of nodes, numactl or pages
  # (but in smp8), in numa3m one that would for want of its CPU-only node, and
  # on 6.12 one that would for want of the lazy mode or a memory cgroup
  # (prezero-testkit's kinds).
  local require=(machine)
  [ "$2" = smp8 ] || { echo 1 >"$dir/guest/require-numa"; require+=(numa); }
  [ "$2" != numa3m ] || require+=(topology)
  [ "$1" = 6.12 ] && require+=(uffd memcg)
  { echo "export PREZERO_TEST_PREBUILT=1"
    echo "export PREZERO_REQUIRE=$(IFS=,; echo "${require[*]}")"; } >"$dir/guest/env"
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
keys=("${!kernel_of[@]}")
kernel=${kernel_of[${keys[0]}]}
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
echo "guest tests: accel $accel; $(for k in "${!kernel_of[@]}"; do printf '%s: %s; ' "$k" "$(basename "${kernel_of[$k]}")"; done)pairs ${pairs[*]}"

failed=()
for pair in "${pairs[@]}"; do
  k=6.1 topo=$pair
  [[ $pair == *:* ]] && k=${pair%%:*} topo=${pair#*:}
  tag=$k:$topo
  image=$(build_initramfs "$k" "$topo")
  log=$work/$k-$topo.log
  start=$SECONDS
  for attempt in 1 2; do
    # shellcheck disable=SC2046
    timeout 1500 qemu-system-x86_64 -machine q35 -accel $accel -cpu $cpu $(qemu_topology "$topo") \
      -nographic -no-reboot -kernel "${kernel_of[$k]}" -initrd "$image" \
      -append "console=ttyS0 quiet panic=-1 transparent_hugepage=madvise" >"$log" 2>&1 || true
    tr -d '\r' <"$log" >"$log.txt"
    # A guest kernel that panicked (6.12 under TCG double-faulted once, in
    # the lazy suite's preload_stress run) is said, with its oops and the
    # test it ran, and booted once more; a second panic fails the pair.
    grep -q '^GUEST-DONE' "$log.txt" || ! grep -q 'Kernel panic' "$log.txt" && break
    echo "[$tag] the guest kernel panicked (attempt $attempt), in $(grep -o '^test [a-z_]* \.\.\. ' "$log.txt" | tail -n 1):"
    grep -m 3 -E 'BUG|Oops|RIP:' "$log.txt" | sed "s/^/[$tag]   /"
    [ "$attempt" = 2 ] || cp "$log.txt" "$log.panic.txt"
  done
  grep -E '^GUEST-(BOOT|RESULT)|^(test result|skipped)' "$log.txt" | sed "s/^/[$tag] /"
  if ! grep -q '^GUEST-DONE' "$log.txt"; then
    echo "[$tag] the guest did not finish (see $log.txt)"
    failed+=("$tag: did not finish")
  fi
  while read -r _ name rc _; do
    [ "$rc" = rc=0 ] || failed+=("$tag: $name ($rc)")
  done < <(grep '^GUEST-RESULT' "$log.txt")
  # A failure's own words, since CI keeps only what is printed here.
  if grep -q '^GUEST-RESULT .* rc=[1-9]' "$log.txt"; then
    # (sed, not head: a reader that stops early would fail the pipe, and the script.)
    # (|| true: a failure without cargo's "---- stdout ----" block, a test run with
    # --nocapture, would end the script here under pipefail, and the pairs after it.)
    { grep -A30 -E '^---- .* stdout ----|panicked at' "$log.txt" || true; } | sed -n "1,120s/^/[$tag] /p"
  fi
  echo "[$tag] $((SECONDS - start)) s"
done
if [ ${#failed[@]} -gt 0 ]; then
  printf 'guest tests failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "guest tests: all passed"
