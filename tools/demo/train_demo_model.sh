#!/usr/bin/env bash
# Trains the demo model (tools/demo/train_demo_model.py) into OUT_DIR, on a GPU when there is one
# (under 4 minutes on one H200). Run from anywhere: bash tools/demo/train_demo_model.sh OUT_DIR
# OUT_DIR receives the model directory as examples/demo/model/ holds it: config.json,
# generation_config.json, model.safetensors, the tokenizer files, train_log.jsonl, summary.json.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: bash tools/demo/train_demo_model.sh OUT_DIR" >&2
  exit 2
fi
out=$1
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
# The committed data must be what the generator writes: the eval split is the model's held-out set.
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
python3 "$repo/tools/demo/make_demo_data.py" "$data"
cmp "$data/eval.jsonl" "$repo/examples/demo/eval.jsonl"
cmp "$data/train.jsonl" "$repo/examples/demo/train.jsonl"
python3 "$repo/tools/demo/train_demo_model.py" --out "$out" \
  --eval-data "$repo/examples/demo/eval.jsonl"
echo "model written to $out"
