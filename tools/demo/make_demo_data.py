#!/usr/bin/env python3
"""Writes the demo's GRPO data: examples/demo/train.jsonl and examples/demo/eval.jsonl.

The task: two-digit addition, "What is 37+45?" -> "82". Every pair (a, b) with a, b in [10, 99]
(8100 pairs, sums 20..198); a seeded shuffle puts EVAL_ROWS of them in eval.jsonl and the next
TRAIN_ROWS in train.jsonl, disjoint. train_demo_model.py trains on every pair not in eval.jsonl, so
eval.jsonl is held out from the model's SFT and from GRPO.

Rows: {"messages": [{"role": "user", "content": "What is 37+45?"}], "answer": "82"} -- a chat
prompt (the model's template adds the generation prompt) plus the column the answer_match reward
reads. Standard library only. Usage: python3 tools/demo/make_demo_data.py [OUT_DIR]
(default examples/demo, relative to the repository root).
"""
import json
import os
import random
import sys

SEED = 20261201
LOW, HIGH = 10, 99  # operand range, inclusive: every prompt has the same token length
EVAL_ROWS = 500
TRAIN_ROWS = 2000


def question(a, b):
    return f"What is {a}+{b}?"


def all_pairs():
    return [(a, b) for a in range(LOW, HIGH + 1) for b in range(LOW, HIGH + 1)]


def row(a, b):
    return {"messages": [{"role": "user", "content": question(a, b)}], "answer": str(a + b)}


def write_jsonl(path, pairs):
    with open(path, "w", encoding="utf-8") as f:
        for a, b in pairs:
            f.write(json.dumps(row(a, b)) + "\n")


def main():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(repo, "examples", "demo")
    os.makedirs(out, exist_ok=True)
    pairs = all_pairs()
    random.Random(SEED).shuffle(pairs)
    eval_pairs = pairs[:EVAL_ROWS]
    train_pairs = pairs[EVAL_ROWS:EVAL_ROWS + TRAIN_ROWS]
    write_jsonl(os.path.join(out, "eval.jsonl"), eval_pairs)
    write_jsonl(os.path.join(out, "train.jsonl"), train_pairs)
    print(f"wrote {len(train_pairs)} rows to {out}/train.jsonl and {len(eval_pairs)} to "
          f"{out}/eval.jsonl")


if __name__ == "__main__":
    main()
