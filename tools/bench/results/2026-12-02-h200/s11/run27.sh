BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
CONFIG=tools/bench/configs/qwen3-8b
step "info" $R/info.log 30 $BUILD/bin/fp8rl info --device cuda
tail -2 $R/info.log >> $SUMMARY
step "train gpu" $R/train.log 200 $BIN/test_train_gpu
grep -E "device region|^FAIL|failure" $R/train.log >> $SUMMARY
step "generate gpu" $R/gen.log 120 $BIN/test_generate_gpu
tail -1 $R/gen.log >> $SUMMARY
step "ops quick" $R/ops.log 200 $BIN/test_ops --quick
grep -E "^FAIL|passed|failed" $R/ops.log | tail -3 >> $SUMMARY
step "memcheck linear" $R/memcheck.log 120 "$SANITIZER" --tool memcheck --leak-check no --error-exitcode 3 $BIN/test_ops --quick --op linear
tail -2 $R/memcheck.log >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40"
step "gen256 row" $R/bench.log 200 $BIN/fp8rl_bench bench generate --model $CONFIG $GEN --fp8 row --out $R/gen_row.json
grep -hE '"(output_tokens_per_second)"' $R/bench.log | tr -s ' ' >> $SUMMARY
cat $SUMMARY
