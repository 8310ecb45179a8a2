"""Example TRL-style reward functions for math answers, standard library only.

Each function runs unchanged under TRL's GRPOTrainer and as an fp8rl reward process, one
function per process, e.g. in a run config (with the helper installed, `pip install ./python`,
and fp8rl started from the repository root):

    rewards:
      - reward_process: "PYTHONPATH=examples/rewards python3 -m fp8rl_reward math_reward:correctness"
        name: correctness
        weight: 1.0
      - reward_process: "PYTHONPATH=examples/rewards python3 -m fp8rl_reward math_reward:boxed_format"
        name: boxed_format
        weight: 0.2

The dataset needs an "answer" column (the gold answer as a number or string). Completions are
strings for text datasets and [{"role": "assistant", "content": ...}] for conversational ones
(as TRL passes them); the functions take either.
"""

import re
from fractions import Fraction

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+(?:\.\d+)?)?")


def _last_boxed(text):
    """The content of the last balanced \\boxed{...}, or None."""
    found = None
    start = text.find("\\boxed{")
    while start != -1:
        depth = 0
        for i in range(start + len("\\boxed"), len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    found = text[start + len("\\boxed{"):i]
                    break
        start = text.find("\\boxed{", start + 1)
    return found


def _value(text):
    """The number a short answer text spells, or None."""
    text = text.strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def _text(completion):
    """The completion's text, from a string or a conversational [{"content": ...}]."""
    return completion if isinstance(completion, str) else completion[0]["content"]


def _final_answer(completion):
    boxed = _last_boxed(completion)
    if boxed is not None:
        return boxed
    numbers = _NUMBER.findall(completion)
    return numbers[-1] if numbers else None


def correctness(prompts, completions, answer, **kwargs):
    """1.0 when the last \\boxed{} (or else the last number) equals the gold answer, else 0.0;
    None when the gold answer is missing."""
    rewards = []
    for completion, gold in zip(completions, answer):
        if gold is None:
            rewards.append(None)
            continue
        final = _final_answer(_text(completion))
        got = _value(final) if final is not None else None
        want = _value(str(gold))
        if got is not None and want is not None:
            rewards.append(1.0 if got == want else 0.0)
        else:
            rewards.append(1.0 if final is not None and final.strip() == str(gold).strip() else 0.0)
    return rewards


def boxed_format(completions, **kwargs):
    """0.5 when the completion puts its answer in \\boxed{}, else 0.0."""
    return [0.5 if _last_boxed(_text(c)) is not None else 0.0 for c in completions]
