#!/usr/bin/env bash
# Installs the .deb into a fresh Debian 12 and runs `pdkv demo` there: what a user of
# `apt-get install ./pdkv_*.deb` gets. Not a CTest test: it needs root (chroot, mounts),
# the Debian mirror and ~2 minutes; run it by hand before a release.
#   tests/install/fresh_debian_check.sh <build dir>      (apt-get install mmdebstrap)
set -euo pipefail
build=$(realpath "$1")
work=$(mktemp -d /tmp/pdkv-fresh-debian.XXXXXX)
root=$work/root
cleanup() {
  umount -l "$root/dev/shm" "$root/dev" "$root/proc" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mmdebstrap --variant=minbase bookworm "$root" \
  "deb http://deb.debian.org/debian bookworm main" \
  "deb http://deb.debian.org/debian bookworm-updates main" \
  "deb http://deb.debian.org/debian-security bookworm-security main"
cpack --config "$build/CPackConfig.cmake" -B "$work/out" >/dev/null
cp "$work"/out/pdkv_*_amd64.deb "$root/tmp/"
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount -t tmpfs shm "$root/dev/shm"
chroot "$root" bash -c 'apt-get update -qq &&
  DEBIAN_FRONTEND=noninteractive apt-get install -y /tmp/pdkv_*_amd64.deb'
chroot "$root" bash -c 'cd /tmp && pdkv --version && pdkv demo --no-bench --tokens 4 --prompt-len 12'
echo "fresh Debian 12: apt-get install of the .deb and pdkv demo passed"
