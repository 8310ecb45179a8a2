#!/usr/bin/env python3
"""Builds the fuzz targets' seed corpora from the repository's real files.

    fuzz/make_corpus.py OUT_DIR     writes OUT_DIR/<target>/<name> for every target

Each seed is in the target's input format (fuzz/fuzz_*.cpp): safetensors headers with their
data size, config.json files, tokenizer.json + text, tokenizer_config.json (with its
chat_template.jinja folded in) + generation_config.json, messages files, .npy files and dataset
lines. Small hand-written seeds that no repository file provides live in fuzz/corpus/<target>/.
"""
import glob
import hashlib
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_SEED = 64 << 10  # larger inputs slow every execution; the small files cover the formats


def files(*patterns):
    out = set()
    for p in patterns:
        out.update(glob.glob(os.path.join(ROOT, p), recursive=True))
    return sorted(f for f in out if os.path.isfile(f) and "/build" not in os.path.relpath(f, ROOT))


def read(path):
    with open(path, "rb") as f:
        return f.read()


def prefixed(first, rest):
    return struct.pack("<I", len(first)) + first + rest


class Corpus:
    def __init__(self, out):
        self.out = out
        self.counts = {}

    def add(self, target, data):
        if len(data) > MAX_SEED:
            return
        d = os.path.join(self.out, target)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
            f.write(data)
        self.counts[target] = self.counts.get(target, 0) + 1


def safetensors_headers(c):
    for path in files("tests/data/**/*.safetensors", "examples/**/*.safetensors"):
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = f.read(n)
        data_size = os.path.getsize(path) - 8 - n
        c.add("safetensors_header", struct.pack("<Q", data_size) + header)


def configs(c):
    for path in files("tests/data/**/config.json", "examples/**/config.json",
                      "tools/bench/configs/**/config.json"):
        text = read(path)
        c.add("model_config", text)
        q = json.loads(text).get("quantization_config")
        if q is not None:
            c.add("quant_config", json.dumps(q).encode())


def texts():
    out = []
    for line in read(os.path.join(ROOT, "tests/data/tokenizer/corpus.jsonl")).decode().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def tokenizers(c):
    samples = texts()
    for path in files("tests/data/**/tokenizer.json", "examples/**/tokenizer.json"):
        tj = read(path)
        for i, text in enumerate(samples[:24]):
            if isinstance(text, str):
                c.add("tokenizer", prefixed(tj, text.encode()))


def chat_templates(c):
    dirs = sorted(os.path.dirname(p) for p in files("tests/data/chat/templates/*/tokenizer_config.json",
                                                    "examples/**/tokenizer_config.json"))
    generation = [b""] + [read(p) for p in files("tests/data/goldens/*/generation_config.json",
                                                 "examples/**/generation_config.json")][:2]
    for i, d in enumerate(dirs):
        cfg = json.loads(read(os.path.join(d, "tokenizer_config.json")))
        jinja = os.path.join(d, "chat_template.jinja")
        if os.path.exists(jinja):  # the fuzz input is one config: the template goes inside
            cfg["chat_template"] = read(jinja).decode()
        c.add("chat_template", prefixed(json.dumps(cfg).encode(), generation[i % len(generation)]))


def messages(c):
    for conv in json.loads(read(os.path.join(ROOT, "tests/data/chat/conversations.json"))):
        m = conv["messages"]
        c.add("messages", json.dumps(m).encode())
        extra = {k: v for k, v in conv.items() if k in ("tools", "documents")}
        if extra:
            c.add("messages", json.dumps({"messages": m, **extra}).encode())


def npy_bytes(descr, shape, data, major=1):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    d = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    prefix = 10 if major == 1 else 12
    d += " " * ((64 - (prefix + len(d) + 1) % 64) % 64) + "\n"
    head = b"\x93NUMPY" + bytes([major, 0]) + struct.pack("<H" if major == 1 else "<I", len(d))
    return head + d.encode() + data


def npys(c):
    for path in files("tests/data/**/*.npy"):
        c.add("npy", read(path))
    c.add("npy", npy_bytes("<f4", (2, 3), struct.pack("<6f", *range(6))))
    c.add("npy", npy_bytes("<i8", (), struct.pack("<q", 7), major=2))
    c.add("npy", npy_bytes("<f2", (0,), b"", major=3))
    c.add("npy", npy_bytes("<i4", (1, 2, 1, 2), struct.pack("<4i", 1, -2, 3, -4)))


def jsonl_rows(*patterns):
    rows = []
    for path in files(*patterns):
        for line in read(path).decode().splitlines():
            if line.strip():
                rows.append(json.loads(line))
    return rows


def datasets(c):
    sft = jsonl_rows("examples/**/sft.jsonl")[:8]
    prompts = jsonl_rows("examples/**/train.jsonl", "examples/**/eval.jsonl")[:8]
    for r in sft:
        c.add("sft_data", json.dumps(r).encode() + b"\n")
        m = r.get("messages")
        if m and len(m) >= 2:
            # The same conversation in the other TRL formats the reader accepts.
            c.add("sft_data", json.dumps({"prompt": m[:-1], "completion": m[-1:]}).encode())
            c.add("sft_data", json.dumps({"prompt": m[0]["content"],
                                          "completion": " " + m[-1]["content"]}).encode())
            c.add("sft_data", json.dumps({"text": m[0]["content"] + " " + m[-1]["content"]}).encode())
            c.add("preference_data", json.dumps(
                {"prompt": m[:-1], "chosen": m[-1:],
                 "rejected": [{"role": "assistant", "content": "no"}]}).encode())
            c.add("preference_data", json.dumps(
                {"prompt": m[0]["content"], "chosen": " " + m[-1]["content"],
                 "rejected": " 0"}).encode())
            c.add("preference_data", json.dumps(
                {"chosen": m, "rejected": m[:-1] + [{"role": "assistant", "content": "0"}]}).encode())
            c.add("preference_data", json.dumps(
                {"prompt": m[:-1], "completion": m[-1:], "label": True}).encode())
            c.add("preference_data", json.dumps(
                {"prompt": m[0]["content"], "completion": " 0", "label": False}).encode())
    c.add("sft_data", b'{"input_ids": [1, 2, 3, 4], "completion_mask": [0, 0, 1, 1]}\n')
    c.add("sft_data", b"\n".join(json.dumps(r).encode() for r in sft[:3]))
    for r in prompts:
        c.add("prompt_data", json.dumps(r).encode())
        m = r.get("messages")
        if m:
            c.add("prompt_data", json.dumps({"prompt": m, "answer": r.get("answer")}).encode())
            c.add("prompt_data", json.dumps({"prompt": m[0]["content"], "answer": 1}).encode())


def run_configs(c):
    for path in files("examples/**/*.yaml", "tests/data/**/*.yaml"):
        c.add("run_config", read(path))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    c = Corpus(sys.argv[1])
    for f in (safetensors_headers, configs, tokenizers, chat_templates, messages, npys, datasets,
              run_configs):
        f(c)
    for target, n in sorted(c.counts.items()):
        print(f"make_corpus: {target}: {n} seeds")


if __name__ == "__main__":
    main()
