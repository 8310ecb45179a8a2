#!/usr/bin/env bash
# Runs every GPU test and benchmark from a build made elsewhere (nothing is built here), in
# order of importance, each step under its own time limit, and writes logs and a summary under
# $OUT (default ./gpu-results): at most 8 files, a small fixed set to copy back.
#
#   tests/gpu/run.sh [BUILD_DIR] [--skip-hf] [--skip-memcheck] [--skip-bench] [--exhaustive]
#
# --skip-bench leaves out the prefill benchmarks, the HF anchor and the op perf mode (the
# correctness steps alone, about a third of the time).
#
# BUILD_DIR holds tests/gpu/{test_ops,test_model_gpu,fp8rl_bench} and lib/ with the shared
# libraries they need beyond CUDA, or bundle.tgz with them (tests/gpu/bundle.sh makes that
# from a build).
# Steps: device info + kernel resource usage, op harness, model on CUDA vs CPU (test_model_gpu
# and the CLI's logits, cli_logits.sh), Qwen3-8B
# prefill benchmark for --fp8 row/off/block/tensor (random weights, 8192 tokens), the HF
# transformers bf16 anchor on the same config, op perf mode, compute-sanitizer memcheck of the
# harness's quick subset.
set -u
BUILD=build-cuda
SKIP_HF=0
SKIP_MEMCHECK=0
SKIP_BENCH=0
EXHAUSTIVE=0
for a in "$@"; do
  case "$a" in
    --exhaustive) EXHAUSTIVE=1 ;;
    --skip-hf) SKIP_HF=1 ;;
    --skip-memcheck) SKIP_MEMCHECK=1 ;;
    --skip-bench) SKIP_BENCH=1 ;;
    *) BUILD="$a" ;;
  esac
done
OUT=${OUT:-gpu-results}
. "$(dirname "$0")/env.sh"
TOKENS=${TOKENS:-8192}
CONFIG=tools/bench/configs/qwen3-8b
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
start=$(date +%s)


{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  uname -r
  echo "--- kernel resource usage (registers, shared memory, stack, spills)"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$BIN/test_ops" | grep -E "cublas|fmt|gomp|not found"
  "$CUOBJDUMP" --dump-resource-usage "$BIN/test_ops" 2>&1 | grep -E "Function|REG" | \
    sed -E 's/^\s+//' | paste - - | sed -E 's/Function ([^:]*):/\1/' | cut -c1-220
} > "$OUT/env.txt" 2>&1

# One process per op (the registry's names, so no case is left out): a kernel fault (a sticky
# CUDA error) then costs only that op's results.
for op in $("$BIN/test_ops" --list | awk '{print $1}' | sort -u); do
  step "ops $op" "$OUT/ops.log" 60 "$BIN/test_ops" --op "$op"
  tail -1 "$OUT/ops.log" >> "$SUMMARY"
done
# The proof that the quantizers' division is IEEE division: all 2^46 significand pairs (a
# minute on an H200; the per-op run above samples 2^36 of them).
if [ $EXHAUSTIVE -eq 1 ]; then
  step "ops fp8_quotient exhaustive" "$OUT/ops.log" 300 "$BIN/test_ops" --exhaustive --op fp8_quotient
  tail -1 "$OUT/ops.log" >> "$SUMMARY"
fi
# The mma.sync attention kernel (what non-Hopper GPUs run) on this GPU too.
step "ops attention mma.sync" "$OUT/ops.log" 60 "$BIN/test_ops" --no-wgmma --op attention
tail -1 "$OUT/ops.log" >> "$SUMMARY"
# The attention backward's reference kernels (the tiled ones ran above).
step "ops attention backward reference" "$OUT/ops.log" 120 "$BIN/test_ops" \
  --reference-attention-backward --op paged_attention_backward
tail -1 "$OUT/ops.log" >> "$SUMMARY"
step "model goldens" "$OUT/model.log" 60 "$BIN/test_model_gpu" --data tests/data --arch all
tail -1 "$OUT/model.log" >> "$SUMMARY"
step "model random" "$OUT/model.log" 60 "$BIN/test_model_gpu" --data tests/data --random
step "trainer vs cpu" "$OUT/train.log" 120 "$BIN/test_train_gpu"
tail -1 "$OUT/model.log" >> "$SUMMARY"
# fp8rl logits --device cuda against both CPU references, with top-1 agreement.
step "cli logits" "$OUT/model.log" 120 bash tests/gpu/cli_logits.sh "$BUILD"

[ $SKIP_BENCH -eq 1 ] && SKIP_HF=1
[ $SKIP_BENCH -eq 0 ] && for fp8 in row off block tensor; do
  step "bench qwen3-8b $fp8" "$OUT/bench.log" 60 "$BIN/fp8rl_bench" bench forward \
    --model "$CONFIG" --tokens "$TOKENS" --fp8 "$fp8" --iters 5 --warmup 2 --gemm-iters 20
done
[ $SKIP_BENCH -eq 0 ] && for fp8 in row off; do
  step "bench llama-3.1-8b $fp8" "$OUT/bench.log" 60 "$BIN/fp8rl_bench" bench forward \
    --model tools/bench/configs/llama-3.1-8b --tokens "$TOKENS" --fp8 "$fp8" --iters 5 \
    --warmup 2 --gemm-iters 20
done
if [ $SKIP_HF -eq 0 ]; then
  for cfg in "$CONFIG" tools/bench/configs/llama-3.1-8b; do
    step "hf bf16 $(basename "$cfg")" "$OUT/hf.log" 100 python3 tools/bench/hf_forward.py \
      --model "$cfg" --tokens "$TOKENS" --iters 5 --warmup 2
  done
fi
if [ $SKIP_BENCH -eq 0 ]; then
  step "op perf" "$OUT/perf.log" 60 "$BIN/test_ops" --perf
  step "op perf attention mma.sync" "$OUT/perf.log" 60 "$BIN/test_ops" --perf --no-wgmma \
    --op attention
fi
if [ $SKIP_MEMCHECK -eq 0 ]; then
  step "memcheck (quick)" "$OUT/memcheck.log" 60 "$SANITIZER" --tool memcheck \
    --leak-check no --error-exitcode 3 "$BIN/test_ops" --quick
  tail -3 "$OUT/memcheck.log" >> "$SUMMARY"
  # Shared-memory races and barrier misuse in the attention kernel's cp.async pipeline.
  step "racecheck attention" "$OUT/memcheck.log" 60 "$SANITIZER" --tool racecheck \
    --error-exitcode 3 "$BIN/test_ops" --quick --op attention
  tail -2 "$OUT/memcheck.log" >> "$SUMMARY"
  # The same for the tiled attention backward's pipelines (P^T, dS^T through shared memory).
  step "racecheck attention bwd" "$OUT/memcheck.log" 120 "$SANITIZER" --tool racecheck \
    --error-exitcode 3 "$BIN/test_ops" --quick --op paged_attention_backward
  tail -2 "$OUT/memcheck.log" >> "$SUMMARY"
  step "synccheck (quick)" "$OUT/memcheck.log" 60 "$SANITIZER" --tool synccheck \
    --error-exitcode 3 "$BIN/test_ops" --quick
  tail -2 "$OUT/memcheck.log" >> "$SUMMARY"
fi
# Headline numbers of the benchmarks.
grep -hE '"(model|fp8|tokens_per_second|forward_seconds_median|model_vs_cublaslt|shape)"' \
  "$OUT/bench.log" "$OUT/hf.log" 2>/dev/null | tr -s ' ' >> "$SUMMARY"
cat "$SUMMARY"
