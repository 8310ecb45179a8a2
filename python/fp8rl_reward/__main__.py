"""python3 -m fp8rl_reward MODULE:FUNCTION [--chat | --text]: see the package docstring."""

import argparse
import sys

from fp8rl_reward.serve import serve


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python3 -m fp8rl_reward",
        description="Serve fp8rl's reward-process protocol (one JSON line in, one out, per "
        "batch) for one TRL-style reward function f(prompts, completions, **kwargs). As TRL, "
        "a conversational dataset gives prompts as message lists and completions as "
        "[{'role': 'assistant', 'content': text}]; a text dataset gives strings.")
    parser.add_argument("function", help="MODULE:FUNCTION, MODULE imported from the working "
                        "directory, PYTHONPATH or the installed packages")
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument("--chat", action="store_true",
                       help="always pass completions as [{'role': 'assistant', 'content': text}], "
                       "also for text datasets")
    shape.add_argument("--text", action="store_true",
                       help="always pass prompts (the rendered prompt text) and completions as "
                       "strings, also for conversational datasets")
    args = parser.parse_args(argv)
    serve(args.function, fmt="chat" if args.chat else "text" if args.text else "auto")
    return 0


if __name__ == "__main__":
    sys.exit(main())
