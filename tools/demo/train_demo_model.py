#!/usr/bin/env python3
"""Trains the demo model from scratch: a tiny Qwen3 that is mediocre at two-digit addition.

SFT on chat-formatted pairs (prompt "What is 37+45?" -> completion "82<|im_end|>", loss on the
completion tokens only) over every operand pair not in eval.jsonl. Every --eval-every steps the
greedy accuracy on the held-out eval.jsonl prompts is measured; training stops at the first
evaluation above --target (or at --max-steps / --max-seconds) and that model is saved, so it is
neither hopeless nor solved: GRPO has something to improve.

Writes into OUT_DIR: config.json, generation_config.json, model.safetensors (fp32, ~3.3 MB),
tokenizer.json, tokenizer_config.json, special_tokens_map.json, train_log.jsonl (one line per
evaluation) and summary.json (final greedy and sampled accuracies). At the end it reloads OUT_DIR
with transformers (AutoModelForCausalLM / AutoTokenizer) and checks the chat template, the
logits and greedy generation against the trained model.

PyTorch + transformers (+ tokenizers, which transformers needs) only; GPU when available.
Usage: python3 tools/demo/train_demo_model.py --out OUT_DIR [--eval-data examples/demo/eval.jsonl]
"""
import argparse
import json
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_demo_data  # noqa: E402
import make_demo_tokenizer  # noqa: E402

# The model: ~0.83 M parameters. Dimensions are multiples of 16 (FP8 GEMM paths) and head_dim 32.
MODEL = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32, max_position_embeddings=256)


def parse_args():
    repo = os.path.dirname(os.path.dirname(HERE))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="output model directory")
    p.add_argument("--eval-data", default=os.path.join(repo, "examples", "demo", "eval.jsonl"))
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--target", type=float, default=0.30,
                   help="stop at the first evaluation whose greedy accuracy exceeds this")
    p.add_argument("--max-steps", type=int, default=30000)
    p.add_argument("--max-seconds", type=float, default=200.0)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--sample-seed", type=int, default=7)
    return p.parse_args()


def chat_prompt(question):
    """The chat template's output for one user message plus the generation prompt."""
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def read_eval_pairs(path):
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            q = row["messages"][-1]["content"]
            a, b = q[len("What is "):-1].split("+")
            pairs.append((int(a), int(b)))
            assert make_demo_data.question(pairs[-1][0], pairs[-1][1]) == q, q
            assert str(sum(pairs[-1])) == row["answer"], row
    return pairs


class Encoder:
    def __init__(self, tokenizer_json):
        from tokenizers import Tokenizer
        self.tok = Tokenizer.from_file(tokenizer_json)
        self.eos = self.tok.token_to_id(make_demo_tokenizer.EOS_TOKEN)
        self.pad = self.tok.token_to_id(make_demo_tokenizer.PAD_TOKEN)

    def encode(self, text):
        return self.tok.encode(text, add_special_tokens=False).ids

    def prompt_ids(self, pairs):
        rows = [self.encode(chat_prompt(make_demo_data.question(a, b))) for a, b in pairs]
        assert len({len(r) for r in rows}) == 1, "prompts must share one length"
        return torch.tensor(rows, dtype=torch.long)

    def answer(self, ids):
        """Generated ids -> the text before the first end-of-turn, or None without one."""
        if self.eos not in ids:
            return None
        return self.tok.decode(ids[:ids.index(self.eos)], skip_special_tokens=False)


def sft_batch_tensors(enc, pairs):
    """[N, T] input ids and labels (-100 on the prompt and the right padding)."""
    prompts = enc.prompt_ids(pairs)
    completions = [enc.encode(str(a + b) + make_demo_tokenizer.EOS_TOKEN) for a, b in pairs]
    t = prompts.shape[1] + max(len(c) for c in completions)
    ids = torch.full((len(pairs), t), enc.pad, dtype=torch.long)
    labels = torch.full((len(pairs), t), -100, dtype=torch.long)
    ids[:, :prompts.shape[1]] = prompts
    for i, c in enumerate(completions):
        ids[i, prompts.shape[1]:prompts.shape[1] + len(c)] = torch.tensor(c)
        labels[i, prompts.shape[1]:prompts.shape[1] + len(c)] = torch.tensor(c)
    return ids, labels


@torch.no_grad()
def accuracy(model, enc, prompts, pairs, sample, seed=0, max_new=5):
    """Greedy (sample=False) or T=1 sampled accuracy: the text before <|im_end|> == the sum."""
    was_training = model.training
    model.eval()
    gen = torch.Generator(device=prompts.device).manual_seed(seed)
    ids = prompts
    for _ in range(max_new):  # no KV cache: 22 tokens at most, recomputing is cheap
        logits = model(input_ids=ids).logits[:, -1].float()
        if sample:
            nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)
        else:
            nxt = logits.argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], 1)
    model.train(was_training)
    out = ids[:, prompts.shape[1]:].tolist()
    hits = sum(enc.answer(o) == str(a + b) for o, (a, b) in zip(out, pairs))
    return hits / len(pairs)


def make_model(vocab_size, eos, pad):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    config = Qwen3Config(
        vocab_size=vocab_size, **MODEL, rms_norm_eps=1e-6, tie_word_embeddings=True,
        hidden_act="silu", attention_bias=False, attention_dropout=0.0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        use_sliding_window=False, bos_token_id=None, eos_token_id=eos, pad_token_id=pad,
        initializer_range=0.02, use_cache=True)
    return Qwen3ForCausalLM(config)


def main():
    args = parse_args()
    t_start = time.time()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"device {device}, torch {torch.__version__}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    tokenizer, tok_config, special_map = make_demo_tokenizer.build()
    for name, value in (("tokenizer.json", tokenizer), ("tokenizer_config.json", tok_config),
                        ("special_tokens_map.json", special_map)):
        make_demo_tokenizer.write_json(os.path.join(args.out, name), value)
    enc = Encoder(os.path.join(args.out, "tokenizer.json"))

    eval_pairs = read_eval_pairs(args.eval_data)
    held_out = set(eval_pairs)
    train_pairs = [p for p in make_demo_data.all_pairs() if p not in held_out]
    print(f"{len(train_pairs)} SFT pairs, {len(eval_pairs)} held-out eval pairs", flush=True)
    ids, labels = (t.to(device) for t in sft_batch_tensors(enc, train_pairs))
    eval_prompts = enc.prompt_ids(eval_pairs).to(device)

    model = make_model(make_demo_tokenizer.VOCAB_SIZE, enc.eos, enc.pad)
    # Eager attention: a deterministic backward, and the model is tiny.
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")
    else:
        model.config._attn_implementation = "eager"
    model.to(device).train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params} parameters, {MODEL}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / args.warmup_steps))
    batch_gen = torch.Generator(device=device).manual_seed(args.seed)

    log_path = os.path.join(args.out, "train_log.jsonl")
    log = open(log_path, "w", encoding="utf-8")
    best_state, stop_reason, step, loss_ema = None, "max_steps", 0, None
    t_train = time.time()
    while step < args.max_steps:
        idx = torch.randint(0, ids.shape[0], (args.batch_size,), device=device, generator=batch_gen)
        logits = model(input_ids=ids[idx]).logits.float()  # [B, T, V]
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                               labels[idx][:, 1:].reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
        loss_ema = loss.item() if loss_ema is None else 0.9 * loss_ema + 0.1 * loss.item()
        if step % args.eval_every == 0:
            greedy = accuracy(model, enc, eval_prompts, eval_pairs, sample=False)
            sampled = accuracy(model, enc, eval_prompts, eval_pairs, sample=True, seed=step)
            rec = {"step": step, "loss": round(loss_ema, 4), "greedy_accuracy": greedy,
                   "sampled_accuracy": sampled, "seconds": round(time.time() - t_train, 1)}
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print(json.dumps(rec), flush=True)
            if greedy > args.target:
                stop_reason = f"greedy accuracy {greedy:.3f} > target {args.target}"
                break
            if time.time() - t_train > args.max_seconds:
                stop_reason = f"time limit {args.max_seconds}s"
                break
    log.close()
    print(f"stopped at step {step}: {stop_reason}", flush=True)

    # Final numbers: greedy, and sampled (T=1) averaged over 4 seeds, on eval and on train rows.
    train_probe = train_pairs[::8]
    train_prompts = enc.prompt_ids(train_probe).to(device)
    summary = {
        "steps": step, "stop_reason": stop_reason, "parameters": n_params,
        "eval_greedy_accuracy": accuracy(model, enc, eval_prompts, eval_pairs, sample=False),
        "eval_sampled_accuracy": sum(
            accuracy(model, enc, eval_prompts, eval_pairs, True, args.sample_seed + s)
            for s in range(4)) / 4,
        "train_greedy_accuracy": accuracy(model, enc, train_prompts, train_probe, sample=False),
        "train_sampled_accuracy": sum(
            accuracy(model, enc, train_prompts, train_probe, True, args.sample_seed + s)
            for s in range(4)) / 4,
        "train_seconds": round(time.time() - t_train, 1),
    }

    from transformers import GenerationConfig
    model.generation_config = GenerationConfig(
        bos_token_id=None, eos_token_id=[enc.eos, enc.pad], pad_token_id=enc.pad)
    model.to(torch.float32).save_pretrained(args.out, safe_serialization=True)
    summary.update(verify_saved(args.out, model, enc, eval_pairs[:64], device))
    summary["total_seconds"] = round(time.time() - t_start, 1)
    with open(os.path.join(args.out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    print(json.dumps(summary, indent=1), flush=True)
    print("files:", sorted(os.listdir(args.out)), flush=True)


@torch.no_grad()
def verify_saved(out, model, enc, pairs, device):
    """Reload OUT with transformers; compare template, logits and greedy generation."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(out)
    msgs = [{"role": "user", "content": make_demo_data.question(*pairs[0])}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == chat_prompt(msgs[0]["content"]), repr(text)
    assert tok(text, add_special_tokens=False)["input_ids"] == enc.encode(text)
    assert tok.eos_token == make_demo_tokenizer.EOS_TOKEN and tok.pad_token_id == enc.pad
    loaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).to(device).eval()
    model.eval()
    prompts = enc.prompt_ids(pairs).to(device)
    diff = (loaded(input_ids=prompts).logits - model(input_ids=prompts).logits).abs().max().item()
    assert diff < 1e-4, f"reloaded logits differ by {diff}"
    gen = loaded.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False,
                          max_new_tokens=5, eos_token_id=enc.eos, pad_token_id=enc.pad)
    hf_hits = sum(enc.answer(g[prompts.shape[1]:].tolist() + [enc.eos]) == str(a + b)
                  for g, (a, b) in zip(gen, pairs))
    own = accuracy(model, enc, prompts, pairs, sample=False)
    print(f"reload check: max logit diff {diff:.2e}; greedy on {len(pairs)} prompts: "
          f"transformers.generate {hf_hits / len(pairs):.3f}, own loop {own:.3f}", flush=True)
    return {"reload_max_logit_diff": diff, "reload_generate_accuracy_64": hf_hits / len(pairs),
            "own_greedy_accuracy_64": own}


if __name__ == "__main__":
    main()
