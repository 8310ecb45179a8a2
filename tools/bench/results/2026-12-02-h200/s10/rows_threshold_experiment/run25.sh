BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
CONFIG=tools/bench/configs/qwen3-8b
step "ops concurrent" $R/ops.log 120 $BIN/test_ops --filter "linear concurrent"
grep -E "^(PASS|FAIL)|passed" $R/ops.log >> $SUMMARY
S8="--prompts 1 --n 8 --prompt-tokens 128 --max-tokens 512 --fp8 row --kv-memory 2"
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --fp8 row --kv-memory 40"
step "gen8" $R/bench.log 200 $BIN/fp8rl_bench bench generate --model $CONFIG $S8
step "gen256" $R/bench.log 200 $BIN/fp8rl_bench bench generate --model $CONFIG $GEN
grep -hE '"(output_tokens_per_second)"' $R/bench.log | tr -s ' ' >> $SUMMARY
shape="--prompts 1 --generations 8 --prompt-tokens 128 --completion-tokens 512 --lora-r 32 --checkpointing --kv-memory 1 --steps 3 --device cuda"
step "bench grpo 8b row" $R/grpo_bench.log 200 $BUILD/bin/fp8rl bench grpo --preset qwen3-8b --fp8 row $shape --out $R/grpo_qwen3-8b_row.json
python3 -c "
import json; d=json.load(open('$R/grpo_qwen3-8b_row.json')); print('grpo 8b row', d['last_step/timing/step_seconds'], d['last_step/timing/rollout_seconds'])" >> $SUMMARY
cat $SUMMARY
