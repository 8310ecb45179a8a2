#!/usr/bin/env bash
# Regenerates tests/data/goldens on a machine with torch + transformers (the GPU machine):
#   bash tools/goldens/run_on_gpu_machine.sh OUT_DIR   -> OUT_DIR/goldens.tar.gz
# then here: tar -xzf goldens.tar.gz -C tests/data/
set -euo pipefail
out=${1:?usage: run_on_gpu_machine.sh OUT_DIR}
work=$(mktemp -d)
PYTHONUNBUFFERED=1 python3 "$(dirname "$0")/make_goldens.py" "$work/goldens"
tar -czf "$out/goldens.tar.gz" -C "$work" goldens
cp "$work/goldens/summary.json" "$out/summary.json"
