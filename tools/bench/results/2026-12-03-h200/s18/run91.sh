# Session 18: persistent decode blocks against the control on whatever H200 this call gets,
# with its identity, to see whether the gain shows on the faster devices.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
nvidia-smi --query-gpu=name,uuid,pci.bus_id,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu --format=csv >> $SUMMARY 2>&1
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for i in 1 2; do
  step "bench row $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
  step "bench off $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
  step "bench row item-blocks $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row --no-persistent-decode
  step "bench off item-blocks $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off --no-persistent-decode
done
grep -E '^===|"output_tokens_per_second"|device_step_seconds' $R/bench.log | sed 's/build-gpu.*--device cuda//' >> $SUMMARY
cat $SUMMARY
