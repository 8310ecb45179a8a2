BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
CONFIG=tools/bench/configs/qwen3-8b
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512"
step "ops concurrent" $R/ops.log 120 $BIN/test_ops --filter "linear concurrent"
step "ops linear" $R/ops.log 200 $BIN/test_ops --op linear
step "ops sample" $R/ops.log 120 $BIN/test_ops --op sample
grep -E "^(FAIL)|passed|failed" $R/ops.log | tail -8 >> $SUMMARY
grep -E "linear concurrent" $R/ops.log | head -4 >> $SUMMARY
step "generate vs cpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^(FAIL)|failures|passed" $R/generate.log | tail -3 >> $SUMMARY
step "model random" $R/model.log 120 $BIN/test_model_gpu --data tests/data --random
tail -1 $R/model.log >> $SUMMARY
step "train gpu" $R/train.log 300 $BIN/test_train_gpu
grep -c "^PASS" $R/train.log >> $SUMMARY; grep "^FAIL" $R/train.log >> $SUMMARY; tail -1 $R/train.log >> $SUMMARY
for a in "--fp8 row" "--fp8 off" "--fp8 row --no-concurrent-linears" "--fp8 row"; do
  step "bench $a" $R/bench.log 200 $BIN/fp8rl_bench bench generate --model $CONFIG $GEN $a --kv-memory 40
done
grep -hE '"(fp8|concurrent_linears|output_tokens_per_second|host_fraction|graph_steps)"' $R/bench.log | tr -s ' ' >> $SUMMARY
cat $SUMMARY
