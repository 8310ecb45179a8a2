#!/usr/bin/env python3
"""The HF transformers bf16 anchor of `fp8rl bench forward`: the same config with random
weights, a prefill of the same token ids, timed with CUDA events; prints one JSON object.

    python3 tools/bench/hf_forward.py --model tools/bench/configs/qwen3-8b --tokens 8192

Runs where torch + transformers and a GPU are (the H200 machine has torch 2.11 and
transformers 5.17). Only config.json is read from --model: weights are initialized on the GPU
as HF does (normal, std = initializer_range), which is as fast as real ones for timing.
"""
import argparse
import json
import time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="directory with config.json")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--logits", choices=["last", "all"], default="last",
                   help="logits of the last token only (as fp8rl's default) or of all")
    p.add_argument("--attn", default="sdpa", help="attn_implementation (sdpa, eager, ...)")
    args = p.parse_args()

    cfg = AutoConfig.from_pretrained(args.model)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16,
                                                     attn_implementation=args.attn)
        except TypeError:  # transformers 4: torch_dtype
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16,
                                                     attn_implementation=args.attn)
    model.eval()
    torch.cuda.synchronize()
    load_s = time.perf_counter() - t0

    v = cfg.vocab_size
    ids = torch.tensor([[(i * 2654435761 + 12345) % v for i in range(args.tokens)]],
                       device="cuda")  # the ids fp8rl's bench uses
    keep = 1 if args.logits == "last" else 0
    torch.cuda.reset_peak_memory_stats()

    def run():
        out = model(input_ids=ids, use_cache=False, logits_to_keep=keep)
        return out.logits

    times = []
    with torch.inference_mode():
        for _ in range(args.warmup):
            run()
        for _ in range(args.iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            logits = run()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    median = times[len(times) // 2]
    print(json.dumps({
        "command": "hf_forward",
        "model": args.model,
        "weights": "random (HF init on the GPU)",
        "dtype": "bf16",
        "attn_implementation": args.attn,
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokens": args.tokens,
        "logits": args.logits,
        "load_seconds": load_s,
        "forward_seconds_median": median,
        "forward_seconds_all": times,
        "tokens_per_second": args.tokens / median,
        "logits_finite": bool(torch.isfinite(logits).all().item()),
        "peak_memory_bytes": torch.cuda.max_memory_allocated(),
    }, indent=2))


if __name__ == "__main__":
    main()
