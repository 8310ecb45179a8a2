BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
step "ops split-sum" $R/ops.log 200 $BIN/test_ops --filter "split-sum"
grep -E "^FAIL|^PASS|passed|failed|^   " $R/ops.log | cut -c1-220 | tail -14 >> $SUMMARY
cat $SUMMARY
