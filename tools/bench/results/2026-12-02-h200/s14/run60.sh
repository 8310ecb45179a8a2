# Fast accumulation: cuBLASLt's FP8-row GEMMs at the decode shapes with and without FAST_ACCUM,
# then bench generate FP8-row with and without it, and bf16.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
for shape in "256 4096 4096" "256 6144 4096" "256 12288 4096" "256 4096 12288" "256 4096 6144"; do
  for fa in "" --fast-accum; do
    step "sweep $shape $fa" $R/sweep.log 60 build-sweep/gemm_sweep $shape --fp8 --top 0 $fa
    step "sweep halves $shape $fa" $R/sweep.log 60 build-sweep/gemm_sweep $shape --fp8 --top 0 --splitk 2 --f32-out --halves-on-streams $fa
  done
done
grep -E "^===|heuristic #0|halves" $R/sweep.log >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for fa in "" --fp8-fast-accumulation; do
  step "bench row $fa" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row $fa --out $R/row$fa.json
done
step "bench off" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off --out $R/off.json
grep -E '"output_tokens_per_second"|device_step_seconds|fast_accum' $R/bench.log >> $SUMMARY
cat $SUMMARY
