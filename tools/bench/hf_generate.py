#!/usr/bin/env python3
"""The HF transformers bf16 anchor of fp8rl's generation benchmark: P prompts of L random ids,
n samples each (num_return_sequences), G new tokens per sample with end-of-sequence ignored
(min_new_tokens = max_new_tokens), timed around model.generate; prints one JSON line.

    python3 tools/bench/hf_generate.py --preset qwen3-8b --prompts 64 --n 8 \
        --prompt-tokens 256 --max-tokens 512 --attn sdpa
    python3 tools/bench/hf_generate.py --model tools/bench/configs/qwen3-8b ...   # a config dir
    python3 tools/bench/hf_generate.py ... --lora-r 32   # with a PEFT adapter, unmerged

Runs where torch + transformers and a GPU are (the H200 machine: torch 2.11, transformers
5.17). The presets repeat src/model/presets.cpp's numbers; weights are random (HF init on the
GPU, std = initializer_range), which costs the same time as real ones. Sampling is plain
(temperature 1, top-k and top-p off) unless --greedy. One short generate of the same batch
shape warms up (kernels, allocator) before the timed runs; with --repeats R the median is
reported. --lora-r R wraps the model in a PEFT LoRA adapter of rank R (alpha 2R, bf16) on all
seven projections, B drawn as A is (kaiming uniform) so that its term is not zero: the anchor of
`fp8rl bench generate --lora-r R`.
"""
import argparse
import json
import math
import time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

# name: (model_type, vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, max_pos,
#        tied, rope_theta, extra config) -- as src/model/presets.cpp
PRESETS = {
    "qwen3-0.6b": ("qwen3", 151936, 1024, 3072, 28, 16, 8, 128, 40960, True, 1e6, {}),
    "qwen3-1.7b": ("qwen3", 151936, 2048, 6144, 28, 16, 8, 128, 40960, True, 1e6, {}),
    "qwen3-8b": ("qwen3", 151936, 4096, 12288, 36, 32, 8, 128, 40960, False, 1e6, {}),
    "llama-3.1-8b": ("llama", 128256, 4096, 14336, 32, 32, 8, 128, 131072, False, 500000.0,
                     {"rms_norm_eps": 1e-5, "mlp_bias": False,
                      "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 8192}}),
    "mistral-7b": ("mistral", 32768, 4096, 14336, 32, 32, 8, 128, 32768, False, 1e6,
                   {"rms_norm_eps": 1e-5, "sliding_window": None}),
}


def preset_config(name):
    (mtype, vocab, hidden, inter, layers, heads, kv, hd, max_pos, tied, theta,
     extra) = PRESETS[name]
    kw = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
              num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
              head_dim=hd, max_position_embeddings=max_pos, rms_norm_eps=1e-6,
              rope_theta=theta, tie_word_embeddings=tied, initializer_range=0.02,
              bos_token_id=1, eos_token_id=2, hidden_act="silu", attention_bias=False,
              attention_dropout=0.0, use_cache=True)
    if mtype == "qwen3":
        kw.update(use_sliding_window=False, sliding_window=None, max_window_layers=layers)
    kw.update(extra)
    return AutoConfig.for_model(mtype, **kw)


def build_model(cfg, attn):
    torch.manual_seed(0)
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16,
                                                     attn_implementation=attn)
        except TypeError:  # transformers 4: torch_dtype
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16,
                                                     attn_implementation=attn)
    return model.to(torch.bfloat16).eval()


def add_lora(model, r):
    """A PEFT adapter of rank r (alpha 2r) on the seven projections, unmerged, B nonzero."""
    import peft
    cfg = peft.LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0, task_type="CAUSAL_LM",
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                          "up_proj", "down_proj"])
    model = peft.get_peft_model(model, cfg, autocast_adapter_dtype=False)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.kaiming_uniform_(p, a=math.sqrt(5))
    return model.eval()


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--preset", choices=sorted(PRESETS))
    src.add_argument("--model", help="directory with config.json (only the config is read)")
    p.add_argument("--prompts", type=int, default=8, help="P distinct prompts")
    p.add_argument("--n", type=int, default=1, help="samples per prompt")
    p.add_argument("--prompt-tokens", type=int, default=128, help="L, ids per prompt")
    p.add_argument("--max-tokens", type=int, default=256, help="G, new tokens per sample")
    p.add_argument("--attn", default="sdpa", help="attn_implementation (sdpa, eager, ...)")
    p.add_argument("--greedy", action="store_true", help="greedy instead of sampling")
    p.add_argument("--cache-implementation", default=None,
                   help="generate()'s cache_implementation (default: HF's dynamic cache)")
    p.add_argument("--repeats", type=int, default=1, help="timed runs; the median is reported")
    p.add_argument("--warmup-tokens", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lora-r", type=int, default=0, help="PEFT LoRA rank (0: no adapter)")
    args = p.parse_args()

    cfg = AutoConfig.from_pretrained(args.model) if args.model else preset_config(args.preset)
    t0 = time.perf_counter()
    model = build_model(cfg, args.attn)
    if args.lora_r > 0:
        model = add_lora(model, args.lora_r)
    torch.cuda.synchronize()
    load_s = time.perf_counter() - t0

    gen = torch.Generator().manual_seed(args.seed)
    # ids in [3, vocab): no pad / bos / eos in the prompts
    ids = torch.randint(3, cfg.vocab_size, (args.prompts, args.prompt_tokens), generator=gen)
    ids = ids.to("cuda")
    sampling = (dict(do_sample=False) if args.greedy else
                dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0))
    common = dict(input_ids=ids, attention_mask=torch.ones_like(ids),
                  num_return_sequences=args.n, pad_token_id=0, eos_token_id=cfg.eos_token_id,
                  **sampling)
    if args.cache_implementation:
        common["cache_implementation"] = args.cache_implementation

    def generate(tokens):
        with torch.inference_mode():
            return model.generate(**common, max_new_tokens=tokens, min_new_tokens=tokens)

    generate(args.warmup_tokens)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times, out = [], None
    for r in range(args.repeats):
        torch.manual_seed(args.seed + r)
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = generate(args.max_tokens)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    times.sort()
    wall = times[len(times) // 2]
    new = out[:, args.prompt_tokens:]
    rows = args.prompts * args.n
    if tuple(new.shape) != (rows, args.max_tokens):
        raise SystemExit(f"generate returned {tuple(new.shape)}, want {(rows, args.max_tokens)}")
    output_tokens = rows * args.max_tokens
    print(json.dumps({
        "anchor": "hf_generate",
        "output_tokens_per_s": output_tokens / wall,
        "wall_s": wall,
        "wall_s_all": times,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(),
        "output_tokens": output_tokens,
        "preset": args.preset,
        "model": args.model,
        "prompts": args.prompts,
        "n": args.n,
        "prompt_tokens": args.prompt_tokens,
        "max_tokens": args.max_tokens,
        "rows": rows,
        "lora_r": args.lora_r,
        "sampling": "greedy" if args.greedy else "temperature=1, top_k=0, top_p=1",
        "attn_implementation": args.attn,
        "cache_implementation": args.cache_implementation or "default",
        "weights": "random (HF init on the GPU)",
        "dtype": "bf16",
        "load_s": load_s,
        "distinct_first_tokens": int(new[:, 0].unique().numel()),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }))


if __name__ == "__main__":
    main()
