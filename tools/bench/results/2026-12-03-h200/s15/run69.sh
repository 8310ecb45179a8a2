# Four more alternated pairs of bench generate FP8-row / bf16 (the ratio's spread), one log.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for i in 1 2 3 4; do
  step "bench row $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
  step "bench off $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
done
grep -E '^===|"output_tokens_per_second"|device_step_seconds|host_seconds' $R/bench.log >> $SUMMARY
cat $SUMMARY
