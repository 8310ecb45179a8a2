# Session 19: the review's persistent-grid checks (never run on a GPU), then SCALAR-mode raw
# q/k/v and gate/up GEMMs (bf16 and fp16 out) against OUTER_VEC in CUDA graphs, then a pair.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $SUMMARY
step "ops paged_attention" $R/ops.log 200 $BIN/test_ops --filter paged_attention
step "ops graph" $R/ops.log 120 $BIN/test_ops --filter graph
grep -E "^FAIL|passed|failed" $R/ops.log | tail -6 >> $SUMMARY
G=build-sweep/gemm_sweep
for S in "--scales outer" "--scales scalar" "--scales scalar --f16-out"; do
  step "qkv $S" $R/gemm.log 60 $G 256 6144 4096 $S --top 0
  step "gateup stacked $S" $R/gemm.log 60 $G 256 24576 4096 $S --top 0
  step "o $S" $R/gemm.log 60 $G 256 4096 4096 $S --top 0
done
step "gate+up pair outer" $R/gemm.log 60 $G 256 12288 8192 --scales outer --splitk 2 --halves-on-streams --top 0
grep -E "^gemm_sweep|heuristic #0|in a CUDA graph|two K halves" $R/gemm.log >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
step "bench row 1" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
step "bench off 1" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
grep -E '^===|"output_tokens_per_second"|device_step_seconds|device_idle_fraction' $R/bench.log | sed 's/build-gpu.*--device cuda//' >> $SUMMARY
cat $SUMMARY
