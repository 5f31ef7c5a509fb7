#!/usr/bin/env bash
# The library's tests on aarch64, cross-built and run under qemu user-mode
# emulation (the dc-zva kernel and the aarch64 paths run nowhere else in CI).
# Without the network to install qemu, the cross linker or the rust target it
# says "skipped: ..." and exits 0; once they are there, any failure fails it.
# qemu-user maps no hugetlb pages (those tests probe for that and skip) and
# ignores MADV_POPULATE_WRITE (prefault notices and touches the pages instead).
set -euo pipefail
cd "$(dirname "$0")/.."

target=aarch64-unknown-linux-gnu
sysroot=/usr/aarch64-linux-gnu

skip() {
  echo "skipped: aarch64 tests under qemu ($1)"
  exit 0
}

have_tools() {
  command -v qemu-aarch64 >/dev/null 2>&1 \
    && command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 \
    && [ -e "$sysroot/lib/crt1.o" ]
}

if ! have_tools; then
  apt_install() {
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y --no-install-recommends \
      qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross >/dev/null 2>&1
  }
  # The package lists may be stale or absent: refresh them only when needed.
  apt_install || { timeout 300 apt-get update >/dev/null 2>&1 && apt_install; } \
    || skip "apt-get could not install qemu-user, gcc-aarch64-linux-gnu and libc6-dev-arm64-cross"
  have_tools || { echo "qemu-aarch64 or the aarch64 cross linker missing after apt-get install" >&2; exit 1; }
fi

if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  timeout 300 rustup target add "$target" >/dev/null 2>&1 \
    || skip "rustup could not fetch the $target target"
fi

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L $sysroot"
# Its own target dir, so the native builds are never blocked on its lock.
export CARGO_TARGET_DIR=target/aarch64
# No debug info: the cross build is most of this stage's time, and backtraces
# from under qemu are all it would add.
export CARGO_PROFILE_DEV_DEBUG=false

start=$SECONDS
# Unit, integration and doc tests of the library and of its OS layer (prezero-sys:
# 64 KiB pages, calls qemu-user lacks), all through the runner. Not the C
# ABI (prezero-capi): its template entry compiles the register form once per word
# count, minutes under this build, and the C tests run natively. Not the service
# (its ledger's exhaustive exploration, the protocol's every truncation) nor the
# pool state machine's exhaustive exploration: logic, the same on every
# architecture and slow under emulation (40 s), run natively only.
cargo test -p prezero-sys --target "$target"
cargo test -p prezero --target "$target" -- --skip pool::state::tests::every_sequence
# The portable paths an arm64 CPU without `dc zva` takes (DCZID_EL0.DZP set).
PREZERO_CPU=armv8.0,-dc-zva cargo test -q -p prezero --target "$target" \
  --test kernels --test template --test pool --test clear
echo "aarch64 tests under qemu: passed in $((SECONDS - start)) s (and again without dc-zva)"
