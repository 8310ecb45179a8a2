# Session 17: the combine kernel's shape (FP8RL_COMBINE_WARPS: 0 = a block per (head,
# sequence) with threads over D, as before; W = W heads a block, a warp each).
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
for w in 0 4 32; do
  export FP8RL_COMBINE_WARPS=$w
  step "perf combine $w" $R/perf$w.log 200 $BIN/test_ops --perf --filter "shared_prefix"
  echo "--- warps $w" >> $SUMMARY
  grep -E "shared_prefix=(off|mma) " $R/perf$w.log | grep -v "^===" | sed 's/ Hq=32 Hkv=8 D=128//; s/paged_attention decode shared_prefix=//' >> $SUMMARY
done
export FP8RL_COMBINE_WARPS=32
step "ops paged_attention" $R/ops.log 200 $BIN/test_ops --filter paged_attention
grep -E "^FAIL|passed|failed" $R/ops.log | tail -5 >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for w in 0 32; do
  export FP8RL_COMBINE_WARPS=$w
  step "bench row $w" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
  step "bench off $w" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
done
grep -E '^===|"output_tokens_per_second"|device_step_seconds' $R/bench.log | grep -v note | sed 's/build-gpu.*--device cuda//' >> $SUMMARY
cat $SUMMARY
