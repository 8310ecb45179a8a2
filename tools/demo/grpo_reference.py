#!/usr/bin/env python3
"""A plain-PyTorch GRPO run of the demo, with TRL's semantics, as the reference curve for
`fp8rl grpo --config examples/demo.yaml`.

Same setting as examples/demo.yaml: LoRA (r 16, alpha 32, all linear projections, B = 0 at
start) on the frozen demo model; per step PROMPTS prompts from train.jsonl x G generations at
temperature 1 (max_completion_length tokens, ending at <|im_end|>); reward = answer_match numeric
(the last number of the completion equals `answer`); advantages (r - group mean) / (group std +
1e-4) (scale_rewards group, std unbiased as torch's); beta 0; num_iterations 1, so the ratio is 1
and the loss is TRL's "dapo" aggregation of -A * log p (sum over completion tokens / their count);
AdamW (betas 0.9/0.999, weight decay 0), constant (or linear-decay) learning rate, grad norm
clipped at 1.0.
It also reports the greedy accuracy on eval.jsonl before and after.

PyTorch + transformers + tokenizers. Usage:
  python3 tools/demo/grpo_reference.py --model MODEL_DIR [--steps 60 --lr 1e-3 --prompts 8]
"""
import argparse
import json
import math
import os
import random
import re
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_demo_model as tdm  # noqa: E402


class LoraLinear(torch.nn.Module):
    def __init__(self, base, r, alpha, gen):
        super().__init__()
        self.base = base
        self.scale = alpha / r
        # PEFT's default init: A kaiming-uniform(a=sqrt(5)), B zeros.
        bound = 1.0 / math.sqrt(base.in_features)
        self.A = torch.nn.Parameter(
            (torch.rand(r, base.in_features, generator=gen) * 2 - 1) * bound)
        self.B = torch.nn.Parameter(torch.zeros(base.out_features, r))

    def forward(self, x):
        return self.base(x) + (x @ self.A.t() @ self.B.t()) * self.scale


def add_lora(model, r, alpha, seed):
    gen = torch.Generator().manual_seed(seed)
    params = []
    for layer in model.model.layers:
        for parent, names in ((layer.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
                              (layer.mlp, ("gate_proj", "up_proj", "down_proj"))):
            for n in names:
                lora = LoraLinear(getattr(parent, n), r, alpha, gen)
                setattr(parent, n, lora)
                params += [lora.A, lora.B]
    return params


def last_number(text):
    nums = re.findall(r"-?\d+(?:\.\d+)?", text)
    return float(nums[-1]) if nums else None


def main():
    p = argparse.ArgumentParser()
    repo = os.path.dirname(os.path.dirname(HERE))
    p.add_argument("--model", required=True)
    p.add_argument("--data", default=os.path.join(repo, "examples", "demo", "train.jsonl"))
    p.add_argument("--eval-data", default=os.path.join(repo, "examples", "demo", "eval.jsonl"))
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--max-completion-length", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lr-scheduler-type", choices=("constant", "linear"), default="constant")
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--lora-alpha", type=int, default=32)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--log", default="")
    args = p.parse_args()

    from transformers import AutoModelForCausalLM
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    enc = tdm.Encoder(os.path.join(args.model, "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    for q in model.parameters():
        q.requires_grad_(False)
    params = add_lora(model, args.lora_r, args.lora_alpha, args.seed)
    model.to(device)
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    # transformers' schedules without warmup: linear decays from lr at step 1 to 0 after the last.
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 1.0 if args.lr_scheduler_type == "constant" else 1.0 - s / args.steps)

    rows = [json.loads(line) for line in open(args.data, encoding="utf-8")]
    eval_pairs = tdm.read_eval_pairs(args.eval_data)
    eval_prompts = enc.prompt_ids(eval_pairs).to(device)
    rng = random.Random(args.seed)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    g, L = args.generations, args.max_completion_length
    before = tdm.accuracy(model, enc, eval_prompts, eval_pairs, sample=False)
    print(f"eval greedy accuracy before: {before:.3f}", flush=True)
    log = open(args.log, "w") if args.log else None
    t0 = time.time()
    for step in range(1, args.steps + 1):
        batch = [rows[rng.randrange(len(rows))] for _ in range(args.prompts)]
        pairs = [tuple(int(x) for x in r["messages"][-1]["content"][8:-1].split("+"))
                 for r in batch]
        prompts = enc.prompt_ids(pairs).to(device).repeat_interleave(g, 0)  # [P*G, Tp]
        tp = prompts.shape[1]
        with torch.no_grad():
            model.eval()
            ids = prompts
            for _ in range(L):
                logits = model(input_ids=ids).logits[:, -1].float()
                nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)
                ids = torch.cat([ids, nxt], 1)
        comp = ids[:, tp:]  # [P*G, L]
        is_eos = comp == enc.eos
        # Completion mask: tokens up to and including the first <|im_end|>.
        first = torch.where(is_eos.any(1), is_eos.float().argmax(1),
                            torch.full_like(is_eos[:, 0], L - 1, dtype=torch.long))
        mask = (torch.arange(L, device=device)[None] <= first[:, None]).float()
        rewards = []
        for i, c in enumerate(comp.tolist()):
            text = enc.tok.decode(c[:int(first[i]) + 1], skip_special_tokens=True)
            n = last_number(text)
            rewards.append(1.0 if n is not None and n == float(batch[i // g]["answer"]) else 0.0)
        r = torch.tensor(rewards, device=device).view(-1, g)
        adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1)
        model.train()
        logits = model(input_ids=ids).logits[:, tp - 1:-1].float()  # [P*G, L, V]
        logp = torch.log_softmax(logits, -1).gather(-1, comp[..., None]).squeeze(-1)
        loss = -(adv[:, None] * logp * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        rec = {"step": step, "reward": r.mean().item(), "reward_std": r.std().item(),
               "completions/mean_length": mask.sum(1).mean().item(),
               "seconds": round(time.time() - t0, 1)}
        if step % 10 == 0 or step == args.steps:
            rec["eval_greedy_accuracy"] = tdm.accuracy(model, enc, eval_prompts, eval_pairs, False)
        print(json.dumps(rec), flush=True)
        if log:
            log.write(json.dumps(rec) + "\n")
    after = tdm.accuracy(model, enc, eval_prompts, eval_pairs, sample=False)
    print(f"eval greedy accuracy: before {before:.3f}, after {after:.3f}", flush=True)


if __name__ == "__main__":
    main()
