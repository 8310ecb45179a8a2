# Session 19: which part of the pending linears pays in a graph-replayed decode step.
# new = this tree: q/k/v pending, gate/up one OUTER_VEC GEMM over the stacked weight;
# old = commit 8215865 (fp8rl_bench_fullpending): q/k/v and gate/up pending.
# --no-pending-linears: new -> gate/up stacked only; old -> the pair on two streams (baseline).
BUILD=build-gpu; . tests/gpu/env.sh
R=$OUT/r; mkdir -p $R; SUMMARY=$R/summary.txt; start=$(date +%s)
nvidia-smi --query-gpu=name,uuid --format=csv,noheader >> $SUMMARY
xz -dc build-sweep/fp8rl_bench_fullpending.xz > /tmp/old_bench && chmod +x /tmp/old_bench
step "ops pending" $R/ops.log 120 $BIN/test_ops --filter pending
step "ops gated" $R/ops.log 120 $BIN/test_ops --filter gated
grep -E "^FAIL|passed|failed" $R/ops.log | tail -3 >> $SUMMARY
GEN="--prompts 32 --n 8 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --model tools/bench/configs/qwen3-8b --device cuda"
for i in 1 2; do
  step "new row $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row
  step "new row no-pending (stacked gate/up) $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 row --no-pending-linears
  step "old row full pending $i" $R/bench.log 200 /tmp/old_bench bench generate $GEN --fp8 row
  step "old row no-pending (baseline) $i" $R/bench.log 200 /tmp/old_bench bench generate $GEN --fp8 row --no-pending-linears
  step "new off $i" $R/bench.log 200 $BIN/fp8rl_bench bench generate $GEN --fp8 off
done
grep -E '^===|"output_tokens_per_second"|device_step_seconds"' $R/bench.log | sed 's/build-gpu.*--device cuda//; s/\/tmp\/old_bench.*--device cuda//' >> $SUMMARY
step "model random" $R/model.log 120 $BIN/test_model_gpu --data tests/data --random
step "model goldens" $R/model.log 120 $BIN/test_model_gpu --data tests/data --arch all
grep -E "^FAIL|passed|failed|failures" $R/model.log | tail -4 >> $SUMMARY
step "generate gpu" $R/generate.log 300 $BIN/test_generate_gpu --data tests/data
grep -E "^FAIL|failures" $R/generate.log | tail -3 >> $SUMMARY
cat $SUMMARY
