# Session 19, final tree: another device's alternated FP8-row / bf16 pairs with the
# --no-pending-linears control (bench only).
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
nvidia-smi --query-gpu=name,uuid --format=csv,noheader >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for i in 1 2 3; do
  step "bench row $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
  step "bench off $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
  step "bench row no-pending $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row --no-pending-linears
done
grep -E '^===|"output_tokens_per_second"|device_step_seconds"|device_idle_fraction' $R/bench.log | sed 's/build-gpu.*--device cuda//' >> $SUMMARY
cat $SUMMARY
