#!/usr/bin/env bash
# Downloads (never installs) the Debian 12 packages scripts/gpu_check.sh needs to build pdkv
# on a GPU machine that has none of them: pdkv's build dependencies and the libraries they
# link, one level deep. Usage: scripts/gpu_check_debs.sh DIR   (run on Debian 12, as root)
set -euo pipefail
dir=${1:?usage: gpu_check_debs.sh DIR}
mkdir -p "$dir"
direct=(libfmt-dev libfmt9 libspdlog-dev libspdlog1.10 nlohmann-json3-dev cppzmq-dev libzmq3-dev
        libzmq5 libcli11-dev libcpp-httplib-dev libcpp-httplib0.11 libmicrohttpd-dev
        libmicrohttpd12 libsodium-dev libsodium23 libgtest-dev libgmock-dev googletest
        libdlpack-dev libnorm-dev libnorm1 libpgm-dev libpgm-5.3-0 libbsd-dev libbsd0
        libgnutls28-dev libgnutls30 libssl-dev libbrotli-dev libkrb5-dev zlib1g-dev
        pybind11-dev)
cd "$dir"
apt-get download "${direct[@]}"
du -sh .
