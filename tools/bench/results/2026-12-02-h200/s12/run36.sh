# Steps without shared-prefix groups take the plain decode path (graphs keyed apart): the
# engine against the CPU, the trainer, bench generate (both dtypes, twice), long prompts,
# bench grpo.
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
CONFIG=tools/bench/configs/qwen3-8b
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40"
step "generate vs cpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^(FAIL)|failures|passed" $R/generate.log | tail -3 >> $SUMMARY
step "train gpu" $R/train.log 300 $BIN/test_train_gpu
grep -c "^PASS" $R/train.log >> $SUMMARY; grep "^FAIL" $R/train.log >> $SUMMARY; tail -1 $R/train.log >> $SUMMARY
for a in "--fp8 row" "--fp8 off" "--fp8 row" "--fp8 off"; do
  step "bench $a" $R/bench.log 200 $BIN/fp8rl_bench bench generate --model $CONFIG $GEN $a --out $R/gen_$(echo $a | tr -d ' -')_$(date +%s).json
done
for a in "--fp8 row" "--fp8 off"; do
  step "bench long $a" $R/bench_long.log 200 $BIN/fp8rl_bench bench generate --model $CONFIG --prompts 32 --n 8 --prompt-tokens 1024 --max-tokens 256 --kv-memory 40 $a --out $R/genlong_$(echo $a | tr -d ' -').json
done
for f in $R/bench.log $R/bench_long.log; do
grep -hE '"(fp8|grouped_sequence_steps|output_tokens_per_second|device_step_seconds|graph_steps|captured)"' $f | tr -s ' ' | paste -sd' ' | sed 's/"captured"/\n"captured"/g' >> $SUMMARY
done
shape="--prompts 1 --generations 8 --prompt-tokens 128 --completion-tokens 512 --lora-r 32 --checkpointing --kv-memory 1 --steps 3 --device cuda"
step "bench grpo 8b row" $R/grpo.log 240 $BUILD/bin/fp8rl bench grpo --preset qwen3-8b --fp8 row $shape --out $R/grpo_qwen3-8b_row.json
grep -E '"last_step/timing/(step|rollout)_seconds"|on_policy_exact' $R/grpo.log | head -4 >> $SUMMARY
cat $SUMMARY
