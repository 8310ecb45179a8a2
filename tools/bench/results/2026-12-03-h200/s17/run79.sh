# Session 17: the prefix kernel merging the rows after the per-sequence kernel (PDL). Perf of
# the decode variants, the paged attention op cases (merged == prefix first + combine, bit for
# bit), generation against the CPU, then bench generate with groups from 128 prompt tokens
# against the default (none at 128).
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
step "perf shared_prefix" $R/perf.log 200 $BIN/test_ops --perf --filter "shared_prefix"
grep -E "shared_prefix" $R/perf.log | grep -v "^===" | sed 's/ Hq=32 Hkv=8 D=128//' >> $SUMMARY
step "ops paged_attention" $R/ops.log 200 $BIN/test_ops --filter paged_attention
grep -E "^FAIL|passed|failed" $R/ops.log | tail -5 >> $SUMMARY
step "generate gpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^FAIL|failures" $R/generate.log | tail -4 >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
step "bench row groups" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row --shared-prefix-min-tokens 16
step "bench off groups" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off --shared-prefix-min-tokens 16
step "bench row" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
step "bench off" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
step "bench row groups nomerge" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row --shared-prefix-min-tokens 16 --no-prefix-merge
grep -E '^===|"output_tokens_per_second"|device_step_seconds|"steps"' $R/bench.log | sed 's/build-gpu.*--device cuda//' >> $SUMMARY
cat $SUMMARY
