#!/usr/bin/env bash
# Makes the generation + LoRA goldens on a machine with torch + transformers + peft (the GPU
# machine; everything runs on its CPU in fp32) from the COMMITTED checkpoints in
# tests/data/goldens, which it only reads:
#   bash tools/goldens/run_generate_goldens.sh OUT_DIR
#     -> OUT_DIR/generate_goldens.tar.gz and OUT_DIR/generate_summary.json
# then here: tar -xzf generate_goldens.tar.gz -C tests/data/
# (adds <arch>/generate.json, generate_step_logits.npy, adapter/, adapter_logits.npy,
#  adapter_generate_step_logits.npy and generate_summary.json; overwrites no existing golden).
set -euo pipefail
out=${1:?usage: run_generate_goldens.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
goldens="$here/../../tests/data/goldens"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PYTHONUNBUFFERED=1 python3 "$here/make_generate_goldens.py" "$goldens" "$work/goldens"
# Nothing in the archive may replace a committed file.
(cd "$work/goldens" && find . -type f) | while read -r f; do
  if [ -e "$goldens/$f" ]; then echo "refusing: $f already committed" >&2; exit 1; fi
done
tar -czf "$out/generate_goldens.tar.gz" -C "$work" goldens
cp "$work/goldens/generate_summary.json" "$out/generate_summary.json"
size=$(stat -c %s "$out/generate_goldens.tar.gz")
echo "generate_goldens.tar.gz: $size bytes"
if [ "$size" -gt $((5 * 1024 * 1024)) ]; then echo "archive over 5 MB" >&2; exit 1; fi
