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
import traceback


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


class TrainerState:
    """transformers' TrainerState as a reward function sees it: attributes, with transformers'
    defaults for what fp8rl does not track, overridden by what the batch carries (global_step,
    max_steps, epoch, num_train_epochs, logging_steps, save_steps, train_batch_size)."""

    def __init__(self, fields=None):
        self.epoch = None
        self.global_step = 0
        self.max_steps = 0
        self.logging_steps = 500
        self.eval_steps = 500
        self.save_steps = 500
        self.train_batch_size = None
        self.num_train_epochs = 0
        self.num_input_tokens_seen = 0
        self.total_flos = 0
        self.log_history = []
        self.best_metric = None
        self.best_global_step = None
        self.best_model_checkpoint = None
        self.is_local_process_zero = True
        self.is_world_process_zero = True
        self.is_hyper_param_search = False
        self.trial_name = None
        self.trial_params = None
        self.stateful_callbacks = None
        for key, value in (fields or {}).items():
            setattr(self, key, value)

    def __repr__(self):
        return f"TrainerState({vars(self)!r})"


class BatchLogs:
    """TRL's log_metric and log_extra for one batch: what a function logs reaches fp8rl in the
    answer line ("metrics", "extra")."""

    def __init__(self, name):
        self.name = name
        self.metrics = {}
        self.extra = {}

    def log_metric(self, name, value):
        if not isinstance(name, str) or not name:
            raise TypeError(f"{self.name}: log_metric needs a non-empty string name, got {name!r}")
        # Anything float() takes (numpy and torch scalars too), but not text or booleans.
        number = None
        if not isinstance(value, (bool, str, bytes)):
            try:
                number = float(value)
            except (TypeError, ValueError):
                pass
        if number is None:
            raise TypeError(f"{self.name}: log_metric({name!r}, {value!r}): the value must be a number")
        self.metrics.setdefault(name, []).append(_number(number))

    def log_extra(self, column, values):
        if not isinstance(column, str) or not column:
            raise TypeError(f"{self.name}: log_extra needs a non-empty string column, got {column!r}")
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise TypeError(f"{self.name}: log_extra({column!r}, ...): the values must be a list, "
                            f"got {type(values).__name__}")
        # As TRL, several calls for one column extend it.
        self.extra.setdefault(column, []).extend(_plain(v) for v in values)


def _number(x):
    """A float as the protocol writes it: non-finite values as "NaN"/"Infinity"/"-Infinity"."""
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def _plain(v):
    """A value JSON can carry: containers recursively, non-finite floats as strings, numpy values
    as Python ones, anything else as its str()."""
    if v is None or isinstance(v, (bool, str, int)):
        return v
    if isinstance(v, float):
        return _number(v)
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "tolist"):
        return _plain(v.tolist())
    if isinstance(v, numbers.Real):
        return _number(v)
    return str(v)


def call_reward(function, prompts, completions, kwargs):
    """Calls a TRL-style reward function with keyword arguments, awaiting it if it is async."""
    kwargs = dict(kwargs)
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
        elif isinstance(v, numbers.Real) and not isinstance(v, bool):
            out.append(_number(v))
        else:
            raise TypeError(f"{name} returned {v!r} ({type(v).__name__}) for completion {i}; "
                            "expected a number or None")
    return out


def reward_arguments(batch, fmt="auto"):
    """The prompts, completions and other keyword arguments TRL would pass for one request line.

    fmt "auto" follows the data, as TRL's is_conversational: a batch with "prompt_messages" (a
    conversational dataset) gets prompts as message lists and completions as
    [{"role": "assistant", "content": text}]; otherwise both are strings. "chat" always wraps the
    completions (prompts are the message lists when the batch has them, else the "messages"
    column when there is one); "text" always passes strings (the rendered prompt text).
    """
    batch = dict(batch)
    prompts = batch.pop("prompts")
    completions = batch.pop("completions")
    messages = batch.pop("prompt_messages", None)
    episodes = batch.pop("completion_messages", None)  # multi-turn: TRL's message completions
    batch["trainer_state"] = TrainerState(batch.get("trainer_state"))
    chat = fmt == "chat" or (fmt == "auto" and messages is not None)
    if chat:
        if episodes is not None:
            completions = episodes
        else:
            completions = [[{"role": "assistant", "content": c}] for c in completions]
        if messages is not None:
            prompts = messages
        elif fmt == "chat" and "messages" in batch:
            prompts = batch.pop("messages")
    return prompts, completions, batch


def serve(spec, chat=False, stdin=None, fmt=None):
    """Answers batches on stdin until it closes. fmt: "auto", "chat" or "text" (see
    reward_arguments); chat=True is fmt="chat"."""
    fmt = fmt or ("chat" if chat else "auto")
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
        count = len(batch["completions"])
        prompts, completions, kwargs = reward_arguments(batch, fmt)
        logs = BatchLogs(name)
        # TRL sets these after the columns: a column of the same name is shadowed.
        kwargs["log_metric"] = logs.log_metric
        kwargs["log_extra"] = logs.log_extra
        try:
            rewards = encode_rewards(call_reward(function, prompts, completions, kwargs), count, name)
        except Exception as e:
            # The traceback, then a last line naming the function: fp8rl reports the exit.
            traceback.print_exc(file=sys.stderr)
            sys.stderr.write(f"fp8rl_reward: reward function {spec} failed: {type(e).__name__}: {e}\n")
            sys.stderr.flush()
            raise SystemExit(1)
        answer = {"rewards": rewards}
        if logs.metrics:
            answer["metrics"] = logs.metrics
        if logs.extra:
            # TRL's table keeps the last batch's worth of a column logged more than once.
            answer["extra"] = {k: v[-count:] if 0 < count < len(v) else v
                               for k, v in logs.extra.items()}
        protocol.write(json.dumps(answer, allow_nan=False) + "\n")
        protocol.flush()
