#!/usr/bin/env bash
# Quick start, tests: set up (apt + the npm peers), build, run the file-format tests under
# AddressSanitizer, then every test with CTest (its summary is the last thing printed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
npm ci --prefix tools/peers/npm --no-audit --no-fund --loglevel=error
scripts/build.sh
tests/asan.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
