#!/usr/bin/env python3
"""Preference pairs for the reward-model demo (examples/demo_reward_model.yaml) from the demo's
prompt rows, labelled by the answer check: the correct sum is `chosen`, a wrong answer is
`rejected` (TRL's RewardTrainer format, conversational).

  python3 examples/demo/make_reward_pairs.py prompts IN.jsonl PROMPTS.jsonl
  fp8rl generate examples/demo/model --prompts PROMPTS.jsonl --out SAMPLES.jsonl --n 8 ...
  python3 examples/demo/make_reward_pairs.py pairs IN.jsonl OUT.jsonl --samples SAMPLES.jsonl

`prompts` writes the rows' messages alone (fp8rl generate's input). `pairs` writes two pairs per
row: the first rejected answer is one of the demo model's own wrong samples (SAMPLES.jsonl, fp8rl
generate's output for the same rows, in order; the first whose last number is not the sum), the
second one drawn with a seeded RNG (standard library only) from four kinds with equal odds: a
carry error (the sum +-10), a last-digit error, a near miss (the sum +-1..9) or any number of 1
to 4 digits (never the sum, never below 0). A row whose samples are all right gets two drawn
ones. The model's own mistakes are what GRPO will show the reward model; drawn answers alone
leave it blind to them (GRPO then learns answers it scores wrongly)."""
import argparse
import json
import random
import re


def drawn_wrong_answer(total: int, rng: random.Random) -> str:
    while True:
        kind = rng.randrange(4)
        if kind == 0:
            w = total + rng.choice((-10, 10))
        elif kind == 1:
            w = total - total % 10 + rng.randrange(10)
        elif kind == 2:
            w = total + rng.choice((-1, 1)) * rng.randint(1, 9)
        else:
            w = rng.randrange(10 ** rng.randint(1, 4))
        if w != total and w >= 0:
            return str(w)


def is_right(text: str, total: int) -> bool:
    # The reward's numeric answer_match: the last number of the completion equals the sum.
    numbers = re.findall(r"-?\d+", text)
    return bool(numbers) and int(numbers[-1]) == total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("prompts", "pairs"))
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--samples", help="fp8rl generate's output for the same rows (pairs)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rows = [json.loads(line) for line in open(a.input)]
    with open(a.output, "w") as out:
        if a.mode == "prompts":
            for row in rows:
                out.write(json.dumps({"messages": row["messages"]}) + "\n")
            return
        samples = [json.loads(line) for line in open(a.samples)] if a.samples else None
        if samples is not None and len(samples) != len(rows):
            raise SystemExit(f"{a.samples} has {len(samples)} lines, {a.input} {len(rows)} rows")
        rng = random.Random(a.seed)
        own = 0
        for i, row in enumerate(rows):
            total = int(row["answer"])
            wrong = []
            if samples is not None:
                for c in samples[i]["completions"]:
                    if not is_right(c["text"], total):
                        wrong.append(c["text"])
                        own += 1
                        break
            while len(wrong) < 2:
                wrong.append(drawn_wrong_answer(total, rng))
            for w in wrong:
                pair = {
                    "prompt": row["messages"],
                    "chosen": [{"role": "assistant", "content": str(total)}],
                    "rejected": [{"role": "assistant", "content": w}],
                }
                out.write(json.dumps(pair) + "\n")
        print(f"{2 * len(rows)} pairs ({own} with the model's own wrong answer) -> {a.output}")


if __name__ == "__main__":
    main()
