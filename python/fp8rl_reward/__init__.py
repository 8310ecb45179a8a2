"""Runs one TRL-style reward function as an fp8rl reward process.

    python3 -m fp8rl_reward MODULE:FUNCTION [--chat]

with PYTHONPATH holding this repository's python/ folder and the folder of MODULE. The function
is written as for TRL's GRPOTrainer::

    def reward(prompts, completions, **kwargs) -> list[float | None]: ...

and is called once per batch with keyword arguments only: ``prompts`` and ``completions``
(lists of strings), ``completion_ids`` (a list of token-id lists) and every other dataset
column (one list of values per column, aligned with the completions), plus no-op
``log_metric`` and ``log_extra`` callables (fp8rl does not collect them). A function without
``**kwargs`` gets only the arguments it names. ``async def`` functions are awaited.

One function per process: list several ``reward_process`` entries in the run config for several
functions (each gets its own weight and its own ``rewards/<name>/mean`` metric); the helper does
not sum functions.

The protocol (docs/REWARDS.md): one JSON object per line on stdin, one line
``{"rewards": [...]}`` per batch on stdout. Anything the function prints goes to stderr, so a
print() cannot corrupt the protocol. An exception in the function ends the process with status
1 and its traceback on stderr; fp8rl then stops the run with an error naming the process.
"""

from fp8rl_reward.serve import serve  # noqa: F401
