#!/usr/bin/env python3
"""Writes a random-weight model with the demo model's exact layout, for testing without PyTorch.

Same config.json as tools/demo/train_demo_model.py saves (a 4-layer Qwen3, hidden 128, vocab 288,
tied embeddings, fp32), generation_config.json, the demo tokenizer files, and model.safetensors
written by hand: weights ~ N(0, 0.02), norms 1. Lets `fp8rl generate` / `fp8rl chat` run end to
end on a machine without torch; its answers are noise. Keep it out of the repository.

Standard library only. Usage: python3 tools/demo/make_random_demo_model.py OUT_DIR [--seed N]
"""
import argparse
import array
import json
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_demo_tokenizer  # noqa: E402

HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 128, 384, 4, 4, 2, 32


def config():
    """config.json as transformers 5 saves the trained demo model (train_demo_model.py)."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": None,
        "dtype": "float32",
        "eos_token_id": 287,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTERMEDIATE,
        "layer_types": ["full_attention"] * LAYERS,
        "max_position_embeddings": 256,
        "max_window_layers": 28,
        "model_type": "qwen3",
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "pad_token_id": 285,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "sliding_window": None,
        "tie_word_embeddings": True,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": make_demo_tokenizer.VOCAB_SIZE,
    }


def tensor_shapes():
    """name -> shape of every tensor of the checkpoint (tied: no lm_head.weight)."""
    h, q, kv = HIDDEN, HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    shapes = {"model.embed_tokens.weight": [make_demo_tokenizer.VOCAB_SIZE, h],
              "model.norm.weight": [h]}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": [h],
            p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_norm.weight": [HEAD_DIM],
            p + "self_attn.k_norm.weight": [HEAD_DIM],
            p + "self_attn.q_proj.weight": [q, h],
            p + "self_attn.k_proj.weight": [kv, h],
            p + "self_attn.v_proj.weight": [kv, h],
            p + "self_attn.o_proj.weight": [h, q],
            p + "mlp.gate_proj.weight": [INTERMEDIATE, h],
            p + "mlp.up_proj.weight": [INTERMEDIATE, h],
            p + "mlp.down_proj.weight": [h, INTERMEDIATE],
        })
    return shapes


def write_safetensors(path, tensors):
    """tensors: name -> (shape, array('f')). F32, little-endian, names sorted as HF writes them."""
    header, offset = {}, 0
    for name in sorted(tensors):
        shape, data = tensors[name]
        n = len(data) * 4
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt"}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name in sorted(tensors):
            data = tensors[name][1]
            if sys.byteorder != "little":
                data = array.array("f", data)
                data.byteswap()
            f.write(data.tobytes())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = random.Random(args.seed)
    tensors = {}
    for name, shape in tensor_shapes().items():
        n = 1
        for d in shape:
            n *= d
        if name.endswith("norm.weight"):
            data = array.array("f", [1.0] * n)
        else:
            data = array.array("f", (rng.gauss(0.0, 0.02) for _ in range(n)))
        tensors[name] = (shape, data)
    os.makedirs(args.out, exist_ok=True)
    write_safetensors(os.path.join(args.out, "model.safetensors"), tensors)
    tokenizer, tok_config, special_map = make_demo_tokenizer.build()
    eos = make_demo_tokenizer.token_id(tokenizer, make_demo_tokenizer.EOS_TOKEN)
    pad = make_demo_tokenizer.token_id(tokenizer, make_demo_tokenizer.PAD_TOKEN)
    cfg = config()
    assert (cfg["eos_token_id"], cfg["pad_token_id"]) == (eos, pad)
    gen = {"eos_token_id": [eos, pad], "pad_token_id": pad}
    for name, value in (("config.json", cfg), ("generation_config.json", gen),
                        ("tokenizer.json", tokenizer), ("tokenizer_config.json", tok_config),
                        ("special_tokens_map.json", special_map)):
        make_demo_tokenizer.write_json(os.path.join(args.out, name), value)
    n = sum(len(d) for _, d in tensors.values())
    print(f"wrote a random demo model ({n} parameters) into {args.out}")


if __name__ == "__main__":
    main()
