# rope_store_kv (q/k norm + RoPE + K/V store in one kernel, the stacked q/k/v output read in
# place): op cases, model and generation tests, bench generate FP8-row and bf16 alternated.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
for f in "rope_store_kv" "rms_norm_rope" "paged_attention" "graph"; do
  step "ops $f" $R/ops.log 240 $BIN/test_ops --filter "$f"
done
grep -E "^FAIL|passed|failed" $R/ops.log | tail -30 >> $SUMMARY
step "model goldens" $R/model.log 120 $BIN/test_model_gpu --data tests/data --arch all
step "model random" $R/model.log 120 $BIN/test_model_gpu --data tests/data --random
grep -E "^FAIL|passed|failed|failures" $R/model.log | tail -4 >> $SUMMARY
step "generate gpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^FAIL|failures" $R/generate.log | tail -4 >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for i in 1 2; do
  step "bench row $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row --out $R/row$i.json
  step "bench off $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off --out $R/off$i.json
done
grep -E '"output_tokens_per_second"|device_step_seconds' $R/bench.log >> $SUMMARY
cat $SUMMARY
