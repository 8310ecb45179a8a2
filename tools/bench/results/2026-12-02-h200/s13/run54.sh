BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
for f in "split-sum" "wgmma row" "linear concurrent" "add_rms_norm" "linear row" "graph attention"; do
  step "ops $f" $R/ops.log 200 $BIN/test_ops --filter "$f"
done
grep -E "^FAIL|passed|failed" $R/ops.log | tail -14 >> $SUMMARY
grep -E "split-sum|wgmma row" $R/ops.log | cut -c1-220 >> $SUMMARY
cat $SUMMARY
