# Session 18: o_proj's and down_proj's K halves as raw SCALAR_32F products, scaled by the
# residual add (ops::SplitSum::scaled), against the OUTER_VEC halves (the previous build,
# fp8rl_bench_persistent). The cuBLASLt shapes first, then the op cases, the model and engine
# tests, alternated bench pairs.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
G=build-sweep/gemm_sweep
for S in outer scalar; do
  step "o $S" $R/gemm.log 60 $G 256 4096 4096 --scales $S --splitk 2 --f32-out --halves-on-streams --top 0
  step "down $S" $R/gemm.log 60 $G 256 4096 12288 --scales $S --splitk 2 --f32-out --halves-on-streams --top 0
  step "qkv $S f32out" $R/gemm.log 60 $G 256 6144 4096 --scales $S --f32-out --top 0
  step "gate $S" $R/gemm.log 60 $G 256 12288 4096 --scales $S --top 0
done
grep -E "^gemm_sweep|heuristic #0 |in a CUDA graph" $R/gemm.log >> $SUMMARY
step "ops split-sum" $R/ops.log 120 $BIN/test_ops --filter split-sum
step "ops linear" $R/ops.log 200 $BIN/test_ops --filter linear
step "ops add_rms_norm" $R/ops.log 120 $BIN/test_ops --filter add_rms_norm
step "ops paged_attention" $R/ops.log 200 $BIN/test_ops --filter paged_attention
step "ops graph" $R/ops.log 120 $BIN/test_ops --filter graph
step "ops quick" $R/ops.log 200 $BIN/test_ops --quick
grep -E "^FAIL|passed|failed" $R/ops.log | tail -12 >> $SUMMARY
grep -E "split-sum" $R/ops.log | head -8 >> $SUMMARY
step "model goldens" $R/model.log 120 $BIN/test_model_gpu --data tests/data --arch all
step "model random" $R/model.log 120 $BIN/test_model_gpu --data tests/data --random
grep -E "^FAIL|passed|failed|failures" $R/model.log | tail -4 >> $SUMMARY
step "generate gpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^FAIL|failures" $R/generate.log | tail -6 >> $SUMMARY
xz -dc build-sweep/fp8rl_bench_persistent.xz > /tmp/fp8rl_bench_old && chmod +x /tmp/fp8rl_bench_old
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for i in 1 2; do
  step "bench row $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
  step "bench row outer-halves $i" $R/bench.log 200 /tmp/fp8rl_bench_old bench generate $GEN --fp8 row
  step "bench off $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
done
grep -E '^===|"output_tokens_per_second"|device_step_seconds|device_idle_fraction' $R/bench.log | sed 's/build-gpu.*--device cuda//' >> $SUMMARY
cat $SUMMARY
