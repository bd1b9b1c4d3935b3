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
# Optimisation and debug info per build, chosen for CI's time (three builds on 2 cores):
#   default  -O2 -g1: full speed; -g1 keeps function names and line tables (backtraces,
#            perf) without variable info, which costs a quarter of the compile time.
#   address  -O0 -gline-tables-only: ASan's instrumentation is what the suite needs; at
#            -O2 the optimiser works through it and doubles the compile time.
#   thread   -O1 -gline-tables-only: TSan at -O0 would slow the suite's threads too much.
# Reports keep file:line in every case. Set CMAKE_CXX_FLAGS_RELWITHDEBINFO to override.
case "$sanitize" in
  "") dir=build; opt="-O2 -g1 -DNDEBUG" ;;
  address) dir=build-asan; opt="-O0 -gline-tables-only -DNDEBUG" ;;
  thread) dir=build-tsan; opt="-O1 -gline-tables-only -DNDEBUG" ;;
esac
args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$opt"
      "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$opt")
if [[ -n "$sanitize" ]]; then
  # Sanitizer builds run the C++ suite only: the Python modules (the interpreter is not
  # instrumented, so pytest is not run there) and the benchmarks are left out to keep CI
  # inside its time budget.
  args+=(-DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DPDKV_SANITIZE="$sanitize"
         -DPDKV_BUILD_PYTHON=OFF "-DPDKV_LAYERS=common;plan;engine;proto;http;bootstrap;kv;tests;cli")
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
