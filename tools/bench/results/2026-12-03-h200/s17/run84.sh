# Session 17, final tree: the shared-prefix decode path with the prefix grid over groups (no
# binary search per member position) and the combine a warp per head; the merging variant of
# run79-83 dropped. Op cases, model goldens and random models, generation against the CPU, the
# trainer, two alternated FP8-row / bf16 pairs, groups from 16 tokens at bench generate's
# shape, 256-token prompts with groups from 256 against the default 384, the 4096-token pair.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
step "ops paged_attention" $R/ops.log 200 $BIN/test_ops --filter paged_attention
step "ops graph" $R/ops.log 120 $BIN/test_ops --filter graph
step "ops quick" $R/ops.log 200 $BIN/test_ops --quick
grep -E "^FAIL|passed|failed" $R/ops.log | tail -6 >> $SUMMARY
step "perf shared_prefix" $R/perf.log 200 $BIN/test_ops --perf --filter "shared_prefix"
grep -E "shared_prefix=(off|mma) " $R/perf.log | sed 's/ Hq=32 Hkv=8 D=128//; s/paged_attention decode shared_prefix=//' >> $SUMMARY
step "model goldens" $R/model.log 120 $BIN/test_model_gpu --data tests/data --arch all
step "model random" $R/model.log 120 $BIN/test_model_gpu --data tests/data --random
grep -E "^FAIL|passed|failed|failures" $R/model.log | tail -4 >> $SUMMARY
step "generate gpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^FAIL|failures|shared_prefix=on" $R/generate.log | tail -6 >> $SUMMARY
step "train gpu" $R/train.log 300 $BIN/test_train_gpu
grep -E "failure" $R/train.log | tail -1 >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for i in 1 2; do
  step "bench row $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
  step "bench off $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
done
step "bench row groups16" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row --shared-prefix-min-tokens 16
step "bench off groups16" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off --shared-prefix-min-tokens 16
P256="--prompts 32 --n 8 --prompt-tokens 256 --max-tokens 256 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda --fp8 row"
step "bench p256 groups256" $R/bench.log 200 $BIN/fp8rl_bench bench generate $P256 --shared-prefix-min-tokens 256
step "bench p256 default" $R/bench.log 200 $BIN/fp8rl_bench bench generate $P256
LONG="--prompts 8 --n 8 --prompt-tokens 4096 --max-tokens 256 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda --fp8 row"
step "bench 4096 shared" $R/bench.log 200 $BIN/fp8rl_bench bench generate $LONG
step "bench 4096 no-shared" $R/bench.log 200 $BIN/fp8rl_bench bench generate $LONG --no-shared-prefix
grep -E '^===|"output_tokens_per_second"|device_step_seconds|device_idle_fraction' $R/bench.log | sed 's/build-gpu.*--device cuda//' >> $SUMMARY
cat $SUMMARY
