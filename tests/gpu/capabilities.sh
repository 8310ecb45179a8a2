#!/usr/bin/env bash
# The code paths of other GPUs on this one (FP8RL_CUDA_CAPABILITY, ops/gpu_support.h): for each
# forced capability the op harness (quick cases), the models against the CPU, generation and
# training against the CPU, 10 steps of the GRPO demo, and `bench grpo` at the small shape with
# FP8-row weights (a lower bound of that GPU's speed: this GPU's bandwidth, that GPU's paths).
# From the repo root with a bundle (tests/gpu/bundle.sh):
#   BUILD=build-gpu tests/gpu/capabilities.sh [OUT_DIR]     (CAPS="8.0 8.9 12.0" by default)
# Each step has its own time limit, cut to what is left of DEADLINE seconds (default 540).
set -u
OUT=${1:-${OUT:-/tmp/fp8rl-gpu}}
BUILD=${BUILD:-build-gpu}
DEADLINE=${DEADLINE:-540}
mkdir -p "$OUT"
SUMMARY="$OUT/capabilities.txt"
: > "$SUMMARY"
start=$(date +%s)
. "$(dirname "$0")/env.sh"
FP8RL="$BUILD/bin/fp8rl"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$SUMMARY"
# limited SECONDS: SECONDS cut to what is left of the deadline (0 when under 10 s are left).
limited() {
  local left=$(( DEADLINE - ($(date +%s) - start) ))
  [ "$left" -lt "$1" ] && echo $(( left < 10 ? 0 : left )) || echo "$1"
}
for cap in ${CAPS:-8.0 8.9 12.0}; do
  export FP8RL_CUDA_CAPABILITY=$cap
  log="$OUT/capability_$cap.log"
  : > "$log"
  run() {  # NAME SECONDS CMD...
    local name=$1 secs
    secs=$(limited "$2")
    shift 2
    if [ "$secs" -eq 0 ]; then
      printf '%-5s %-18s SKIPPED (no time left)\n' "$cap" "$name" >> "$SUMMARY"
      return
    fi
    step "$cap $name" "$log" "$secs" "$@"
  }
  run ops 90 "$BIN/test_ops" --quick
  tail -1 "$log" >> "$SUMMARY"
  run models 60 "$BIN/test_model_gpu" --data tests/data --arch all
  run generate 60 "$BIN/test_generate_gpu" --data tests/data
  run train 90 "$BIN/test_train_gpu"
  run "grpo demo" 90 "$FP8RL" grpo --config examples/demo.yaml --device cuda --max-steps 10 \
    --output-dir "$OUT/grpo-demo-$cap" --save-steps 0 --overwrite-output-dir
  run "bench grpo" 90 "$FP8RL" bench grpo --model tools/bench/configs/qwen3-8b --prompts 1 \
    --generations 8 --prompt-tokens 128 --completion-tokens 512 --lora-r 32 --checkpointing \
    --kv-memory 1 --steps 2 --fp8 row --device cuda --out "$OUT/grpo_small_row_$cap.json"
  rm -rf "$OUT/grpo-demo-$cap"
done
unset FP8RL_CUDA_CAPABILITY
python3 - "$OUT" >> "$SUMMARY" <<'PY'
import glob, json, os, sys
for p in sorted(glob.glob(os.path.join(sys.argv[1], "grpo_small_row_*.json"))):
    j = json.load(open(p))
    g = lambda k: j.get("last_step/timing/" + k, 0) or 0
    print(f"{os.path.basename(p)}: rollout {g('rollout_seconds'):.2f} s, step {g('step_seconds'):.2f} s")
PY
cat "$SUMMARY"
