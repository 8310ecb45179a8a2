BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
CONFIG=tools/bench/configs/qwen3-8b
S="--prompts 1 --n 8 --prompt-tokens 128 --max-tokens 512 --fp8 row --kv-memory 2"
for i in 1 2; do for a in "" "--no-concurrent-linears"; do
  step "gen8 $a" $R/bench.log 200 $BIN/fp8rl_bench bench generate --model $CONFIG $S $a
done; done
grep -hE '"(concurrent_linears|output_tokens_per_second)"' $R/bench.log | tr -s ' ' >> $SUMMARY
python3 - <<'PY' >> $SUMMARY
import json,re
txt=open('/root/out/r/bench.log'.replace('/root/out', __import__('os').environ['OUT'])).read()
for part in re.split(r'^=== .*$', txt, flags=re.M):
    part=part.strip()
    if not part: continue
    d=json.loads(part[part.find('{'):])
    print(d['concurrent_linears'], round(d['output_tokens_per_second']), [ (e['op'], round(1000*e['ms']/e['calls'],1)) for e in d['op_profile_detail'][:6]])
PY
cat $SUMMARY
