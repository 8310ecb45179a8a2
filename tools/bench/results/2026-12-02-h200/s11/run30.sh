BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
FP8RL=$BUILD/bin/fp8rl
step "test_train_gpu" $R/train.log 200 $BIN/test_train_gpu
grep -E "device region|^FAIL|failure" $R/train.log >> $SUMMARY
step "test_generate_gpu" $R/gen.log 200 $BIN/test_generate_gpu
tail -1 $R/gen.log >> $SUMMARY
step "test_model_gpu" $R/model.log 200 $BIN/test_model_gpu
tail -1 $R/model.log >> $SUMMARY
step "ops quick" $R/ops.log 200 $BIN/test_ops --quick
grep -E "passed" $R/ops.log | tail -1 >> $SUMMARY
OUT=$R/train bash tests/gpu/train.sh build-gpu > /dev/null 2>&1
cat $R/train/summary.txt >> $SUMMARY
cat $SUMMARY
