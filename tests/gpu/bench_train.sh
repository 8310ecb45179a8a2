#!/usr/bin/env bash
# The trainer benchmark on the GPU machine, one batch, from the repo root:
#   OUT=$OUT bash tests/gpu/bench_train.sh BUILD_DIR
# fp8rl bench train on the Qwen3-8B preset (random weights), batch 8 x 1024 tokens, r = 32 on
# all seven projections, checkpointing on, FP8-row (also with --offload) and bf16; the HF +
# PEFT anchor of the same shapes (tools/bench/hf_train.py); then test_train_gpu and the demo's GRPO on CUDA with its
# engine-trainer mismatch. JSON and logs go to $OUT.
set -u
BUILD=${1:-build-gpu}
OUT=${OUT:-/tmp/fp8rl-gpu}
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
start=$(date +%s)
. "$(dirname "$0")/env.sh"
FP8RL="$BUILD/bin/fp8rl"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$SUMMARY"
shape="--preset qwen3-8b --batch 8 --seq 1024 --lora-r 32 --checkpointing --steps 3 --warmup 1"
step "bench train row" "$OUT/bench.log" 200 "$FP8RL" bench train $shape --fp8 row \
  --device cuda --out "$OUT/train_row.json"
step "bench train row offload" "$OUT/bench.log" 200 "$FP8RL" bench train $shape --fp8 row \
  --offload --device cuda --out "$OUT/train_row_offload.json"
step "bench train bf16" "$OUT/bench.log" 200 "$FP8RL" bench train $shape --fp8 off \
  --device cuda --out "$OUT/train_bf16.json"
step "hf_train peft bf16" "$OUT/bench.log" 200 sh -c "cd tools/bench && python3 hf_train.py \
  --preset qwen3-8b --batch 8 --seq 1024 --lora-r 32 --steps 3 --warmup 1 > $OUT/train_hf.json"
step "test_train_gpu" "$OUT/train.log" 120 "$BIN/test_train_gpu"
step "grpo demo cuda" "$OUT/grpo.log" 120 "$FP8RL" grpo --config examples/demo.yaml \
  --device cuda --max-steps 20 --output-dir "$OUT/grpo-demo" --save-steps 0 --overwrite-output-dir
python3 - "$OUT/grpo-demo/metrics.jsonl" >> "$SUMMARY" <<'PY'
import json, sys
L = [json.loads(l) for l in open(sys.argv[1])]
print("grpo cuda: logp difference mean/max over steps",
      max(l.get("sampling/sampling_logp_difference/mean", 0) for l in L),
      max(l.get("sampling/sampling_logp_difference/max", 0) for l in L),
      "reward first/last", L[0]["reward"], L[-1]["reward"])
PY
rm -rf "$OUT/grpo-demo"
cat "$SUMMARY"
