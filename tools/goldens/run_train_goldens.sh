#!/usr/bin/env bash
# Makes the trainer goldens on a machine with torch + transformers + peft (the GPU machine;
# everything runs on its CPU in fp32) from the COMMITTED checkpoints and adapters in
# tests/data/goldens, which it only reads:
#   bash tools/goldens/run_train_goldens.sh OUT_DIR
#     -> OUT_DIR/train_goldens.tar.gz and OUT_DIR/train_summary.json
# then here: tar -xzf train_goldens.tar.gz -C tests/data/
# (adds <arch>/train/{train.json, grads.safetensors, sgd_adapter.safetensors,
#  adamw_adapter.safetensors, fp8_row_grads.safetensors} and train_summary.json; overwrites no
#  existing golden).
set -euo pipefail
out=${1:?usage: run_train_goldens.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
goldens="$here/../../tests/data/goldens"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PYTHONUNBUFFERED=1 python3 "$here/make_train_goldens.py" "$goldens" "$work/goldens"
# Nothing in the archive may replace a committed file.
(cd "$work/goldens" && find . -type f) | while read -r f; do
  if [ -e "$goldens/$f" ]; then echo "refusing: $f already committed" >&2; exit 1; fi
done
tar -czf "$out/train_goldens.tar.gz" -C "$work" goldens
cp "$work/goldens/train_summary.json" "$out/train_summary.json"
size=$(stat -c %s "$out/train_goldens.tar.gz")
echo "train_goldens.tar.gz: $size bytes"
if [ "$size" -gt $((3 * 1024 * 1024)) ]; then echo "archive over 3 MB" >&2; exit 1; fi
