#!/usr/bin/env bash
# The trainer on the GPU machine, one batch, from the repo root:
#   OUT=$OUT bash tests/gpu/train.sh BUILD_DIR
# BUILD_DIR is a bundle of tests/gpu/bundle.sh. Runs the CUDA backward ops against the CPU
# (test_ops, backward families; the attention backward on its tiled and its reference kernels,
# and both timed at the training benchmark's shape) and the optimizer ops (bit-exact), the CUDA
# trainer against the CPU trainer and the device optimizer step against the CPU step
# (test_train_gpu), and the demo's GRPO and an SFT run on CUDA through the CLI. Logs and the
# summary go to $OUT.
set -u
BUILD=${1:-build-gpu}
OUT=${OUT:-/tmp/fp8rl-gpu}
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
start=$(date +%s)
. "$(dirname "$0")/env.sh"
FP8RL="$BUILD/bin/fp8rl"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$SUMMARY"
for f in backward lora_dropout cross_entropy adamw_step sgd_step l2_norm; do
  step "ops $f" "$OUT/ops.log" 150 "$BIN/test_ops" --filter "$f"
done
step "ops attention backward reference" "$OUT/ops.log" 150 "$BIN/test_ops" \
  --reference-attention-backward --op paged_attention_backward
step "perf attention backward" "$OUT/ops.log" 120 "$BIN/test_ops" --perf \
  --op paged_attention_backward
step "test_train_gpu" "$OUT/train.log" 240 "$BIN/test_train_gpu"
step "grpo demo cuda" "$OUT/grpo.log" 150 "$FP8RL" grpo --config examples/demo.yaml \
  --device cuda --max-steps 20 --output-dir "$OUT/grpo-demo" --save-steps 0 --overwrite-output-dir
step "sft cuda" "$OUT/sft.log" 120 "$FP8RL" sft examples/demo/model --data examples/demo/sft.jsonl \
  --device cuda --max-steps 10 --out "$OUT/sft-demo" --save-steps 0 --overwrite-output-dir
# The memory plan: the dry run's total (all of it in the one device region) against the
# peak the run measured, within 10%.
step "sft cuda dry-run" "$OUT/sft.log" 60 "$FP8RL" sft examples/demo/model \
  --data examples/demo/sft.jsonl --device cuda --max-steps 10 --out "$OUT/sft-demo" --dry-run
python3 - "$OUT/sft.log" "$OUT/sft-demo/metrics.jsonl" >> "$SUMMARY" <<'PY'
import json, re, sys
plan = float(re.findall(r"total\s+([0-9.]+) MiB", open(sys.argv[1]).read())[-1])
peak = max(json.loads(l)["peak_memory_bytes"] for l in open(sys.argv[2])) / 2**20
ok = abs(plan - peak) <= 0.1 * peak
print(f"{'PASS' if ok else 'FAIL'} sft dry-run plan {plan:.1f} MiB vs measured peak {peak:.1f} MiB")
PY
step "grpo cuda dry-run" "$OUT/grpo.log" 60 "$FP8RL" grpo --config examples/demo.yaml \
  --device cuda --max-steps 20 --output-dir "$OUT/grpo-demo" --dry-run
python3 - "$OUT/grpo.log" "$OUT/grpo-demo/metrics.jsonl" >> "$SUMMARY" <<'PY'
import json, re, sys
plan = float(re.findall(r"total\s+([0-9.]+) MiB", open(sys.argv[1]).read())[-1])
L = [json.loads(l) for l in open(sys.argv[2])]
peak = max(max(l.get("peak_memory_bytes/rollout", 0), l.get("peak_memory_bytes/train", 0)) for l in L) / 2**20
ok = abs(plan - peak) <= 0.1 * peak
print(f"{'PASS' if ok else 'FAIL'} grpo dry-run plan {plan:.1f} MiB vs measured peak {peak:.1f} MiB")
PY
rm -rf "$OUT/grpo-demo/checkpoint-"* "$OUT/sft-demo/checkpoint-"*
cat "$SUMMARY"
