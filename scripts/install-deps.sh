#!/usr/bin/env bash
# Installs every Debian 12 package pdkv needs to build, test and benchmark (run as root).
# Nothing else is downloaded, ever.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config clang-14 libclang-rt-14-dev
  libzmq3-dev cppzmq-dev nlohmann-json3-dev libcpp-httplib-dev libmicrohttpd-dev libspdlog-dev libfmt-dev
  libcli11-dev libucx-dev ucx-utils libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-dev pybind11-dev python3-numpy python3-pytest python3-matplotlib python3-zmq
  python3-torch
  python3-prometheus-client
  # promtool (python/tests/test_metrics.py checks every /metrics page with it); the
  # Prometheus server it comes with is never started.
  prometheus
  iperf3 iproute2 procps
  python3-tqdm
  # Packaging (README "Install from packages"): the wheel offline, the .deb through CPack.
  python3-build python3-wheel python3-setuptools python3-venv python3-pip dpkg-dev file binutils
  # Cluster secret (libsodium) and the etcd route registry (its tests start real members).
  libsodium-dev etcd-server etcd-client
  # DLPack (the device-memory registration of tensors from any framework).
  libdlpack-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
