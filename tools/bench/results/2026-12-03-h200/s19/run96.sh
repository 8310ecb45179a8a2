# Session 19, final tree: q/k/v pending (rope_store_kv scales the SCALAR GEMM's raw sums), gate
# and up back on the OUTER_VEC pair. Op cases, models, generation, training, alternated
# FP8-row / bf16 pairs with the --no-pending-linears control, the 4096-token shared pair, grpo.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
nvidia-smi --query-gpu=name,uuid --format=csv,noheader >> $SUMMARY
step "ops pending" $R/ops.log 120 $BIN/test_ops --filter pending
step "ops rope_store_kv" $R/ops.log 120 $BIN/test_ops --filter rope_store_kv
step "ops paged_attention" $R/ops.log 200 $BIN/test_ops --filter paged_attention
step "ops graph" $R/ops.log 120 $BIN/test_ops --filter graph
step "ops quick" $R/ops.log 200 $BIN/test_ops --quick
grep -E "^FAIL|passed|failed" $R/ops.log | tail -6 >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for i in 1 2 3; do
  step "bench row $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
  step "bench off $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
  step "bench row no-pending $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row --no-pending-linears
done
grep -E '^===|"output_tokens_per_second"|device_step_seconds"|device_idle_fraction' $R/bench.log | sed 's/build-gpu.*--device cuda//' >> $SUMMARY
step "model goldens" $R/model.log 120 $BIN/test_model_gpu --data tests/data --arch all
step "model random" $R/model.log 120 $BIN/test_model_gpu --data tests/data --random
grep -E "^FAIL|passed|failed|failures" $R/model.log | tail -4 >> $SUMMARY
step "generate gpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^FAIL|failures" $R/generate.log | tail -3 >> $SUMMARY
step "train gpu" $R/train.log 300 $BIN/test_train_gpu
grep -E "failure" $R/train.log | tail -1 >> $SUMMARY
LONG="--prompts 8 --n 8 --prompt-tokens 4096 --max-tokens 256 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda --fp8 row"
step "bench 4096 shared" $R/bench2.log 200 $BIN/fp8rl_bench bench generate $LONG
step "bench 4096 no-shared" $R/bench2.log 200 $BIN/fp8rl_bench bench generate $LONG --no-shared-prefix
grep -E '^===|"output_tokens_per_second"' $R/bench2.log | sed 's/build-gpu.*--device cuda//' >> $SUMMARY
step "bench grpo" $R/grpo.log 240 $BUILD/bin/fp8rl bench grpo --preset qwen3-8b --fp8 row --out $R/grpo_qwen3-8b_row.json --prompts 1 --generations 8 --prompt-tokens 128 --completion-tokens 512 --lora-r 32 --checkpointing --kv-memory 1 --steps 3 --device cuda
grep -E '"last_step/timing/(step|rollout)_seconds"' $R/grpo.log | head -4 >> $SUMMARY
cat $SUMMARY
