#!/usr/bin/env bash
# Makes the Qwen3-MoE goldens on a machine with torch + transformers + peft (the GPU machine;
# everything runs on its CPU in fp32):
#   bash tools/goldens/run_moe_goldens.sh OUT_DIR
#     -> OUT_DIR/moe_goldens.tar.gz and OUT_DIR/moe_summary.json
# then here: tar -xzf OUT_DIR/moe_goldens.tar.gz -C tests/data/
# Adds tests/data/goldens/qwen3_moe/ (the Hub's per-expert layout: checkpoint, ids.json,
# logits_fp32.npy, generate.json, generate_step_logits.npy, an attention-only PEFT adapter and
# its logits), qwen3_moe_fused/ (the same weights in transformers 5's fused layout, its logits)
# and moe_summary.json; overwrites no committed file.
set -euo pipefail
out=${1:?usage: run_moe_goldens.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
goldens="$here/../../tests/data/goldens"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PYTHONUNBUFFERED=1
python3 "$here/make_goldens.py" "$work/goldens" --only qwen3_moe
python3 "$here/make_generate_goldens.py" --archs qwen3_moe --summary generate_summary.json \
  "$work/goldens" "$work/generate"
cp -r "$work/generate/qwen3_moe/." "$work/goldens/qwen3_moe/"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
s = {"logits": json.load(open(f"{w}/goldens/qwen3_moe_summary.json")),
     "generate": json.load(open(f"{w}/generate/generate_summary.json"))}
json.dump(s, open(f"{w}/goldens/moe_summary.json", "w"), indent=1)
PY
rm "$work/goldens/qwen3_moe_summary.json"
# Nothing in the archive may replace a committed file.
(cd "$work/goldens" && find . -type f) | while read -r f; do
  if [ -e "$goldens/$f" ]; then echo "refusing: $f already committed" >&2; exit 1; fi
done
tar -czf "$out/moe_goldens.tar.gz" -C "$work" goldens
cp "$work/goldens/moe_summary.json" "$out/moe_summary.json"
size=$(stat -c %s "$out/moe_goldens.tar.gz")
echo "moe_goldens.tar.gz: $size bytes"
if [ "$size" -gt $((5 * 1024 * 1024)) ]; then echo "archive over 5 MB" >&2; exit 1; fi
