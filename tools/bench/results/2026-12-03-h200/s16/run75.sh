# Session 16, final tree: graph and sampler op cases, model goldens and random models,
# generation against the CPU, the trainer, and two alternated FP8-row / bf16 pairs.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
step "ops graph" $R/ops.log 120 $BIN/test_ops --filter graph
step "ops sample" $R/ops.log 120 $BIN/test_ops --filter sample
grep -E "^FAIL|passed|failed" $R/ops.log | tail -5 >> $SUMMARY
step "model goldens" $R/model.log 120 $BIN/test_model_gpu --data tests/data --arch all
step "model random" $R/model.log 120 $BIN/test_model_gpu --data tests/data --random
grep -E "^FAIL|passed|failed|failures" $R/model.log | tail -4 >> $SUMMARY
step "generate gpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^FAIL|failures|async" $R/generate.log | tail -4 >> $SUMMARY
step "train gpu" $R/train.log 300 $BIN/test_train_gpu
grep -E "failure" $R/train.log | tail -1 >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for i in 1 2; do
  step "bench row $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
  step "bench off $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
done
grep -E '^===|"output_tokens_per_second"|device_step_seconds|device_idle_fraction|"async_scheduling"' $R/bench.log >> $SUMMARY
cat $SUMMARY
