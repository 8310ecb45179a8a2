#!/usr/bin/env bash
# The generation engine's GPU run, from a bundle built here (tests/gpu/bundle.sh):
# the ops of the paged cache and the sampler against the CPU, the model forward on CUDA vs the
# CPU, generation on CUDA vs the CPU engine (test_generate_gpu), then `fp8rl bench generate` on
# the Qwen3-8B config (FP8-row and bf16 weights, bf16 KV; 32 prompts x 8 samples, 128 prompt
# tokens, 512 new tokens) beside HF transformers' generate on the same config, and the prefill
# benchmark as a regression check. Logs and a summary go to $OUT (default gpu-results).
#
#   OUT=DIR tests/gpu/engine.sh [BUILD_DIR] [--quick]
set -u
BUILD=build-gpu
QUICK=0
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    *) BUILD="$a" ;;
  esac
done
OUT=${OUT:-gpu-results}
. "$(dirname "$0")/env.sh"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
start=$(date +%s)
CONFIG=tools/bench/configs/qwen3-8b
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/env.txt" 2>&1

for op in store_kv paged_attention sample add attention embedding; do
  step "ops $op" "$OUT/ops.log" 120 "$BIN/test_ops" --op "$op"
  tail -1 "$OUT/ops.log" >> "$SUMMARY"
done
step "model goldens" "$OUT/model.log" 120 "$BIN/test_model_gpu" --data tests/data --arch all
tail -1 "$OUT/model.log" >> "$SUMMARY"
step "model random" "$OUT/model.log" 120 "$BIN/test_model_gpu" --data tests/data --random
tail -1 "$OUT/model.log" >> "$SUMMARY"
step "generate vs cpu" "$OUT/generate.log" 300 "$BIN/test_generate_gpu" --data tests/data
grep -E "^(PASS|FAIL)|failures" "$OUT/generate.log" >> "$SUMMARY"

GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512"
[ $QUICK -eq 1 ] && GEN="--prompts 8 --n 8 --prompt-tokens 128 --max-tokens 64"
for fp8 in row off; do
  step "bench generate $fp8" "$OUT/bench.log" 300 "$BIN/fp8rl_bench" bench generate \
    --model "$CONFIG" $GEN --fp8 "$fp8" --kv-memory 40
done
step "bench generate row fp8-kv" "$OUT/bench.log" 300 "$BIN/fp8rl_bench" bench generate \
  --model "$CONFIG" $GEN --fp8 row --kv-dtype fp8 --kv-memory 40
# The shared-prefix decode path's gain: the issue's shape, then a long prompt where the
# samples' reads of the prompt's KV dominate the step (the first run of each pair has it on).
LONG="--prompts 8 --n 8 --prompt-tokens 4096 --max-tokens 256"
[ $QUICK -eq 1 ] && LONG="--prompts 8 --n 8 --prompt-tokens 4096 --max-tokens 32"
for shape in "$GEN" "$LONG"; do
  for sp in "" "--device-option shared_prefix=false"; do
    step "bench generate row $shape $sp" "$OUT/bench.log" 300 "$BIN/fp8rl_bench" bench generate \
      --model "$CONFIG" $shape --fp8 row --kv-memory 40 $sp
  done
done
if [ $QUICK -eq 0 ]; then
  step "hf generate bf16" "$OUT/hf.log" 400 python3 tools/bench/hf_generate.py \
    --preset qwen3-8b --prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --attn sdpa
  step "bench forward row" "$OUT/bench.log" 120 "$BIN/fp8rl_bench" bench forward \
    --model "$CONFIG" --tokens 8192 --fp8 row --iters 5 --warmup 2 --gemm-iters 5
  step "bench forward off" "$OUT/bench.log" 120 "$BIN/fp8rl_bench" bench forward \
    --model "$CONFIG" --tokens 8192 --fp8 off --iters 5 --warmup 2 --gemm-iters 5
fi
grep -hE '"(fp8|shared_prefix_attention|prompt_tokens|output_tokens_per_second|device_idle_fraction|host_fraction|roofline_output_tokens_per_s|tokens_per_second|forward_seconds_median|peak_allocated_bytes|graph_steps)"' \
  "$OUT/bench.log" "$OUT/hf.log" 2>/dev/null | tr -s ' ' >> "$SUMMARY"
cat "$SUMMARY"
