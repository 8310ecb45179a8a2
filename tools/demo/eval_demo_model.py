#!/usr/bin/env python3
"""Accuracy of the demo model (optionally with a LoRA adapter) on examples/demo/eval.jsonl, run
by `fp8rl generate`: the fraction of prompts whose completion's last number equals `answer` (the
demo's answer_match numeric reward, without \\boxed{}, which the demo never writes).

Greedy (--temperature 0, the default) or sampled (--temperature 1 --n 8: the mean over all
samples, what GRPO's reward measures). Standard library only. Examples, from the repository root:
  python3 tools/demo/eval_demo_model.py                                 # the base model, greedy
  python3 tools/demo/eval_demo_model.py --adapter runs/demo/checkpoint-60 --fp8 row
  python3 tools/demo/eval_demo_model.py --temperature 1 --n 8
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def last_number(text):
    nums = re.findall(r"-?\d+(?:\.\d+)?", text.replace(",", ""))
    return float(nums[-1]) if nums else None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--fp8rl", default=os.path.join(REPO, "build", "src", "cli", "fp8rl"))
    p.add_argument("--model", default=os.path.join(REPO, "examples", "demo", "model"))
    p.add_argument("--data", default=os.path.join(REPO, "examples", "demo", "eval.jsonl"))
    p.add_argument("--adapter", default="")
    p.add_argument("--fp8", default="auto")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--n", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()

    if not os.path.isfile(args.fp8rl):
        sys.exit(f"{args.fp8rl} does not exist: build fp8rl (scripts/build.sh) or pass --fp8rl")
    rows = [json.loads(line) for line in open(args.data, encoding="utf-8")]
    with tempfile.TemporaryDirectory() as tmp:
        prompts = os.path.join(tmp, "prompts.jsonl")
        out = os.path.join(tmp, "out.jsonl")
        with open(prompts, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps({"messages": r["messages"]}) + "\n")
        cmd = [args.fp8rl, "generate", args.model, "--prompts", prompts, "--out", out,
               "--n", str(args.n), "--max-tokens", str(args.max_tokens),
               "--temperature", str(args.temperature), "--seed", str(args.seed),
               "--fp8", args.fp8, "--device", args.device,
               # Room for every sample at once: the engine's scheduler admits a prompt's n
               # samples in one prefill step even past max_num_seqs, then fails the step.
               "--max-num-seqs", str(max(256, args.n * len(rows)))]
        if args.adapter:
            cmd += ["--adapter", args.adapter]
        run = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
        if run.returncode != 0:  # the progress lines are noise; the error is the last line
            sys.exit(f"{' '.join(cmd)} failed: {run.stderr.strip().splitlines()[-1]}")
        results = [json.loads(line) for line in open(out, encoding="utf-8")]
    assert len(results) == len(rows), "fp8rl generate wrote a different number of lines"
    hits = total = 0
    for r, res in zip(rows, results):
        for c in res["completions"]:
            total += 1
            n = last_number(c["text"])
            hits += n is not None and n == float(r["answer"])
    mode = "greedy" if args.temperature == 0 else f"T={args.temperature:g}, n={args.n}"
    what = "model + adapter" if args.adapter else "model"
    print(f"{what}, {mode}, fp8 {args.fp8}: {hits}/{total} = {hits / total:.3f} correct on "
          f"{os.path.relpath(args.data, REPO)}")


if __name__ == "__main__":
    sys.exit(main())
