# Session 16: pinned staging / one transfer back / column_heads measured on the GPU (run70 never ran):
# op quick set, model/generation/trainer tests, bench generate FP8-row / bf16 alternated 4x.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
step "ops quick" $R/ops.log 300 $BIN/test_ops --quick
grep -E "^FAIL|passed|failed" $R/ops.log | tail -5 >> $SUMMARY
step "model goldens" $R/model.log 120 $BIN/test_model_gpu --data tests/data --arch all
step "model random" $R/model.log 120 $BIN/test_model_gpu --data tests/data --random
grep -E "^FAIL|passed|failed|failures" $R/model.log | tail -4 >> $SUMMARY
step "generate gpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^FAIL|failures" $R/generate.log | tail -4 >> $SUMMARY
step "train gpu" $R/model.log 300 $BIN/test_train_gpu
grep -E "failure" $R/model.log | tail -1 >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for i in 1 2 3 4; do
  step "bench row $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
  step "bench off $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
done
grep -E '^===|"output_tokens_per_second"|device_step_seconds|host_seconds' $R/bench.log >> $SUMMARY
cat $SUMMARY
