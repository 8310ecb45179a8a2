# The parts of run65.sh whose logs did not come back (file count): the trainer's GPU cases and
# the op cases (quick, then the families this session touched).
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
step "train gpu" $R/t.log 300 $BIN/test_train_gpu
grep -c "^PASS" $R/t.log >> $SUMMARY; grep "^FAIL" $R/t.log >> $SUMMARY; tail -1 $R/t.log >> $SUMMARY
step "ops quick" $R/o.log 300 $BIN/test_ops --quick
for f in "split-sum" "linear" "add_rms_norm" "quantize" "graph" "sample"; do
  step "ops $f" $R/o.log 200 $BIN/test_ops --filter "$f"
done
grep -E "^FAIL|passed|failed" $R/o.log >> $SUMMARY
rm -f $R/t.log $R/o.log
cat $SUMMARY
