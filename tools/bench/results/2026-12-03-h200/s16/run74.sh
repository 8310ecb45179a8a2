# Session 16: the plain sampler rows in one read of the logits; lm_head GEMM configurations.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
step "ops sample" $R/ops.log 120 $BIN/test_ops --filter sample
step "ops graph" $R/ops.log 120 $BIN/test_ops --filter graph
grep -E "^FAIL|passed|failed" $R/ops.log | tail -6 >> $SUMMARY
step "perf sample" $R/perf.log 120 $BIN/test_ops --perf --filter sample
grep -E "^OK|^FAIL" $R/perf.log >> $SUMMARY
step "generate gpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^FAIL|failures" $R/generate.log | tail -4 >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for i in 1 2 3; do
  step "bench row $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
  step "bench off $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
done
grep -E '^===|"output_tokens_per_second"|device_step_seconds' $R/bench.log >> $SUMMARY
grep -A4 '"op": "sample"' $R/bench.log | grep '"ms"' | head -2 >> $SUMMARY
step "gemm sweep lm_head" $R/gemm.log 200 build-sweep/gemm_sweep 256 151936 4096 --bf16 --f32-out --top 12
tail -16 $R/gemm.log >> $SUMMARY
cat $SUMMARY
