"""Runs one TRL-style reward function as an fp8rl reward process.

    python3 -m fp8rl_reward MODULE:FUNCTION [--chat | --text]

once installed (``pip install ./python`` from the repository root; in a checkout without it,
PYTHONPATH holding the repository's python/ folder). MODULE is imported from the working
directory, PYTHONPATH or the installed packages. The function is written as for TRL's
GRPOTrainer::

    def reward(prompts, completions, **kwargs) -> list[float | None]: ...

and is called once per batch with keyword arguments only, as TRL calls it:

- ``prompts`` and ``completions``: for a conversational dataset (``messages`` rows, or a
  ``prompt`` that is a message list) the prompts' message lists and
  ``[{"role": "assistant", "content": text}]`` per completion; for a text dataset strings.
  ``--chat`` or ``--text`` fixes one shape whatever the data.
- ``completion_ids`` (a list of token-id lists, EOS included) and every other dataset column
  (one list of values per column, aligned with the completions).
- ``trainer_state``: an object with transformers' TrainerState attributes (``global_step``,
  ``max_steps``, ``epoch``, ...).
- ``log_metric(name, value)``: the batch's mean per name goes to metrics.jsonl;
  ``log_extra(column, values)``: one value per completion, added to samples.jsonl's rows.

A function without ``**kwargs`` gets only the arguments it names. ``async def`` functions are
awaited. A reward of None means "no reward from this function for this sample".

One function per process: list several ``reward_process`` entries in the run config for several
functions (each gets its own weight and its own ``rewards/<name>/mean`` metric); the helper does
not sum functions.

The protocol (docs/REWARDS.md): one JSON object per line on stdin, one line
``{"rewards": [...]}`` per batch on stdout (plus "metrics" and "extra" when the function logged
any). Anything the function prints goes to stderr, so a print() cannot corrupt the protocol. An
exception in the function, or a result that is not one number or None per completion, ends the
process with status 1, its traceback and a line naming the function on stderr; fp8rl then stops
the run with an error naming the process.
"""

from fp8rl_reward.serve import serve  # noqa: F401
