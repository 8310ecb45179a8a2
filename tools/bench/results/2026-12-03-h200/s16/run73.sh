# Session 16, the engine's full device check with asynchronous scheduling: tests/gpu/engine.sh
# (ops, model, generation against the CPU incl. async stops, bench generate beside HF, FP8 KV,
# shared-prefix pairs, prefill), the trainer, bench grpo (GRPO table shape), then three more
# alternated FP8-row / bf16 pairs of bench generate.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
OUT=$R/engine bash tests/gpu/engine.sh build-gpu > $R/engine.log 2>&1
echo "engine.sh rc=$?" >> $SUMMARY
step "train gpu" $R/train.log 300 $BIN/test_train_gpu
grep -c "^PASS" $R/train.log >> $SUMMARY; grep "^FAIL" $R/train.log >> $SUMMARY; tail -1 $R/train.log >> $SUMMARY
shape="--prompts 1 --generations 8 --prompt-tokens 128 --completion-tokens 512 --lora-r 32 --checkpointing --kv-memory 1 --steps 3 --device cuda"
step "bench grpo 8b row" $R/grpo.log 240 $BUILD/bin/fp8rl bench grpo --preset qwen3-8b --fp8 row $shape --out $R/grpo_qwen3-8b_row.json
grep -E '"last_step/timing/(step|rollout)_seconds"' $R/grpo.log | head -4 >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for i in 2 3 4; do
  step "bench row $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
  step "bench off $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
done
grep -E '^===|"output_tokens_per_second"|device_step_seconds|device_idle_fraction' $R/bench.log >> $SUMMARY
cat $R/engine/summary.txt >> $SUMMARY
rm -rf $R/engine/*.json 2>/dev/null
cat $SUMMARY
