BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
CONFIG=tools/bench/configs/qwen3-8b
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512"
for a in "--fp8 row" "--fp8 off"; do
  n=$(echo $a | tr -d ' -'); step "bench $a" $R/bench.log 200 $BIN/fp8rl_bench bench generate --model $CONFIG $GEN $a --kv-memory 40 --out $R/gen_$n.json
done
step "hf generate bf16" $R/hf.log 400 python3 tools/bench/hf_generate.py --preset qwen3-8b --prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --attn sdpa
grep -hE '"(fp8|output_tokens_per_second|host_fraction|roofline_output_tokens_per_s)"' $R/bench.log | tr -s ' ' >> $SUMMARY
grep -h anchor $R/hf.log | cut -c1-200 >> $SUMMARY
cat $SUMMARY
