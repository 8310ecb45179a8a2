# Session 18: the persistent tensor-core decode kernel alone under ncu (real clocks, warm
# caches): where its time goes at bench generate's mean context (384 keys, no sharing).
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
f="shared_prefix=off S=256 (32x8) ctx=384"
step "ncu $f" $R/ncu.log 150 $NCU --kernel-name regex:"paged_decode" --launch-skip 9 --launch-count 1 \
  --clock-control none --cache-control none \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section SchedulerStats \
  $BIN/test_ops --perf --filter "$f"
cat $R/ncu.log | grep -vE "^==PROF==|^\s*$" | tail -120 >> $SUMMARY
cat $SUMMARY
