BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
shape="--prompts 1 --generations 8 --prompt-tokens 128 --completion-tokens 512 --lora-r 32 --checkpointing --kv-memory 1 --steps 3 --device cuda"
for run in "qwen3-8b row" "qwen3-8b off" "qwen3-1.7b row"; do
  set -- $run
  step "bench grpo $run" $R/grpo_bench.log 200 $BUILD/bin/fp8rl bench grpo --preset $1 --fp8 $2 $shape --out $R/grpo_$1_$2.json
done
for f in $R/grpo_*.json; do python3 -c "
import json,sys; d=json.load(open('$f')); print('$f'.split('/')[-1], d['last_step/timing/step_seconds'], d['last_step/timing/rollout_seconds'], d['last_step/peak_memory_bytes/rollout']/2**30)" >> $SUMMARY; done
cat $SUMMARY
