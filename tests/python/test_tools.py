"""The tools helper: schemas by transformers' get_json_schema conventions (its documented
examples as the expected values) and the environment replies as TRL's tool loop builds them."""

import asyncio
import json
import os
import subprocess
import sys
import typing
import unittest

from fp8rl_reward.json_schema import SchemaError, get_json_schema
from fp8rl_reward.tools import Toolbox, answer


def multiply(x: float, y: float):
    """
    A function that multiplies two numbers

    Args:
        x: The first number to multiply
        y: The second number to multiply
    """
    return x * y


def drink_beverage(beverage: str):
    """
    A function that drinks a beverage

    Args:
        beverage: The beverage to drink (choices: ["tea", "coffee"])
    """
    return f"drank {beverage}"


def search(query: str, limit: typing.Optional[int] = 3, tags: list[str] | None = None,
           mode: typing.Literal["fast", "exact"] = "exact",
           weights: dict[str, float] = None, pair: tuple[int, str] = (1, "a"),
           key: typing.Union[int, str] = 0) -> list[str]:
    """Searches the index.

    Args:
        query: What to look for,
            over two lines.
        limit: At most this many hits
        tags: Only these tags
        mode: How to match
        weights: Per-field weights
        pair: A pair
        key: A key

    Returns:
        The hits.
    """
    return [query] * (limit or 0)


async def add(a: int, b: int) -> int:
    """Adds two integers.

    Args:
        a: The first
        b: The second
    """
    await asyncio.sleep(0)
    return a + b


def undocumented(a: int):
    return a


def half_documented(a: int, b: int):
    """Does a thing.

    Args:
        a: The first
    """


def unannotated(a):
    """Does a thing.

    Args:
        a: The first
    """


class Schemas(unittest.TestCase):
    def test_transformers_documented_examples(self):
        self.assertEqual(get_json_schema(multiply), {"type": "function", "function": {
            "name": "multiply", "description": "A function that multiplies two numbers",
            "parameters": {"type": "object", "properties": {
                "x": {"type": "number", "description": "The first number to multiply"},
                "y": {"type": "number", "description": "The second number to multiply"}},
                "required": ["x", "y"]}}})
        self.assertEqual(get_json_schema(drink_beverage)["function"]["parameters"]["properties"],
                         {"beverage": {"type": "string", "enum": ["tea", "coffee"],
                                       "description": "The beverage to drink"}})

    def test_types_defaults_and_returns(self):
        f = get_json_schema(search)["function"]
        self.assertEqual(f["description"], "Searches the index.")
        p = f["parameters"]
        self.assertEqual(p["required"], ["query"])
        props = p["properties"]
        self.assertEqual(props["query"], {"type": "string",
                                          "description": "What to look for, over two lines."})
        self.assertEqual(props["limit"], {"type": "integer", "nullable": True,
                                          "description": "At most this many hits"})
        self.assertEqual(props["tags"], {"type": "array", "items": {"type": "string"},
                                         "nullable": True, "description": "Only these tags"})
        self.assertEqual(props["mode"], {"type": "string", "enum": ["fast", "exact"],
                                         "description": "How to match"})
        self.assertEqual(props["weights"], {"type": "object",
                                            "additionalProperties": {"type": "number"},
                                            "description": "Per-field weights"})
        self.assertEqual(props["pair"], {"type": "array", "prefixItems": [
            {"type": "integer"}, {"type": "string"}], "description": "A pair"})
        self.assertEqual(props["key"], {"type": ["integer", "string"], "description": "A key"})
        self.assertEqual(f["return"], {"type": "array", "items": {"type": "string"},
                                       "description": "The hits."})

    def test_what_cannot_be_described_is_named(self):
        for function, words in ((undocumented, "no docstring"),
                                (half_documented, "'b' has no description"),
                                (unannotated, "'a' has no type hint")):
            with self.assertRaises(SchemaError) as e:
                get_json_schema(function)
            self.assertIn(words, str(e.exception))


def call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


class Environment(unittest.TestCase):
    def setUp(self):
        self.box = Toolbox([multiply, add])

    def test_reset_gives_the_schemas(self):
        reply = answer(self.box, {"type": "reset", "episodes": [{"id": "0", "row": {"x": 1}}]})
        self.assertEqual(reply["episodes"], [{"id": "0"}])
        self.assertEqual([t["function"]["name"] for t in reply["tools"]], ["multiply", "add"])

    def test_calls_results_and_errors_as_trl(self):
        turn = {"role": "assistant", "content": "", "tool_calls": [
            call("multiply", {"x": 3, "y": 4}), call("add", '{"a": 2, "b": 5}'),
            call("divide", {}), call("add", {"a": 1})]}
        reply = answer(self.box, {"type": "step", "episodes": [
            {"id": "a", "completion": "...", "messages": [{"role": "user", "content": "q"}, turn]},
            {"id": "b", "completion": "12", "messages": [{"role": "assistant", "content": "12"}]},
            {"id": "c", "completion": "<tool_call>{", "messages": [
                {"role": "assistant", "content": "<tool_call>{",
                 "tool_call_error": "the call is not JSON"}]}]})
        a, b, c = reply["episodes"]
        self.assertEqual(a["messages"][0], {"role": "tool", "name": "multiply", "content": "12"})
        self.assertEqual(a["messages"][1], {"role": "tool", "name": "add", "content": "7"})
        self.assertEqual(a["messages"][2]["content"], str({"error": "Tool divide not found."}))
        self.assertIn("missing 1 required positional argument: 'b'",
                      a["messages"][3]["content"])
        self.assertFalse(a["done"])
        # No call: the episode is over; the run's rewards score it.
        self.assertEqual(b, {"id": "b", "messages": [], "reward": None, "done": True})
        self.assertEqual(c["messages"], [{"role": "tool", "name": "unknown",
                                          "content": str({"error": "the call is not JSON"})}])
        self.assertFalse(c["done"])
        self.assertAlmostEqual(reply["metrics"]["tools/call_frequency"], 5 / 3)
        self.assertAlmostEqual(reply["metrics"]["tools/failure_frequency"], 3 / 5)


class Process(unittest.TestCase):
    def test_protocol_over_pipes_with_prints_kept_out(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(__file__),
                                                          env.get("PYTHONPATH")]))
        lines = [{"type": "reset", "episodes": [{"id": "0", "row": {}}]},
                 {"type": "step", "episodes": [{"id": "0", "completion": "", "messages": [
                     {"role": "assistant", "content": "", "tool_calls": [
                         call("loud", {"text": "hi"})]}]}]}]
        run = subprocess.run([sys.executable, "-m", "fp8rl_reward.tools", "tools_module:loud"],
                             input="".join(json.dumps(l) + "\n" for l in lines), env=env,
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stderr)
        replies = [json.loads(l) for l in run.stdout.splitlines()]
        self.assertEqual(len(replies), 2)
        self.assertEqual(replies[1]["episodes"][0]["messages"][0]["content"], "HI")
        self.assertIn("printed by the tool", run.stderr)

    def test_an_undescribable_tool_is_a_clear_exit(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(__file__),
                                                          env.get("PYTHONPATH")]))
        run = subprocess.run([sys.executable, "-m", "fp8rl_reward.tools", "tools_module:bare"],
                             input="", env=env, capture_output=True, text=True, timeout=60)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("fp8rl_reward.tools: tool bare has no docstring", run.stderr)


if __name__ == "__main__":
    unittest.main()
