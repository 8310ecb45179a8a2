# Decode attention variants (shared by both dtypes): a 3-stage K/V ring at 2 blocks an SM
# (s3), 256-key chunks (c256), both (s3c256), against the committed kernel (base).
V=build-var; tar -C $V -xf $V/var.tar.xz
BUILD=build-var; . tests/gpu/env.sh
export LD_LIBRARY_PATH="$V/lib:$LD_LIBRARY_PATH"
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for fp8 in row off; do
  for v in base s3 c256 s3c256; do
    step "$v $fp8" $R/bench.log 200 $V/bench_$v bench generate $GEN --fp8 $fp8
  done
done
step "base row again" $R/bench.log 200 $V/bench_base bench generate $GEN --fp8 row
grep -E '^===|"output_tokens_per_second"|device_step_seconds' $R/bench.log >> $SUMMARY
cat $SUMMARY
