"""python3 -m fp8rl_reward.tools MODULE:FUNCTION [MODULE:FUNCTION ...]

Python functions as tools of a multi-turn GRPO run, served as an fp8rl environment (the
environment protocol of docs/ENVIRONMENTS.md; fp8rl starts this for the run config's
`tools: [...]`). As TRL's GRPOTrainer `tools`:

- reset: every episode opens with its dataset row's prompt; the reply carries the tools' JSON
  schemas (fp8rl_reward.json_schema, transformers' get_json_schema) for the chat template.
- step: each call in the assistant turn's `tool_calls` (fp8rl parses them from the model's text in
  its template family's format) runs with its arguments; each result comes back as a message
  {"role": "tool", "name": NAME, "content": str(result)}, and an exception, an unknown tool or
  arguments that are not an object as str({"error": "..."}), so the model sees its mistake. A
  turn with a call fp8rl could not parse (`tool_call_error`) gets that error the same way. A turn
  without calls ends the episode (done, no reward: the run's `rewards` score the conversation).
  Async functions are awaited.

The reply's "metrics" are TRL's tools/call_frequency and tools/failure_frequency over the step's
episodes. print() in a tool goes to stderr, never into the protocol.
"""

import argparse
import asyncio
import inspect
import io
import json
import os
import sys

from fp8rl_reward.json_schema import SchemaError, get_json_schema
from fp8rl_reward.serve import load_function


class Toolbox:
    """The tools by name, their schemas, and one turn's calls run as TRL runs them."""

    def __init__(self, functions):
        self.functions = {}
        for f in functions:
            name = getattr(f, "__name__", None)
            if name in self.functions:
                raise SystemExit(f"fp8rl_reward.tools: two tools are named {name!r}")
            self.functions[name] = f
        self.schemas = [get_json_schema(f) for f in functions]

    def call(self, call):
        """(message, failed) for one OpenAI-style tool call."""
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or call.get("type", "function") != "function":
            kind = call.get("type") if isinstance(call, dict) else type(call).__name__
            return self._message("unknown", {"error": f"Unsupported tool call type: {kind}"}), True
        name = function.get("name", "unknown")
        arguments = function.get("arguments", {})
        try:
            if isinstance(arguments, str):
                arguments = json.loads(arguments) if arguments.strip() else {}
            if not isinstance(arguments, dict):
                raise ValueError(f"the arguments of {name} must be a JSON object")
            if name not in self.functions:
                raise ValueError(f"Tool {name} not found.")
            result = self.functions[name](**arguments)
            if inspect.isawaitable(result):
                result = asyncio.run(_awaited(result))
        except Exception as e:  # the model's mistake, shown to it
            return self._message(name, {"error": str(e)}), True
        return self._message(name, result), False

    @staticmethod
    def _message(name, result):
        content = result if isinstance(result, list) else str(result)
        return {"role": "tool", "name": name, "content": content}


async def _awaited(result):
    return await result


def answer_step(toolbox, request):
    """The reply to one "step" request."""
    episodes, calls, failures = [], 0, 0
    for episode in request["episodes"]:
        messages = episode.get("messages") or []
        last = messages[-1] if messages else {}
        appended = []
        error = last.get("tool_call_error")
        if error:
            appended.append(Toolbox._message("unknown", {"error": str(error)}))
            calls += 1
            failures += 1
        for call in last.get("tool_calls") or []:
            message, failed = toolbox.call(call)
            appended.append(message)
            calls += 1
            failures += int(failed)
        episodes.append({"id": episode["id"], "messages": appended, "reward": None,
                         "done": not appended})
    count = max(len(episodes), 1)
    return {"episodes": episodes,
            "metrics": {"tools/call_frequency": calls / count,
                        "tools/failure_frequency": failures / max(calls, 1)}}


def answer(toolbox, request):
    kind = request.get("type")
    if kind == "reset":
        return {"episodes": [{"id": e["id"]} for e in request["episodes"]],
                "tools": toolbox.schemas}
    if kind == "step":
        return answer_step(toolbox, request)
    raise SystemExit(f"fp8rl_reward.tools: unknown request type {kind!r}")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python3 -m fp8rl_reward.tools",
        description="Serve Python functions as the tools of an fp8rl multi-turn run (the "
        "environment protocol, JSON lines on stdin/stdout).")
    parser.add_argument("functions", nargs="+", help="MODULE:FUNCTION, one per tool")
    args = parser.parse_args(argv)
    # The protocol on a private copy of fd 1; fd 1 itself becomes stderr (a tool's print()).
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        toolbox = Toolbox([load_function(spec) for spec in args.functions])
    except SchemaError as e:
        raise SystemExit(f"fp8rl_reward.tools: {e}")
    for line in io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8"):
        if not line.strip():
            continue
        protocol.write(json.dumps(answer(toolbox, json.loads(line))) + "\n")
        protocol.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
