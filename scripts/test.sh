#!/usr/bin/env bash
# Quick start, tests: set up (apt + the npm peers), build, run the file-format tests under
# AddressSanitizer, then every test with CTest (its summary is the last thing printed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
npm ci --prefix tools/peers/npm --no-audit --no-fund --loglevel=error
scripts/build.sh
tests/asan.sh
# Two test binaries run at once, each with its OpenMP team: spinning threads would steal the
# cores the other binary's team needs (6x slower training tests on 2 cores), so idle threads
# sleep.
OMP_WAIT_POLICY=passive ctest --test-dir build --output-on-failure -j"$(nproc)"
