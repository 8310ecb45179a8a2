# The tensor-core decode kernel quantizing the o_proj input in clusters: op tests, model and
# generation tests, bench generate FP8-row with and without (--no-attention-output-quant),
# bf16, alternated.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
for f in "paged_attention" "shared_prefix" "graph"; do
  step "ops $f" $R/ops.log 240 $BIN/test_ops --filter "$f"
done
grep -E "^FAIL|passed|failed" $R/ops.log | tail -8 >> $SUMMARY
step "model random" $R/model.log 120 $BIN/test_model_gpu --data tests/data --random
step "model goldens" $R/model.log 120 $BIN/test_model_gpu --data tests/data --arch all
grep -E "^FAIL|passed|failed|failures" $R/model.log | tail -4 >> $SUMMARY
step "generate gpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^FAIL|failures" $R/generate.log | tail -4 >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for i in 1 2; do
  step "bench row $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
  step "bench row noaq $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row --no-attention-output-quant
  step "bench off $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
done
grep -E '"output_tokens_per_second"|device_step_seconds|"attention_output_quant"|"fp8"' $R/bench.log >> $SUMMARY
cat $SUMMARY
