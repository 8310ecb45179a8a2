# ncu of the two decode kernels at bench generate's mean context (no shared prefix) and a
# plain long-context decode.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "ncu=$NCU" >> $SUMMARY
for f in "shared_prefix=off S=256 (32x8) ctx=384" "shared_prefix=off-cuda-cores S=256 (32x8) ctx=384" "decode S=64 ctx=2048"; do
  step "ncu $f" $R/ncu.log 120 $NCU --kernel-name regex:"paged_decode_(mma_)?kernel" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section LaunchStats \
    $BIN/test_ops --perf --filter "$f"
done
cat $SUMMARY
