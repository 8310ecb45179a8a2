#!/usr/bin/env bash
# Quick start, main job: set up, build, then compare the FP8 scaling schemes on the bundled
# tiny Qwen3 checkpoint (weight bytes, KL and top-1 vs unquantized, CPU forward speed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
model=tests/data/goldens/qwen3
build/src/cli/fp8rl info "$model"
echo
build/src/cli/fp8rl schemes "$model" "$@"
