# Session 17: the decode kernel reading its block-table entries a tile ahead (E1), and an
# experimental 3-stage ring at 2 blocks an SM (E3, FP8RL_DECODE_STAGES=3).
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
step "perf decode E1" $R/perf.log 200 $BIN/test_ops --perf --filter "decode"
grep -E "decode" $R/perf.log | grep -v "^===" | grep -v "cuda-cores" | sed 's/ Hq=32 Hkv=8 D=128//' >> $SUMMARY
export FP8RL_DECODE_STAGES=3
step "perf decode E3" $R/perf3.log 200 $BIN/test_ops --perf --filter "decode"
grep -E "decode" $R/perf3.log | grep -v "^===" | grep -v "cuda-cores" | sed 's/ Hq=32 Hkv=8 D=128//' >> $SUMMARY
step "ops paged_attention E3" $R/ops.log 200 $BIN/test_ops --filter paged_attention
unset FP8RL_DECODE_STAGES
step "ops paged_attention E1" $R/ops.log 200 $BIN/test_ops --filter paged_attention
grep -E "^FAIL|passed|failed" $R/ops.log | tail -5 >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
step "bench row" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
step "bench off" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
FP8RL_DECODE_STAGES=3 step "bench row E3" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
FP8RL_DECODE_STAGES=3 step "bench off E3" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
grep -E '^===|"output_tokens_per_second"|device_step_seconds' $R/bench.log | sed 's/build-gpu.*--device cuda//' >> $SUMMARY
cat $SUMMARY
