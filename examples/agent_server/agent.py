#!/usr/bin/env python3
"""The agent demo as an agent program: the same two sums, asked through the OpenAI API.

fp8rl starts it once per run as the `environment_server` (docs/ENVIRONMENTS.md) with
OPENAI_BASE_URL and OPENAI_API_KEY set. For each round fp8rl writes one JSON line on stdin,
{"type": "reset", "episodes": [{"id": ..., "row": {...}}, ...]}; the agent runs every episode
(each in a thread of its own, so that the run batches their completions), asking for chat
completions with `model` set to the episode's id, and answers with one line
{"episodes": [{"id": ..., "reward": number}, ...]}. Python's standard library only.

An episode: the row's question ("What is 37+45?"); one point if the answer is right; then
"What is <the last two digits of the answer>+<the row's second number>?" and one point more if
that answer is right. An answer that is not a number ends the episode. Reward: 0, 1 or 2.
With --rewrite the second question is asked in a fresh conversation (no history): fp8rl then
trains each completion as a sequence of its own (env/agent/extra_sequences counts them).
"""
import json
import os
import re
import sys
import threading
import urllib.error
import urllib.request

BASE = os.environ["OPENAI_BASE_URL"]
KEY = os.environ["OPENAI_API_KEY"]
REWRITE = "--rewrite" in sys.argv[1:]


def chat(episode, messages):
    body = json.dumps({"model": episode, "messages": messages, "max_tokens": 8}).encode()
    request = urllib.request.Request(
        BASE + "/chat/completions", data=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            return json.load(response)["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as e:
        # A 400 when the episode's token budget is spent: the episode ends there.
        print(f"agent: episode {episode}: {e.code} {e.read().decode()}", file=sys.stderr)
        return None


def number(text):
    if text is None:
        return None
    text = text.strip()
    return int(text) if re.fullmatch(r"-?\d+", text) else None


def episode(e, rewards):
    row = e["row"]
    messages = list(row["messages"])
    a, b = (int(x) for x in re.findall(r"\d+", messages[-1]["content"])[:2])
    answer = chat(e["id"], messages)
    got = number(answer)
    reward = 1.0 if got == int(row["answer"]) else 0.0
    if got is not None:
        first = got % 100
        ask = {"role": "user", "content": f"What is {first}+{b}?"}
        history = [] if REWRITE else messages + [{"role": "assistant", "content": answer}]
        second = number(chat(e["id"], history + [ask]))
        reward += 1.0 if second == first + b else 0.0
    rewards[e["id"]] = reward


def main():
    for line in sys.stdin:
        request = json.loads(line)
        rewards = {}
        threads = [threading.Thread(target=episode, args=(e, rewards))
                   for e in request["episodes"]]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out = [{"id": e["id"], "reward": rewards[e["id"]]} for e in request["episodes"]]
        print(json.dumps({"episodes": out}), flush=True)


if __name__ == "__main__":
    main()
