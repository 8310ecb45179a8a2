# Session 16: asynchronous scheduling (step k+1 planned and queued while step k runs).
# op quick set + copy_elements, model/generation/trainer tests, bench generate FP8-row / bf16
# alternated 3x with async scheduling, then one pair with --no-async-scheduling (the control).
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
step "ops quick" $R/ops.log 300 $BIN/test_ops --quick
step "ops copy_elements" $R/ops.log 60 $BIN/test_ops --filter copy_elements
grep -E "^FAIL|passed|failed" $R/ops.log | tail -5 >> $SUMMARY
step "model goldens" $R/model.log 120 $BIN/test_model_gpu --data tests/data --arch all
grep -E "^FAIL|passed|failed|failures" $R/model.log | tail -2 >> $SUMMARY
step "generate gpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^FAIL|failures" $R/generate.log | tail -4 >> $SUMMARY
step "train gpu" $R/model.log 300 $BIN/test_train_gpu
grep -E "failure" $R/model.log | tail -1 >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for i in 1 2 3; do
  step "bench row $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
  step "bench off $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
done
step "bench row sync" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row --no-async-scheduling
step "bench off sync" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off --no-async-scheduling
grep -E '^===|"output_tokens_per_second"|device_step_seconds|device_idle_fraction|host_seconds|steps_planned_ahead' $R/bench.log >> $SUMMARY
cat $SUMMARY
