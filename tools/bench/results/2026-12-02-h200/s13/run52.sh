# Every kernel of a few decode steps, timed alone by ncu (graph nodes profiled one by one), FP8-row
# and bf16: where a decode step's device time goes, and how much of the graph step is gaps.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
CONFIG=tools/bench/configs/qwen3-8b
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "ncu=$NCU" >> $SUMMARY
for a in "--fp8 row --no-wgmma-gemm" "--fp8 off"; do
  tag=$(echo $a | tr -d ' -')
  step "ncu $a" $R/ncu_$tag.log 280 $NCU --graph-profiling node --metrics gpu__time_duration.sum --csv --page raw \
    $BIN/fp8rl_bench bench generate --model $CONFIG --prompts 32 --n 8 --prompt-tokens 128 --max-tokens 4 --kv-memory 40 $a
  gzip -f $R/ncu_$tag.log
done
cat $SUMMARY
