#!/usr/bin/env bash
# The device-memory check on a real CUDA machine, in one command (under 8 minutes):
# builds what it needs, runs the device tests against the real driver, moves bytes
# GPU->GPU, GPU->host and host->GPU between two processes over loopback tcp with every
# byte checked, writes the benchmark table (P9 and its mixed pairs; P10: GPU->GPU between
# two processes over CUDA IPC, on one GPU and, where two are visible, across GPUs), and, where python3
# has torch with CUDA, moves torch CUDA tensors registered through DLPack between two
# processes, with the source written on a side stream that the send only names.
#
#   scripts/gpu_check.sh [--debs DIR] [--out DIR]
#
# --debs DIR: a folder of Debian 12 .deb files (scripts/gpu_check_debs.sh makes it on a
#   Debian machine) unpacked into a private prefix, for a GPU machine that has a compiler,
#   CMake and the CUDA driver but none of pdkv's build dependencies and no package
#   registry. Without it the dependencies must be installed (scripts/install-deps.sh).
# --out DIR: where the logs and JSON figures go (default build-gpu/out).
# Needs: libcuda.so.1 (the driver; no CUDA toolkit is used), one visible GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
debs=""
out=""
while (($#)); do
  case "$1" in
    --debs) debs="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "gpu_check.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
build=build-gpu
out=${out:-$build/out}
mkdir -p "$build" "$out"
start=$(date +%s)
step() { echo "gpu_check: [$(( $(date +%s) - start )) s] $*"; }

if [[ -n "$debs" ]]; then
  # Unpack every .deb into a prefix of our own: its headers, CMake and pkg-config files
  # and shared libraries are then found as if installed.
  prefix=$(realpath "$build")/deps
  rm -rf "$prefix" && mkdir -p "$prefix"
  for deb in "$debs"/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$prefix"
    else
      tmp=$(mktemp -d)
      (cd "$tmp" && ar x "$(realpath "$OLDPWD/$deb")" && tar -xf data.tar.* -C "$prefix")
      rm -rf "$tmp"
    fi
  done
  # Debian's .pc and CMake files name /usr: point them at the prefix.
  grep -rlZ "/usr" "$prefix/usr/lib/x86_64-linux-gnu/pkgconfig" "$prefix/usr/share/pkgconfig" \
    2>/dev/null | xargs -0 -r sed -i "s|^prefix=/usr|prefix=$prefix/usr|"
  lib="$prefix/usr/lib/x86_64-linux-gnu"
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export PKG_CONFIG_PATH="$lib/pkgconfig:$prefix/usr/share/pkgconfig"
  export CPATH="$prefix/usr/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  step "unpacked $(ls "$debs"/*.deb | wc -l) packages into $prefix"
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
step "configuring"
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" -DPDKV_BUILD_PYTHON=OFF \
  > "$out/configure.log"
step "building"
cmake --build "$build" -j"$(nproc)" --target engine_device_test engine_cuda_ipc_test \
  pdkv_engine_peer pdkv_fake_cuda pdkv \
  > "$out/build.log"

step "device tests against the real driver (libcuda.so.1)"
PDKV_TEST_CUDA_LIBRARY=libcuda.so.1 PDKV_BIN_DIR="$build/bin" \
  timeout 180 "$build/bin/engine_device_test" --gtest_output="json:$out/device_test.json" \
  2>&1 | tee "$out/device_test.log" | grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|PASSED|FAILED"
step "cuda_ipc tests against the real driver (two processes, mapped IPC handles)"
PDKV_TEST_CUDA_LIBRARY=libcuda.so.1 PDKV_BIN_DIR="$build/bin" \
  timeout 180 "$build/bin/engine_cuda_ipc_test" --gtest_output="json:$out/cuda_ipc_test.json" \
  2>&1 | tee "$out/cuda_ipc_test.log" | grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|PASSED|FAILED" || true

step "benchmarks (the host arm of each runs in the same process, rounds alternating)"
bench() {
  local name=$1; shift
  timeout 120 "$build/bin/pdkv" bench engine --device cuda --rounds 6 --json "$out/$name.json" "$@" \
    2>&1 | tee "$out/$name.log" | grep -E "^\| P9|raw"
}
bench p9 --memory device
bench p9_h2d --src-memory host --dst-memory device
bench p9_d2h --src-memory device --dst-memory host
# Heterogeneous TP's head slices (512 B pieces): strided copies, not a driver call a piece.
bench p9_head_split --memory device --tokens 16384 --decode-tp 2 --head-split 2
step "P10: GPU->GPU between two processes over CUDA IPC, against cuMemcpyDtoDAsync in one"
ipc() {
  local name=$1; shift
  timeout 120 "$build/bin/pdkv" bench engine --device cuda --memory device --path cuda_ipc \
    --rounds 6 --json "$out/$name.json" "$@" 2>&1 | tee "$out/$name.log" | grep -E "^\| P10" || true
}
ipc p10 --model llama3-8b --tokens 4096 --page 16
ipc p10_page1 --model llama3-8b --tokens 4096 --page 1
ipc p10_head_split --model llama3-8b --tokens 4096 --page 16 --head-split 2
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || echo 1)
if ((gpus >= 2)); then
  ipc p10_across_gpus --model llama3-8b --tokens 4096 --page 16 --peer-device 1
fi
step "torch CUDA tensors through DLPack: GPU->GPU behind a named side stream, host->GPU"
py=$(command -v python3 || true)
if [[ -n "$py" ]] && "$py" -c 'import sys, numpy, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
    2>/dev/null; then
  # The machine's own Python (the one with torch), not Debian's: the module is built for it.
  if cmake -S . -B "$build" -DPDKV_BUILD_PYTHON=ON "-DPython_EXECUTABLE=$py" \
       > "$out/configure-python.log" 2>&1 &&
     cmake --build "$build" -j"$(nproc)" --target pdkv_native_py pdkv_plan_py pdkv_python_files \
       > "$out/build-python.log" 2>&1; then
    PYTHONPATH="$build/python" timeout 180 "$py" scripts/gpu_check_torch.py 2>&1 |
      tee "$out/torch.log" | grep "gpu_check_torch" || true
  else
    echo "gpu_check: could not build the Python module for $("$py" --version 2>&1):" \
      "see $out/configure-python.log and $out/build-python.log"
  fi
else
  echo "gpu_check: no python3 with torch seeing CUDA: the torch check is skipped"
fi

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.csv"
fi
step "done: figures in $out (*.json), logs beside them"
