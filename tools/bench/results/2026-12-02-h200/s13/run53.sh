# Split sums (o_proj / down_proj K halves summed by the residual add): correctness, model and
# engine against the CPU, the wgmma GEMM at small M, bench generate both dtypes.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
CONFIG=tools/bench/configs/qwen3-8b
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40"
step "ops split/wgmma/concurrent" $R/ops.log 200 $BIN/test_ops --filter "split-sum|wgmma row|linear concurrent|add_rms_norm"
grep -E "^FAIL|passed|failed" $R/ops.log | tail -8 >> $SUMMARY
step "perf gemm" $R/perf.log 150 $BIN/test_ops --perf --filter "decode_gemm"
grep -E "decode_gemm" $R/perf.log | cut -c1-150 | head -20 >> $SUMMARY
for a in "--fp8 row" "--fp8 off" "--fp8 row --no-concurrent-linears" "--fp8 row"; do
  step "bench $a" $R/bench.log 200 $BIN/fp8rl_bench bench generate --model $CONFIG $GEN $a --device cuda
done
grep -hE '"(fp8|concurrent_linears|output_tokens_per_second)"' $R/bench.log | tr -s ' ' | paste -sd' ' >> $SUMMARY
step "model random" $R/model.log 300 $BIN/test_model_gpu --random
grep -E "FAIL|split|cases" $R/model.log | tail -6 >> $SUMMARY
step "generate vs cpu" $R/gen.log 200 $BIN/test_generate_gpu
grep -E "FAIL|failures" $R/gen.log | tail -4 >> $SUMMARY
cat $SUMMARY
