BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
OUT=$R/train bash tests/gpu/train.sh build-gpu > /dev/null 2>&1
cat $R/train/summary.txt >> $SUMMARY
grep -A8 "memory plan" $R/train/grpo.log >> $SUMMARY
step "test_train_gpu" $R/t.log 200 $BIN/test_train_gpu
grep -E "^FAIL|failure" $R/t.log >> $SUMMARY
cat $SUMMARY
