#!/usr/bin/env python3
"""The HF transformers + PEFT anchor of `fp8rl bench train`: a bf16 model of a preset config
(random weights) with a LoRA adapter of rank R (alpha 2R) on all seven projections, gradient
checkpointing on, B random sequences of T tokens, the causal-LM loss, AdamW; W warm-up steps,
then N timed steps (torch.cuda.synchronize around each). Prints one JSON line: tokens/s, the
forward / backward / optimizer split, peak memory (torch.cuda.max_memory_allocated).

    python3 tools/bench/hf_train.py --preset qwen3-8b --batch 8 --seq 1024 --lora-r 32
"""
import argparse
import json
import time

import torch

from hf_generate import PRESETS, build_model, preset_config  # noqa: F401 (same presets)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="qwen3-8b", choices=sorted(PRESETS))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--lora-r", type=int, default=32)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--no-checkpointing", action="store_true")
    p.add_argument("--attn", default="sdpa")
    args = p.parse_args()

    import peft
    cfg = preset_config(args.preset)
    model = build_model(cfg, args.attn)
    model.config.use_cache = False
    lora = peft.LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0,
                           target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                           "up_proj", "down_proj"], task_type="CAUSAL_LM")
    model = peft.get_peft_model(model, lora)
    if not args.no_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model.train()
    opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-4)
    g = torch.Generator(device="cuda").manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device="cuda", generator=g)
    torch.cuda.reset_peak_memory_stats()
    fwd = bwd = step = 0.0
    for i in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        loss.backward()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        if i >= args.warmup:
            fwd += t1 - t0
            bwd += t2 - t1
            step += t3 - t2
    n = args.steps
    total = (fwd + bwd + step) / n
    print(json.dumps({
        "command": "hf_train", "preset": args.preset, "batch": args.batch, "seq": args.seq,
        "lora_r": args.lora_r, "checkpointing": not args.no_checkpointing,
        "torch": torch.__version__, "peft": peft.__version__,
        "tokens_per_second": args.batch * args.seq / total, "step_seconds": total,
        "split_seconds": {"forward": fwd / n, "backward": bwd / n, "optimizer": step / n},
        "peak_memory_bytes": torch.cuda.max_memory_allocated(), "loss_last_step": loss.item()}))


if __name__ == "__main__":
    main()
