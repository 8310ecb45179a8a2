# ncu of the tensor-core decode kernel at bench generate's mean context, and its SASS, for the
# next round of work on it.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
step "ncu mma 384" $R/ncu.log 150 $NCU --kernel-name regex:"paged_decode_mma_kernel" --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
  --section SchedulerStats --section LaunchStats --section InstructionStats --section SourceCounters \
  $BIN/test_ops --perf --filter "shared_prefix=off S=256 (32x8) ctx=384"
step "sass" $R/sass.log 60 $CUOBJDUMP -sass -fun paged_decode_mma_kernel $BIN/test_ops
grep -vE "^\s+(OPT|INF|WRN)|^          " $R/ncu.log | grep -E "Duration|DRAM Through|L2 Hit|Achieved Occ|Registers|Warp Cycles Per Issued|Issued Warp|No Eligible|Eligible Warps|Compute \(SM\) Th|Executed Ipc|Waves" >> $SUMMARY
cat $SUMMARY
