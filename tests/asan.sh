#!/usr/bin/env bash
# Builds fp8rl and its tests with AddressSanitizer + UBSan (FP8RL_ASAN=ON, CPU only) in their
# own folder and runs them; any sanitizer report fails the run.
#
#   tests/asan.sh                   build everything CTest runs, then its tests but the few
#                                   left to the Release run (tests/release_only.txt) (CI)
#   tests/asan.sh TARGET ...        build those test binaries and run them directly
#   FP8RL_ASAN_BUILD_DIR=DIR        build folder (default: <repo>/build-asan)
#   FP8RL_ASAN_JOBS=N               parallel build jobs and tests (default: the cores)
#   FP8RL_ASAN_CXX_FLAGS=FLAGS      optimisation and debug flags (default: -O1 -g1)
#
# -O1 (not -O0): the training and generation tests run several times faster and ASan loses
# nothing; with -fno-omit-frame-pointer and -g1's line tables every frame of a report still has
# its function, file and line. The Debug configuration keeps assert() (no NDEBUG).
#
# A report ends the process with SIGABRT (abort_on_error), and the harnesses that run fp8rl
# count a death by a signal as a failure even where they expect an error exit. ASan and
# LeakSanitizer reports also go to files under <build>/sanitizer-logs (log_path), checked after
# CTest: that catches a report in a child whose harness ignores its status. GCC's UBSan runtime
# ignores log_path when ASan is linked too, so UBSan reports are on the test's stderr.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FP8RL_ASAN_BUILD_DIR:-$root/build-asan}"
jobs="${FP8RL_ASAN_JOBS:-$(nproc)}"
targets=("$@")

cmake -S "$root" -B "$build" -DFP8RL_WITH_CUDA=OFF -DFP8RL_ASAN=ON -DFP8RL_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="${FP8RL_ASAN_CXX_FLAGS:--O1 -g1}" >/dev/null
if [ ${#targets[@]} -eq 0 ]; then
  cmake --build "$build" -j"$jobs"
else
  cmake --build "$build" -j"$jobs" --target "${targets[@]}"
fi

logs="$build/sanitizer-logs"
rm -rf "$logs"
mkdir -p "$logs"
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}:log_path=$logs/asan"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}"
# The tests left to the Release CTest (tests/release_only.txt).
release_only=()
while read -r name; do
  [[ -z "$name" || "$name" == \#* ]] || release_only+=("$name")
done <"$root/tests/release_only.txt"
status=0
if [ ${#targets[@]} -eq 0 ]; then
  # As in scripts/test.sh: idle OpenMP threads sleep, so that two test binaries share the cores.
  OMP_WAIT_POLICY=passive ctest --test-dir "$build" --output-on-failure -j"$jobs" \
    -E "^($(IFS='|'; echo "${release_only[*]}"))\$" || status=1
else
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
fi

reports=("$logs"/*)
if [ -e "${reports[0]}" ]; then
  for f in "${reports[@]}"; do
    echo "asan.sh: sanitizer report $f:" >&2
    cat "$f" >&2
  done
  echo "asan.sh: ${#reports[@]} sanitizer report(s), see above" >&2
  status=1
fi
exit $status
