# Experiment: decode chunks of at least 512 keys instead of 256 (fewer blocks, no combine
# below 513 keys). Compare with run36 (same session, 256).
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
CONFIG=tools/bench/configs/qwen3-8b
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40"
step "perf decode" $R/perf.log 150 $BIN/test_ops --perf --filter "decode"
grep -E "^(OK|FAIL)" $R/perf.log | grep -v cuda-cores >> $SUMMARY
for a in "--fp8 row" "--fp8 off"; do
  step "bench $a" $R/bench.log 200 $BIN/fp8rl_bench bench generate --model $CONFIG $GEN $a
done
grep -hE '"(fp8|output_tokens_per_second|device_step_seconds)"' $R/bench.log | tr -s ' ' | paste -sd' ' >> $SUMMARY
shape="--prompts 1 --generations 8 --prompt-tokens 128 --completion-tokens 512 --lora-r 32 --checkpointing --kv-memory 1 --steps 3 --device cuda"
step "bench grpo 8b row" $R/grpo.log 240 $BUILD/bin/fp8rl bench grpo --preset qwen3-8b --fp8 row $shape
grep -E '"last_step/timing/(step|rollout)_seconds"' $R/grpo.log | head -4 >> $SUMMARY
cat $SUMMARY
