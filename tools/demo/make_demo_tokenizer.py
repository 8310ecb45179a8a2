#!/usr/bin/env python3
"""Writes the demo model's tokenizer: tokenizer.json, tokenizer_config.json, special_tokens_map.json.

A byte-level BPE in the Qwen2/Qwen3 layout (the same pre-tokenizer regex, so every digit is its own
token), with a tiny vocabulary: the 256 byte symbols, a few merges for the words of the chat
template and the task prompt, and three ChatML special tokens. 288 tokens in all (a multiple of 16,
which the FP8 GEMM paths want for the tied lm_head's rows).

Standard library only. Usage: python3 tools/demo/make_demo_tokenizer.py OUT_DIR
"""
import json
import os
import sys

# Qwen2/Qwen3's pre-tokenizer split: \p{N} alone keeps numbers one digit per token, so the model
# reads and writes sums digit by digit.
SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Merges, in rank order. The words of the template and the prompt first (one token each), then
# common English pairs to fill the vocabulary to 288. Words are in byte-level symbols (Ġ = space).
MERGE_WORDS = ["user", "assistant", "system", "What", "Ġis"]
FILL_MERGES = [("Ġ", "t"), ("t", "h"), ("Ġt", "h"), ("Ġth", "e"), ("i", "n"), ("e", "r"),
               ("o", "n"), ("r", "e")]

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
VOCAB_SIZE = 288

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}")


def bytes_to_unicode():
    """GPT-2's byte -> printable symbol table (the ByteLevel alphabet)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def word_merges(word):
    """Left-to-right merges that build `word` from its symbols: w o r d -> wo, wor, word."""
    merges = []
    left = word[0]
    for ch in word[1:]:
        merges.append((left, ch))
        left += ch
    return merges


def build():
    byte_symbols = bytes_to_unicode()
    vocab = {byte_symbols[b]: b for b in range(256)}  # id = byte value
    merges = []
    for word in MERGE_WORDS:
        for a, b in word_merges(word):
            if a + b not in vocab:
                merges.append((a, b))
                vocab[a + b] = len(vocab)
    for a, b in FILL_MERGES:
        assert a in vocab and b in vocab and a + b not in vocab, (a, b)
        merges.append((a, b))
        vocab[a + b] = len(vocab)
    added = []
    for content in SPECIAL_TOKENS:
        added.append({"id": len(vocab) + len(added), "content": content, "single_word": False,
                      "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    total = len(vocab) + len(added)
    assert total == VOCAB_SIZE, f"vocabulary has {total} tokens, expected {VOCAB_SIZE}"
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": SPLIT_REGEX}, "behavior": "Isolated",
                 "invert": False},
                byte_level,
            ],
        },
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
            "ignore_merges": False, "vocab": vocab, "merges": [[a, b] for a, b in merges],
        },
    }
    added_decoder = {
        str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                         "single_word", "special")}
        for t in added
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added_decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 256,
        "split_special_tokens": False,
        "chat_template": CHAT_TEMPLATE,
    }
    special_map = {
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
    }
    return tokenizer, config, special_map


def token_id(tokenizer, content):
    for t in tokenizer["added_tokens"]:
        if t["content"] == content:
            return t["id"]
    raise KeyError(content)


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_demo_tokenizer.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    tokenizer, config, special_map = build()
    write_json(os.path.join(out, "tokenizer.json"), tokenizer)
    write_json(os.path.join(out, "tokenizer_config.json"), config)
    write_json(os.path.join(out, "special_tokens_map.json"), special_map)
    print(f"wrote tokenizer.json ({VOCAB_SIZE} tokens), tokenizer_config.json and "
          f"special_tokens_map.json into {out}")


if __name__ == "__main__":
    main()
