# First device run of the split-K wgmma FP8 GEMM: correctness, then timing, then bench generate.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
CONFIG=tools/bench/configs/qwen3-8b
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40"
step "ops wgmma" $R/ops.log 120 $BIN/test_ops --filter "wgmma row"
grep -E "^FAIL|^PASS|passed|failed" $R/ops.log | tail -12 >> $SUMMARY
step "ops linear" $R/opsl.log 200 $BIN/test_ops --filter "linear"
grep -E "^FAIL|passed|failed" $R/opsl.log | tail -8 >> $SUMMARY
step "perf gemm" $R/perf.log 120 $BIN/test_ops --perf --filter "decode_gemm"
grep -E "decode_gemm" $R/perf.log | head -12 >> $SUMMARY
if ! grep -q "^FAIL" $R/ops.log; then
for a in "--fp8 row" "--fp8 row --no-wgmma-gemm" "--fp8 off"; do
  step "bench $a" $R/bench.log 200 $BIN/fp8rl_bench bench generate --model $CONFIG $GEN $a --device cuda
done
grep -hE '"(fp8|wgmma_gemm|output_tokens_per_second|device_step_seconds)"' $R/bench.log | tr -s ' ' | paste -sd' ' >> $SUMMARY
fi
cat $SUMMARY
