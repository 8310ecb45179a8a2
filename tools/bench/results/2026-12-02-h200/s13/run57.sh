BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
for f in "split-sum" "linear"; do step "ops $f" $R/ops.log 200 $BIN/test_ops --filter "$f"; done
grep -E "^FAIL|passed|failed" $R/ops.log | tail -4 >> $SUMMARY
step "generate vs cpu" $R/gen.log 200 $BIN/test_generate_gpu
grep -E "FAIL|failures" $R/gen.log | tail -2 >> $SUMMARY
cat $SUMMARY
