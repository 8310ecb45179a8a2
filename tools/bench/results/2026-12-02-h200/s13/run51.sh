# The split-K wgmma FP8 GEMM, 128x128 tiles with double-buffered products; nsys of the decode step.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
CONFIG=tools/bench/configs/qwen3-8b
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40"
step "ops wgmma" $R/ops.log 120 $BIN/test_ops --filter "wgmma row"
grep -E "^FAIL|passed|failed" $R/ops.log | tail -8 >> $SUMMARY
step "perf gemm" $R/perf.log 120 $BIN/test_ops --perf --filter "decode_gemm"
grep -E "decode_gemm" $R/perf.log | head -12 >> $SUMMARY
NSYS=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: $NSYS" >> $SUMMARY
if [ -n "$NSYS" ]; then
  for a in "--fp8 row --no-wgmma-gemm" "--fp8 off"; do
    tag=$(echo $a | tr -d ' -')
    step "nsys $a" $R/nsys.log 300 $NSYS profile --cuda-graph-trace=node -o $R/prof_$tag -f true $BIN/fp8rl_bench bench generate --model $CONFIG --prompts 32 --n 8 --prompt-tokens 128 --max-tokens 64 --kv-memory 40 $a
    $NSYS stats --report cuda_gpu_kern_sum --format csv -o $R/kern_$tag $R/prof_$tag.nsys-rep >> $R/nsys.log 2>&1
    $NSYS stats --report cuda_gpu_trace --format csv -o $R/trace_$tag $R/prof_$tag.nsys-rep >> $R/nsys.log 2>&1
    gzip -f $R/trace_${tag}_cuda_gpu_trace.csv
    rm -f $R/prof_$tag.nsys-rep $R/prof_$tag.sqlite
  done
fi
cat $SUMMARY
