"""The reward-process protocol loop (see the package docstring)."""

import asyncio
import importlib
import inspect
import io
import json
import math
import numbers
import os
import sys


def load_function(spec):
    """Imports MODULE:FUNCTION (FUNCTION may be a dotted attribute path)."""
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise SystemExit(f"fp8rl_reward: expected MODULE:FUNCTION, got {spec!r}")
    obj = importlib.import_module(module_name)
    for attr in attr_path.split("."):
        obj = getattr(obj, attr)
    if not callable(obj):
        raise SystemExit(f"fp8rl_reward: {spec} is not callable")
    return obj


def _no_op(*args, **kwargs):
    return None


def call_reward(function, prompts, completions, kwargs):
    """Calls a TRL-style reward function with keyword arguments, awaiting it if it is async."""
    kwargs = dict(kwargs)
    kwargs.setdefault("log_metric", _no_op)
    kwargs.setdefault("log_extra", _no_op)
    kwargs["prompts"] = prompts
    kwargs["completions"] = completions
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        parameters = None
    if parameters is not None and not any(p.kind == p.VAR_KEYWORD for p in parameters):
        names = {p.name for p in parameters}
        kwargs = {k: v for k, v in kwargs.items() if k in names}
    result = function(**kwargs)
    if inspect.isawaitable(result):

        async def wait():
            return await result

        result = asyncio.run(wait())
    return result


def encode_rewards(values, count, name):
    """The rewards as the protocol writes them: numbers, None, or "NaN"/"Infinity"/"-Infinity"."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"{name} returned {type(values).__name__}; expected a list of {count} rewards")
    if len(values) != count:
        raise ValueError(f"{name} returned {len(values)} rewards for {count} completions")
    out = []
    for i, v in enumerate(values):
        if v is None:
            out.append(None)
        elif isinstance(v, numbers.Real):
            x = float(v)
            if math.isnan(x):
                out.append("NaN")
            elif math.isinf(x):
                out.append("Infinity" if x > 0 else "-Infinity")
            else:
                out.append(x)
        else:
            raise TypeError(f"{name} returned {v!r} ({type(v).__name__}) for completion {i}; "
                            "expected a number or None")
    return out


def serve(spec, chat=False, stdin=None):
    """Answers batches on stdin until it closes."""
    # The protocol goes to a private copy of fd 1; fd 1 itself becomes stderr, so print() in the
    # reward function (or output of a C extension) cannot corrupt the protocol stream.
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    function = load_function(spec)
    name = getattr(function, "__name__", spec)
    # UTF-8 whatever the locale: fp8rl writes UTF-8.
    source = stdin if stdin is not None else io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8")
    for line in source:
        if not line.strip():
            continue
        batch = json.loads(line)
        prompts = batch.pop("prompts")
        completions = batch.pop("completions")
        count = len(completions)
        if chat:
            # TRL's conversational format: completions as one assistant message each, prompts as
            # the "messages" column when the dataset has one.
            completions = [[{"role": "assistant", "content": c}] for c in completions]
            if "messages" in batch:
                prompts = batch.pop("messages")
        rewards = call_reward(function, prompts, completions, batch)
        protocol.write(json.dumps({"rewards": encode_rewards(rewards, count, name)}) + "\n")
        protocol.flush()
