#!/usr/bin/env bash
# Quick start, main job: set up, build, then GRPO on the bundled demo model (a 0.8M-parameter
# Qwen3 trained here to be mediocre at two-digit addition, examples/demo/README.md) on the CPU,
# with LoRA over its FP8-row weights: examples/demo.yaml into runs/demo/. The reward (the
# fraction of sampled answers that are right) is printed every step, the held-out greedy
# accuracy every 50 (eval_reward); at the end, its curve and the HTML report runs/demo/report.html.
#   scripts/demo.sh [extra grpo flags, e.g. --max-steps 50 or --fp8 off --output-dir runs/demo-bf16]
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the demo runs: the fp8rl binary for the CPU, in a build directory of its own (the
# tests, benchmarks and CUDA kernels of scripts/build.sh would take most of the time).
scripts/setup.sh --minimal
echo "== building fp8rl (CPU only) in build-demo/"
cmake -S . -B build-demo -DCMAKE_BUILD_TYPE=Release -DFP8RL_WITH_CUDA=OFF -DFP8RL_TESTS=OFF \
  -DFP8RL_BENCH=OFF >/dev/null
cmake --build build-demo -j"$(nproc)" --target fp8rl
fp8rl=build-demo/src/cli/fp8rl
out=runs/demo
for ((i = 1; i <= $#; ++i)); do
  [ "${!i}" = "--output-dir" ] || [ "${!i}" = "--out" ] && { j=$((i + 1)); out=${!j}; }
done
rm -rf "$out"
echo "== GRPO on examples/demo/model (fp8rl grpo --config examples/demo.yaml $*)"
"$fp8rl" grpo --config examples/demo.yaml "$@"
"$fp8rl" report "$out"
python3 - "$out/metrics.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
r = [x.get("reward") for x in lines if x.get("reward") is not None]
k = max(1, min(20, len(r) // 4))
print(f"== mean reward of the first {k} steps {sum(r[:k]) / k:.3f}, of the last {k} steps "
      f"{sum(r[-k:]) / k:.3f} ({len(r)} steps)")
# The evaluations (eval_strategy in examples/demo.yaml): greedy answers to the held-out sums.
evals = [(x["step"], x["eval_reward"]) for x in lines if x.get("eval_reward") is not None]
if evals:
    print("== held-out greedy accuracy (examples/demo/eval.jsonl, 500 sums; eval_reward):")
    print("   " + ", ".join(f"step {s}: {a:.1%}" for s, a in evals))
PY
echo "== report: $out/report.html"
