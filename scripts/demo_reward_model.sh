#!/usr/bin/env bash
# The reward-model demo on the CPU: preference pairs from the demo's sums labelled by the answer
# check (examples/demo/make_reward_pairs.py, with the demo model's own samples from fp8rl
# generate), a reward model trained on them by `fp8rl reward`
# (examples/demo_reward_model_rm.yaml, runs/demo-rm), then GRPO with that model as the reward
# (examples/demo_reward_model.yaml, runs/demo-reward-model). Prints the reward model's
# held-out pair accuracy and the policy's held-out greedy accuracy before and after.
#   scripts/demo_reward_model.sh [FP8RL_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
fp8rl=${1:-}
if [ -z "$fp8rl" ]; then
  scripts/setup.sh --minimal
  cmake -S . -B build-demo -DCMAKE_BUILD_TYPE=Release -DFP8RL_WITH_CUDA=OFF -DFP8RL_TESTS=OFF \
    -DFP8RL_BENCH=OFF >/dev/null
  cmake --build build-demo -j"$(nproc)" --target fp8rl
  fp8rl=build-demo/src/cli/fp8rl
fi
rm -rf runs/demo-rm-pairs runs/demo-rm runs/demo-reward-model
mkdir -p runs/demo-rm-pairs
echo "== preference pairs: the sum chosen, a wrong answer (the demo model's own or drawn) rejected"
gen=(examples/demo/model --n 8 --max-tokens 8 --fp8 row)
for split in train eval; do
  python3 examples/demo/make_reward_pairs.py prompts examples/demo/$split.jsonl \
    runs/demo-rm-pairs/${split}_prompts.jsonl
done
"$fp8rl" generate "${gen[@]}" --seed 1 --prompts runs/demo-rm-pairs/train_prompts.jsonl \
  --out runs/demo-rm-pairs/train_samples.jsonl
"$fp8rl" generate "${gen[@]}" --seed 2 --prompts runs/demo-rm-pairs/eval_prompts.jsonl \
  --out runs/demo-rm-pairs/eval_samples.jsonl
python3 examples/demo/make_reward_pairs.py pairs examples/demo/train.jsonl \
  runs/demo-rm-pairs/train.jsonl --samples runs/demo-rm-pairs/train_samples.jsonl
python3 examples/demo/make_reward_pairs.py pairs examples/demo/eval.jsonl \
  runs/demo-rm-pairs/eval.jsonl --samples runs/demo-rm-pairs/eval_samples.jsonl --seed 1
echo "== reward model (fp8rl reward --config examples/demo_reward_model_rm.yaml)"
"$fp8rl" reward --config examples/demo_reward_model_rm.yaml
echo "== GRPO against it (fp8rl grpo --config examples/demo_reward_model.yaml)"
"$fp8rl" grpo --config examples/demo_reward_model.yaml
python3 - runs/demo-rm/metrics.jsonl runs/demo-reward-model/metrics.jsonl <<'PY'
import json, sys
rm = [json.loads(l) for l in open(sys.argv[1])]
acc = [(x["step"], x["eval_rewards/accuracies"]) for x in rm if "eval_rewards/accuracies" in x]
print("== reward model, held-out pair accuracy (eval.jsonl's sums): " +
      ", ".join(f"step {s}: {a:.1%}" for s, a in acc))
g = [json.loads(l) for l in open(sys.argv[2])]
ev = [(x["step"], x["eval_rewards/answer_match/mean"]) for x in g
      if x.get("eval_rewards/answer_match/mean") is not None]
print("== policy, held-out greedy accuracy (eval.jsonl, 500 sums): " +
      ", ".join(f"step {s}: {a:.1%}" for s, a in ev))
tr = [x["rewards/answer_match/mean"] for x in g if "rewards/answer_match/mean" in x]
k = max(1, min(20, len(tr) // 4))
print(f"== sampled answers right: first {k} steps {sum(tr[:k]) / k:.3f}, last {k} steps "
      f"{sum(tr[-k:]) / k:.3f}")
PY
