#!/usr/bin/env bash
# The GRPO step benchmark on the GPU machine, one batch, from the repo root:
#   OUT=$OUT bash tests/gpu/bench_grpo.sh BUILD_DIR
# fp8rl bench grpo on the Qwen3-1.7B and Qwen3-8B presets (random weights): 1 prompt of 128
# tokens x 8 generations of exactly 512 tokens, r = 32 on all seven projections,
# checkpointing on, 1 GiB of KV in the standby region; FP8-row and bf16 (8B), and FP8-row 8B
# with --on-policy-exact (its cost). Then the demo's GRPO on CUDA (20 steps) with its
# engine-trainer mismatch and per-phase peaks, and the same with on_policy_exact. JSON and logs
# go to $OUT.
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
shape="--prompts 1 --generations 8 --prompt-tokens 128 --completion-tokens 512 --lora-r 32 \
  --checkpointing --kv-memory 1 --steps 3 --device cuda"
for run in "qwen3-1.7b row" "qwen3-8b row" "qwen3-8b off" "qwen3-8b row exact"; do
  set -- $run
  exact=""
  [ "${3:-}" = exact ] && exact="--on-policy-exact"
  step "bench grpo $run" "$OUT/grpo_bench.log" 200 "$FP8RL" bench grpo --preset "$1" \
    --fp8 "$2" $exact $shape --out "$OUT/grpo_$1_$2${3:+_$3}.json"
done
step "grpo demo cuda" "$OUT/grpo.log" 120 "$FP8RL" grpo --config examples/demo.yaml \
  --device cuda --max-steps 20 --output-dir "$OUT/grpo-demo" --save-steps 0
# The same with on_policy_exact: every round's mismatch is checked to be exactly 0.
step "grpo demo cuda on_policy_exact" "$OUT/grpo_exact.log" 120 "$FP8RL" grpo \
  --config examples/demo.yaml --device cuda --max-steps 20 --output-dir "$OUT/grpo-demo-exact" \
  --save-steps 0 --on-policy-exact true
python3 - "$OUT" >> "$SUMMARY" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
for f in sorted(glob.glob(os.path.join(out, "grpo_*.json"))):
    j = json.load(open(f))
    g = lambda k: j.get("last_step/" + k, 0)
    print(os.path.basename(f), "peak GiB rollout/train %.2f/%.2f region %.2f GiB step %.2f s"
          % (g("peak_memory_bytes/rollout") / 2**30, g("peak_memory_bytes/train") / 2**30,
             g("memory/standby_region_bytes") / 2**30, g("timing/step_seconds")),
          "rollout/logprob/train s %.2f/%.2f/%.2f" % (g("timing/rollout_seconds"),
          g("timing/rollout_logprob_seconds"), g("timing/train_seconds")))
for run in ("grpo-demo", "grpo-demo-exact"):
    path = os.path.join(out, run, "metrics.jsonl")
    if not os.path.exists(path):
        print(run, "no metrics")
        continue
    L = [json.loads(l) for l in open(path)]
    print(run, "cuda: logp difference mean/max over steps",
          max(l.get("sampling/sampling_logp_difference/mean", 0) for l in L),
          max(l.get("sampling/sampling_logp_difference/max", 0) for l in L),
          "reward first/last", L[0]["reward"], L[-1]["reward"],
          "step seconds mean %.3f" % (sum(l["timing/step_seconds"] for l in L) / len(L)),
          "peak rollout/train", L[-1]["peak_memory_bytes/rollout"],
          L[-1]["peak_memory_bytes/train"])
PY
rm -rf "$OUT/grpo-demo" "$OUT/grpo-demo-exact"
cat "$SUMMARY"
