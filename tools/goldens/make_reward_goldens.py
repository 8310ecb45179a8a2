#!/usr/bin/env python3
"""Tiny random sequence classifiers with HF transformers and the scores fp8rl must reproduce.

For Qwen3ForSequenceClassification and LlamaForSequenceClassification (num_labels 1, a
pad_token_id): a random model rounded to bf16 and saved with save_pretrained (the checkpoint
fp8rl loads), then the same weights in fp32 score a right-padded batch on the CPU with an
attention mask, as TRL's reward path calls it (ids.json: the padded rows; scores.npy: [B]
logits[:, 0]). Rows include pad tokens inside the text and a row of a single token, so the
pooling rule (the last token that is not the pad, transformers' modeling code) is exercised.

Usage (wherever torch + transformers exist; CPU fp32):
    python3 tools/goldens/make_reward_goldens.py OUT_DIR
then copy OUT_DIR/reward_qwen3 and OUT_DIR/reward_llama to tests/data/goldens/
(tests/rl/test_reward_model.cpp, RewardGolden, skips until they are there).
"""
import argparse
import json
import os

import numpy as np
import torch
from transformers import (LlamaConfig, LlamaForSequenceClassification, Qwen3Config,
                          Qwen3ForSequenceClassification)

COMMON = dict(vocab_size=256, hidden_size=192, intermediate_size=320, num_hidden_layers=2,
              num_attention_heads=6, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
              max_position_embeddings=256, initializer_range=0.08, bos_token_id=1,
              eos_token_id=2, pad_token_id=0, num_labels=1, tie_word_embeddings=False)
PAD = 0


def batch(gen):
    lengths = [24, 9, 1, 17]
    rows = []
    for n in lengths:
        row = torch.randint(3, COMMON["vocab_size"], (n,), generator=gen).tolist()
        rows.append(row)
    rows[0][5] = PAD  # a pad token inside the text is no end
    width = max(lengths)
    ids = [r + [PAD] * (width - len(r)) for r in rows]
    mask = [[1] * len(r) + [0] * (width - len(r)) for r in rows]
    return ids, mask


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    args = ap.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    for name, cfg_cls, model_cls in [("reward_qwen3", Qwen3Config, Qwen3ForSequenceClassification),
                                     ("reward_llama", LlamaConfig, LlamaForSequenceClassification)]:
        cfg = cfg_cls(**COMMON)
        model = model_cls(cfg).eval()
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 1:
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
                else:
                    p.copy_(0.08 * torch.randn(p.shape, generator=gen))
        model = model.to(torch.bfloat16)
        out = os.path.join(args.out, name)
        os.makedirs(out, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        # Read back in fp32 rather than upcast: .to(bfloat16) also rounded the rotary inverse
        # frequencies (a buffer), which would shift every angle past position 0.
        model = model_cls.from_pretrained(out, dtype=torch.float32).eval()
        ids, mask = batch(gen)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits
        np.save(os.path.join(out, "scores.npy"), logits[:, 0].numpy().astype(np.float32))
        with open(os.path.join(out, "ids.json"), "w") as f:
            json.dump(ids, f)
        print(name, logits[:, 0].tolist())


if __name__ == "__main__":
    main()
