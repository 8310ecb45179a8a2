# Fused o_proj input quantization in the decode attention kernels: op tests, model and
# generation tests, bench generate with and without (--no-attention-output-quant), bf16.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
for f in "paged_attention" "shared_prefix" "quantize"; do
  step "ops $f" $R/ops.log 240 $BIN/test_ops --filter "$f"
done
grep -E "^FAIL|passed|failed" $R/ops.log | tail -8 >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
step "bench row" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row --out $R/row.json
step "bench row noaq" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row --no-attention-output-quant --out $R/row_noaq.json
step "bench off" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off --out $R/off.json
step "bench row 2" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row --out $R/row2.json
grep -E '"output_tokens_per_second"|device_step_seconds|attention_output_quant' $R/bench.log >> $SUMMARY
step "model goldens" $R/model.log 120 $BIN/test_model_gpu --data tests/data --arch all
step "model random" $R/model.log 120 $BIN/test_model_gpu --data tests/data --random
grep -E "^FAIL|passed|failed|failures" $R/model.log | tail -4 >> $SUMMARY
step "generate gpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^FAIL|failures" $R/generate.log | tail -4 >> $SUMMARY
cat $SUMMARY
