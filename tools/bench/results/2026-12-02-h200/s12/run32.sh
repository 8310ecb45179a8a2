# The tensor-core decode kernel: correctness against the CPU, op timing, bench generate.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
CONFIG=tools/bench/configs/qwen3-8b
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40"
step "ops paged" $R/ops.log 200 $BIN/test_ops --filter paged_attention
grep -E "^FAIL|passed|failed" $R/ops.log | tail -12 >> $SUMMARY
step "perf decode" $R/perf.log 150 $BIN/test_ops --perf --filter "decode"
grep -E "^(OK|FAIL)" $R/perf.log >> $SUMMARY
for a in "--fp8 row" "--fp8 off" "--fp8 row --no-decode-mma" "--fp8 off --no-decode-mma"; do
  step "bench $a" $R/bench.log 200 $BIN/fp8rl_bench bench generate --model $CONFIG $GEN $a
done
grep -hE '"(fp8|decode_attention|output_tokens_per_second|host_fraction|device_step_seconds)"' $R/bench.log | tr -s ' ' >> $SUMMARY
step "generate vs cpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^(FAIL)|failures|passed" $R/generate.log | tail -3 >> $SUMMARY
cat $SUMMARY
