# Session 17: each kernel of the shared-prefix decode path timed alone (ncu), against the plain
# path, at bench generate's mean context (384 = 128 + 256) and at 160 = 128 + 32.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for f in "shared_prefix=mma-serial S=256 (32x8) ctx=384" "shared_prefix=off S=256 (32x8) ctx=384" "shared_prefix=mma-serial S=256 (32x8) ctx=160" "shared_prefix=off S=256 (32x8) ctx=256"; do
  step "ncu $f" $R/ncu.log 120 $NCU --kernel-name regex:"paged_decode" --launch-skip 9 --launch-count 3 \
    --section SpeedOfLight --section Occupancy --section LaunchStats \
    $BIN/test_ops --perf --filter "$f"
done
grep -E "^  [a-z_]|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Grid Size|Achieved Occupancy|Registers Per|Compute \(SM\)" $R/ncu.log >> $SUMMARY
cat $SUMMARY
