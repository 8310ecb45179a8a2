# Final device check of the fourteenth session's tree: tests/gpu/engine.sh (ops, model,
# generation against the CPU, bench generate beside HF, shared-prefix pairs, prefill), the
# trainer, every op case (quick), the split-sum / linear / decode-GEMM cases, bench grpo.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
OUT=$R/engine bash tests/gpu/engine.sh build-gpu > $R/engine.log 2>&1
echo "engine.sh rc=$?" >> $SUMMARY
step "train gpu" $R/train.log 300 $BIN/test_train_gpu
grep -c "^PASS" $R/train.log >> $SUMMARY; grep "^FAIL" $R/train.log >> $SUMMARY; tail -1 $R/train.log >> $SUMMARY
step "ops quick" $R/opsq.log 300 $BIN/test_ops --quick
grep -E "^FAIL|passed|failed" $R/opsq.log | tail -5 >> $SUMMARY
for f in "split-sum" "linear" "add_rms_norm" "quantize" "graph"; do
  step "ops $f" $R/opsl.log 200 $BIN/test_ops --filter "$f"
done
grep -E "^FAIL|passed|failed" $R/opsl.log | tail -10 >> $SUMMARY
step "perf gemm" $R/perf.log 120 $BIN/test_ops --perf --filter "decode_gemm"
shape="--prompts 1 --generations 8 --prompt-tokens 128 --completion-tokens 512 --lora-r 32 --checkpointing --kv-memory 1 --steps 3 --device cuda"
step "bench grpo 8b row" $R/grpo.log 240 $BUILD/bin/fp8rl bench grpo --preset qwen3-8b --fp8 row $shape --out $R/grpo_qwen3-8b_row.json
grep -E '"last_step/timing/(step|rollout)_seconds"' $R/grpo.log | head -4 >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for i in 2 3; do
  step "bench row $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row --out $R/gen_row_$i.json
  step "bench off $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off --out $R/gen_off_$i.json
done
grep -E '^===|"output_tokens_per_second"|device_step_seconds' $R/bench.log >> $SUMMARY
cat $R/engine/summary.txt >> $SUMMARY
cat $SUMMARY
