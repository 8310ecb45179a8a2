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
exec bash "$(dirname "$0")/added_goldens.sh" make_train_goldens.py train 3 "$out"
