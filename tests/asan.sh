#!/usr/bin/env bash
# Builds test binaries with AddressSanitizer + UBSan (FP8RL_ASAN=ON, CPU only) in their own
# folder and runs them; any sanitizer report fails the run.
#
#   tests/asan.sh [TARGET ...]      default: test_formats
#   FP8RL_ASAN_BUILD_DIR=DIR        build folder (default: <repo>/build-asan)
#   FP8RL_ASAN_JOBS=N               parallel build jobs (default: 2)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FP8RL_ASAN_BUILD_DIR:-$root/build-asan}"
jobs="${FP8RL_ASAN_JOBS:-2}"
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(test_formats)

# Debug keeps frames readable; -O1 would hide nothing ASan needs but makes traces worse.
cmake -S "$root" -B "$build" -DFP8RL_WITH_CUDA=OFF -DFP8RL_ASAN=ON -DCMAKE_BUILD_TYPE=Debug \
  >/dev/null
cmake --build "$build" -j"$jobs" --target "${targets[@]}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
status=0
for t in "${targets[@]}"; do
  bin="$(find "$build/tests" -type f -name "$t" -perm -u+x | head -n1)"
  if [ -z "$bin" ]; then
    echo "asan.sh: no binary for target $t under $build/tests" >&2
    status=1
    continue
  fi
  echo "asan.sh: running $bin"
  "$bin" --gtest_brief=1 || status=1
done
exit $status
