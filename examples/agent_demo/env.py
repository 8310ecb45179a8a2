#!/usr/bin/env python3
"""The agent demo's environment: two sums in a row, the second built on the first answer.

It speaks fp8rl's environment protocol (docs/ENVIRONMENTS.md): one JSON object a line on stdin,
one answer a line on stdout. Python's standard library only.

Each episode opens with the dataset row's question ("What is 37+45?"). After the model's first
answer the environment rewards it (1 if right) and asks a second question that depends on it:
"What is <the last two digits of your answer>+<the row's second number>?". The second answer is
rewarded against that sum and the episode ends. An answer that is not a number ends the episode
at once. The episode's reward is the sum: 0, 1 or 2.
"""
import json
import re
import sys


def number(text):
    text = text.strip()
    return int(text) if re.fullmatch(r"-?\d+", text) else None


def main():
    episodes = {}  # id -> the sum the current question expects
    for line in sys.stdin:
        request = json.loads(line)
        answers = []
        if request["type"] == "reset":
            episodes.clear()
            for e in request["episodes"]:
                row = e["row"]
                question = row["messages"][-1]["content"]
                a, b = (int(x) for x in re.findall(r"\d+", question)[:2])
                episodes[e["id"]] = {"expected": int(row["answer"]), "second": b, "turn": 1}
                answers.append({"id": e["id"]})  # open with the row's own messages
        else:
            for e in request["episodes"]:
                state = episodes[e["id"]]
                got = number(e["completion"])
                reward = 1.0 if got == state["expected"] else 0.0
                if got is None or state["turn"] == 2:
                    answers.append({"id": e["id"], "messages": [], "reward": reward,
                                    "done": True})
                    continue
                first = got % 100
                state.update(expected=first + state["second"], turn=2)
                ask = f"What is {first}+{state['second']}?"
                answers.append({"id": e["id"], "messages": [{"role": "user", "content": ask}],
                                "reward": reward, "done": False})
        print(json.dumps({"episodes": answers}), flush=True)


if __name__ == "__main__":
    main()
