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
exec bash "$(dirname "$0")/added_goldens.sh" make_generate_goldens.py generate 5 "$out"
