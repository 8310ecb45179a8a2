#!/usr/bin/env bash
# Quick start, tests: set up (apt + the npm peers), build, run the tests under AddressSanitizer +
# UBSan (a CPU build of its own, build-asan/), the fuzz smoke, then the tokenizer's and chat
# templates' peer tests, which the sanitizer run leaves out (tests/release_only.txt), with CTest
# on the Release build. Every test runs once.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
npm ci --prefix tools/peers/npm --no-audit --no-fund --loglevel=error
# The Release build: the product, the benchmark driver, the GPU tests and the binaries of the
# tests it runs below (tests/release_only.txt); the sanitizer build compiles every test. CI
# builds the CUDA code for Hopper alone (users' builds cover every supported GPU).
release_targets=(fp8rl fp8rl_bench test_ops test_model_gpu test_generate_gpu test_train_gpu
  test_jinja jinja_render_corpus tokenizer_peer_driver)
scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES=90a "${release_targets[@]}"
# The whole CTest suite built with -fsanitize=address,undefined; any report fails (tests/asan.sh).
tests/asan.sh
# Every parser's libFuzzer target for about 30 s each, a target per core, its kept findings
# first (fuzz/README.md); setup installs clang-15 and libFuzzer, a machine without them skips
# this.
fuzz_runtime=(/usr/lib/llvm-15/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a)
if command -v clang++-15 >/dev/null && [ -e "${fuzz_runtime[0]}" ]; then
  fuzz/run.sh --smoke
else
  echo "test.sh: no clang-15/libFuzzer, fuzz smoke skipped" >&2
fi
# The Release build runs what the sanitizer run left out: the peer tests of
# tests/release_only.txt and the GPU tests (which skip without a CUDA device). Two test binaries
# run at once, each with its OpenMP team: spinning threads would steal the cores the other
# binary's team needs (6x slower training tests on 2 cores), so idle threads sleep.
release_only=()
while read -r name; do
  [[ -z "$name" || "$name" == \#* ]] || release_only+=("$name")
done <tests/release_only.txt
# Each listed test must be one the Release build registered: a test whose binary is missing
# from release_targets would otherwise run nowhere.
found=$(ctest --test-dir build -N -R "^($(IFS='|'; echo "${release_only[*]}"))\$" |
  sed -n 's/^Total Tests: //p')
if [ "$found" != "${#release_only[@]}" ]; then
  echo "test.sh: the Release build has ${found:-0} of the ${#release_only[@]} tests of" \
    "tests/release_only.txt; add their binaries to release_targets" >&2
  exit 1
fi
release_only+=(GpuOps GpuModel GpuGenerate GpuTrain)
OMP_WAIT_POLICY=passive ctest --test-dir build --output-on-failure -j"$(nproc)" \
  -R "^($(IFS='|'; echo "${release_only[*]}"))\$"
