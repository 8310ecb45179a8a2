# Final device check of the session's tree: tests/gpu/engine.sh (ops, model, generation against
# the CPU, bench generate beside HF, shared-prefix pairs, prefill), the trainer, every op case
# (quick), the decode perf cases, the CUDA-core controls, bench grpo.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
CONFIG=tools/bench/configs/qwen3-8b
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40"
OUT=$R/engine bash tests/gpu/engine.sh build-gpu > $R/engine.log 2>&1
echo "engine.sh rc=$?" >> $SUMMARY
step "train gpu" $R/train.log 300 $BIN/test_train_gpu
grep -c "^PASS" $R/train.log >> $SUMMARY; grep "^FAIL" $R/train.log >> $SUMMARY; tail -1 $R/train.log >> $SUMMARY
step "ops quick" $R/opsq.log 300 $BIN/test_ops --quick
grep -E "^FAIL|passed|failed" $R/opsq.log | tail -5 >> $SUMMARY
step "ops paged" $R/opsp.log 200 $BIN/test_ops --filter paged_attention
grep -E "^FAIL|passed|failed" $R/opsp.log | tail -5 >> $SUMMARY
step "perf decode" $R/perf.log 150 $BIN/test_ops --perf --filter "decode"
for a in "--fp8 row --no-decode-mma" "--fp8 off --no-decode-mma"; do
  step "bench $a" $R/bench_ctl.log 200 $BIN/fp8rl_bench bench generate --model $CONFIG $GEN $a
done
grep -hE '"(fp8|decode_attention|output_tokens_per_second|device_step_seconds)"' $R/bench_ctl.log | tr -s ' ' | paste -sd' ' >> $SUMMARY
shape="--prompts 1 --generations 8 --prompt-tokens 128 --completion-tokens 512 --lora-r 32 --checkpointing --kv-memory 1 --steps 3 --device cuda"
step "bench grpo 8b row" $R/grpo.log 240 $BUILD/bin/fp8rl bench grpo --preset qwen3-8b --fp8 row $shape --out $R/grpo_qwen3-8b_row.json
grep -E '"last_step/timing/(step|rollout)_seconds"' $R/grpo.log | head -4 >> $SUMMARY
cat $R/engine/summary.txt >> $SUMMARY
cat $SUMMARY
