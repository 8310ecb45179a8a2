# Tensor-core decode kernel: the rest of the GPU tests, the shared-prefix crossover, FP8 KV.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
CONFIG=tools/bench/configs/qwen3-8b
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40"
step "perf decode" $R/perf.log 150 $BIN/test_ops --perf --filter "decode shared_prefix"
grep -E "^(OK|FAIL)" $R/perf.log | grep -E "ctx=(384|512|768)" >> $SUMMARY
for a in "--fp8 row --no-shared-prefix" "--fp8 off --no-shared-prefix" "--fp8 row --kv-dtype fp8" "--fp8 row --kv-dtype fp8 --no-decode-mma"; do
  step "bench $a" $R/bench.log 200 $BIN/fp8rl_bench bench generate --model $CONFIG $GEN $a
done
grep -hE '"(fp8|kv_dtype|decode_attention|shared_prefix_attention|output_tokens_per_second|device_step_seconds)"' $R/bench.log | tr -s ' ' | paste -sd' ' | sed 's/"fp8"/\n"fp8"/g' >> $SUMMARY
step "model gpu" $R/model.log 200 $BIN/test_model_gpu --data tests/data
tail -1 $R/model.log >> $SUMMARY
step "model random" $R/model.log 120 $BIN/test_model_gpu --data tests/data --random
tail -1 $R/model.log >> $SUMMARY
step "train gpu" $R/train.log 300 $BIN/test_train_gpu
grep -c "^PASS" $R/train.log >> $SUMMARY; grep "^FAIL" $R/train.log >> $SUMMARY; tail -1 $R/train.log >> $SUMMARY
step "ops all quick" $R/opsq.log 300 $BIN/test_ops --quick
grep -E "^FAIL|passed|failed" $R/opsq.log | tail -5 >> $SUMMARY
cat $SUMMARY
