# After the split into paged_decode_mma.cu and the engine's minimum shared prefix: tests, perf,
# bench generate (both dtypes, controls), and a long-prompt bench where groups still form.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
CONFIG=tools/bench/configs/qwen3-8b
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40"
step "ops paged" $R/ops.log 200 $BIN/test_ops --filter paged_attention
grep -E "^FAIL|passed|failed" $R/ops.log | tail -6 >> $SUMMARY
step "generate vs cpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^(FAIL)|failures|passed" $R/generate.log | tail -3 >> $SUMMARY
step "perf decode" $R/perf.log 150 $BIN/test_ops --perf --filter "decode"
grep -E "^(OK|FAIL)" $R/perf.log >> $SUMMARY
for a in "--fp8 row" "--fp8 off" "--fp8 row --no-decode-mma" "--fp8 off --no-decode-mma" "--fp8 row" "--fp8 off"; do
  step "bench $a" $R/bench.log 200 $BIN/fp8rl_bench bench generate --model $CONFIG $GEN $a --out $R/gen_$(echo $a | tr -d ' -').json
done
for a in "--fp8 row" "--fp8 row --no-shared-prefix"; do
  step "bench long $a" $R/bench_long.log 200 $BIN/fp8rl_bench bench generate --model $CONFIG --prompts 32 --n 8 --prompt-tokens 1024 --max-tokens 256 --kv-memory 40 $a
done
for f in $R/bench.log $R/bench_long.log; do
grep -hE '"(fp8|decode_attention|shared_prefix_attention|grouped_sequence_steps|output_tokens_per_second|device_step_seconds)"' $f | tr -s ' ' | paste -sd' ' | sed 's/"decode_attention"/\n"decode_attention"/g' >> $SUMMARY
done
cat $SUMMARY
