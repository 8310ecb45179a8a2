BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
FP8RL=$BUILD/bin/fp8rl
step "info" $R/info.log 30 $FP8RL info examples/demo/model --device cuda
tail -3 $R/info.log >> $SUMMARY
step "grpo demo cuda" $R/grpo.log 150 $FP8RL grpo --config examples/demo.yaml --device cuda --max-steps 20 --output-dir $R/grpo-demo --save-steps 0
tail -2 $R/grpo.log >> $SUMMARY
python3 -c "
import json
L=[json.loads(l) for l in open('$R/grpo-demo/metrics.jsonl')]
print('grpo region bytes per step', sorted(set(l.get('memory/device_region_bytes') for l in L)), 'standby', sorted(set(l.get('memory/standby_region_bytes') for l in L)), 'reward first/last', L[0].get('reward'), L[-1].get('reward'))" >> $SUMMARY 2>&1
step "sft dry-run" $R/sft.log 60 $FP8RL sft examples/demo/model --data examples/demo/sft.jsonl --device cuda --max-steps 10 --out $R/sft-demo --dry-run
step "sft cuda" $R/sft.log 120 $FP8RL sft examples/demo/model --data examples/demo/sft.jsonl --device cuda --max-steps 10 --out $R/sft-demo --save-steps 0
grep -A12 "memory plan" $R/sft.log >> $SUMMARY
python3 -c "
import json
L=[json.loads(l) for l in open('$R/sft-demo/metrics.jsonl')]
print('sft region bytes per step', sorted(set(l.get('memory/device_region_bytes') for l in L)), 'peak', sorted(set(l.get('peak_memory_bytes') for l in L)))" >> $SUMMARY 2>&1
shape="--prompts 1 --generations 8 --prompt-tokens 128 --completion-tokens 512 --lora-r 32 --checkpointing --kv-memory 1 --steps 3 --device cuda"
step "bench grpo 8b row" $R/grpo_bench.log 240 $FP8RL bench grpo --preset qwen3-8b --fp8 row $shape --out $R/grpo_qwen3-8b_row.json
python3 -c "
import json; d=json.load(open('$R/grpo_qwen3-8b_row.json')); print('grpo 8b row', d['last_step/timing/step_seconds'], d['last_step/timing/rollout_seconds'], {k:v for k,v in d.items() if 'memory' in k or 'peak' in k})" >> $SUMMARY 2>&1
rm -rf $R/grpo-demo/checkpoint-* $R/sft-demo/checkpoint-*
cat $SUMMARY
