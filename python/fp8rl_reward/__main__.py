"""python3 -m fp8rl_reward MODULE:FUNCTION [--chat]: see the package docstring."""

import argparse
import sys

from fp8rl_reward.serve import serve


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python3 -m fp8rl_reward",
        description="Serve fp8rl's reward-process protocol (one JSON line in, one out, per "
        "batch) for one TRL-style reward function f(prompts, completions, **kwargs).")
    parser.add_argument("function", help="MODULE:FUNCTION, imported from PYTHONPATH")
    parser.add_argument("--chat", action="store_true",
                        help="pass completions as [{'role': 'assistant', 'content': text}] and "
                        "the 'messages' column (if any) as prompts, as TRL does for "
                        "conversational datasets")
    args = parser.parse_args(argv)
    serve(args.function, chat=args.chat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
