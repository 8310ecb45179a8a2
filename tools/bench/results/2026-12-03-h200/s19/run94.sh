# Session 19: pending q/k/v and gate/up linears (SCALAR raw fp16 sums, scaled by rope_store_kv
# and the fused gated quantization): op cases, alternated FP8-row / bf16 pairs with the
# --no-pending-linears control, then the model, generation and training suites.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
nvidia-smi --query-gpu=name,uuid --format=csv,noheader >> $SUMMARY
step "ops pending" $R/ops.log 120 $BIN/test_ops --filter pending
grep -E "^FAIL|passed|failed" $R/ops.log | tail -3 >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for i in 1 2; do
  step "bench row $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
  step "bench off $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
  step "bench row no-pending $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row --no-pending-linears
done
grep -E '^===|"output_tokens_per_second"|device_step_seconds"|pending_linears' $R/bench.log | sed 's/build-gpu.*--device cuda//' >> $SUMMARY
step "ops rope_store_kv" $R/ops2.log 200 $BIN/test_ops --filter rope_store_kv
step "ops gated" $R/ops2.log 200 $BIN/test_ops --filter gated
step "ops graph" $R/ops2.log 120 $BIN/test_ops --filter graph
step "ops quick" $R/ops2.log 200 $BIN/test_ops --quick
grep -E "^FAIL|passed|failed" $R/ops2.log | tail -8 >> $SUMMARY
step "model goldens" $R/model.log 120 $BIN/test_model_gpu --data tests/data --arch all
step "model random" $R/model.log 120 $BIN/test_model_gpu --data tests/data --random
grep -E "^FAIL|passed|failed|failures" $R/model.log | tail -4 >> $SUMMARY
step "generate gpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^FAIL|failures" $R/generate.log | tail -6 >> $SUMMARY
step "train gpu" $R/train.log 300 $BIN/test_train_gpu
grep -E "failure" $R/train.log | tail -1 >> $SUMMARY
cat $SUMMARY
