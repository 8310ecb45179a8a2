# Session 18: the tensor-core decode kernel with persistent blocks (several items each, the
# next item's first tile and query rows copied while one finishes). Correctness of the op
# cases (with the new 1-SM and block-per-item grids bit for bit), racecheck on one case, the
# perf rows with and without, bench generate pairs with --no-persistent-decode as control.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
step "ops paged_attention" $R/ops.log 200 $BIN/test_ops --filter paged_attention
grep -E "^FAIL|passed|failed" $R/ops.log | tail -6 >> $SUMMARY
grep -E "FAIL|many items" $R/ops.log | head -20 >> $R/ops_fail.log
step "racecheck" $R/race.log 150 $SANITIZER --tool racecheck $BIN/test_ops --filter "paged_attention decode Hq=8 Hkv=2 D=128"
tail -5 $R/race.log >> $SUMMARY
step "perf shared_prefix" $R/perf.log 200 $BIN/test_ops --perf --filter "shared_prefix"
grep -E "shared_prefix=(off|mma|mma-item-blocks|off-item-blocks) " $R/perf.log | sed 's/ Hq=32 Hkv=8 D=128//; s/paged_attention decode shared_prefix=//' >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
step "bench row" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
step "bench row item-blocks" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row --no-persistent-decode
step "bench off" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
step "bench off item-blocks" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off --no-persistent-decode
step "bench row 2" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
step "bench off 2" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
grep -E '^===|"output_tokens_per_second"|device_step_seconds|device_idle_fraction' $R/bench.log | sed 's/build-gpu.*--device cuda//' >> $SUMMARY
cat $SUMMARY
