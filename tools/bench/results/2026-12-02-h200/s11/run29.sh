BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
FP8RL=$BUILD/bin/fp8rl
step "sft dry-run" $R/sft.log 60 $FP8RL sft examples/demo/model --data examples/demo/sft.jsonl --device cuda --max-steps 10 --out $R/sft-demo --dry-run
step "sft cuda" $R/sft.log 120 $FP8RL sft examples/demo/model --data examples/demo/sft.jsonl --device cuda --max-steps 10 --out $R/sft-demo --save-steps 0
grep -A12 "memory plan" $R/sft.log >> $SUMMARY
python3 -c "
import json
L=[json.loads(l) for l in open('$R/sft-demo/metrics.jsonl')]
print('sft region bytes per step', sorted(set(l.get('memory/device_region_bytes') for l in L)), 'peak MiB', sorted(set(l.get('peak_memory_bytes')/2**20 for l in L)))" >> $SUMMARY 2>&1
shape="--preset qwen3-8b --batch 8 --seq 1024 --lora-r 32 --checkpointing --steps 3 --warmup 1"
step "bench train row" $R/bench.log 200 $FP8RL bench train $shape --fp8 row --device cuda --out $R/train_row.json
python3 -c "
import json; d=json.load(open('$R/train_row.json')); print('bench train row', d['tokens_per_second'], d['memory'], d['plan'])" >> $SUMMARY 2>&1
step "test_train_gpu" $R/train.log 200 $BIN/test_train_gpu
grep -E "device region|^FAIL|failure" $R/train.log >> $SUMMARY
rm -rf $R/sft-demo/checkpoint-*
cat $SUMMARY
