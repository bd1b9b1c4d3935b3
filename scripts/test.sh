#!/usr/bin/env bash
# Runs every pdkv test: builds (incrementally), then CTest runs the C++ tests and the
# Python tests (pytest is registered as CTest tests). Usage:
#   scripts/test.sh                      # the README test command
#   scripts/test.sh --sanitize=address   # same suite under ASan + UBSan (clang-14)
#   scripts/test.sh --sanitize=thread    # same suite under TSan (clang-14)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(scripts/build.sh "$@" | tail -n 1)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" --timeout 300
