#!/usr/bin/env bash
# Configures and builds pdkv. Usage: scripts/build.sh [--sanitize=address|thread]
#   default      -> build/        (gcc, RelWithDebInfo): the README build
#   address      -> build-asan/   (clang-14, ASan + UBSan)
#   thread       -> build-tsan/   (clang-14, TSan)
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize=""
for arg in "$@"; do
  case "$arg" in
    --sanitize=address) sanitize=address ;;
    --sanitize=thread) sanitize=thread ;;
    *) echo "build.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo)
case "$sanitize" in
  "") dir=build ;;
  address) dir=build-asan ;;
  thread) dir=build-tsan ;;
esac
if [[ -n "$sanitize" ]]; then
  # Sanitizer builds run the C++ suite only: the Python modules (the interpreter is not
  # instrumented, so pytest is not run there) and the benchmarks are left out to keep CI
  # inside its time budget.
  args+=(-DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DPDKV_SANITIZE="$sanitize"
         -DPDKV_BUILD_PYTHON=OFF "-DPDKV_LAYERS=common;plan;engine;proto;bootstrap;kv;tests;tools")
fi
# ccache, when installed, lets several checkouts (git worktrees) share compiled objects.
# The base directory and no hashed cwd make objects from /work/a and /work/b hit each other.
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(pwd)}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
  args+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$dir" "${args[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
echo "$dir"
