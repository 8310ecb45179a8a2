#!/usr/bin/env python3
"""Greedy-generation and PEFT LoRA goldens for the committed tiny checkpoints.

For each architecture under GOLDENS_DIR (the checkpoints of make_goldens.py, read only):
  (a) greedy generation with HF in fp32, eager attention, on the CPU: PROMPT_LENS prompts, each
      alone (no padding), NEW_TOKENS tokens each with end-of-sequence disabled, so every prompt
      yields exactly NEW_TOKENS tokens. Per step: the token, its log-probability
      (log_softmax of the raw fp32 logits, in float64) and the gap between the two largest
      logits (where a near-tie could flip between two correct implementations).
      -> OUT_DIR/<arch>/generate.json, generate_step_logits.npy [P, NEW_TOKENS, V] f32
  (b) a PEFT LoRA adapter with random A and B (PEFT's default B = 0 would make any test
      vacuous), saved with save_pretrained -> OUT_DIR/<arch>/adapter/{adapter_config.json,
      adapter_model.safetensors}; the unmerged adapter's logits of the base golden's ids.json
      -> adapter_logits.npy [T, V] f32; greedy generation with the adapter for
      ADAPTER_PROMPTS -> generate.json["adapter"], adapter_generate_step_logits.npy.
      qwen3 covers rsLoRA (r=8, alpha=16); llama covers partial targeting (q, v, down).
  (c) OUT_DIR/generate_summary.json: library versions, per-arch counts, and how far the adapter
      moves the logits (max |adapter - base|), so a vacuous adapter is visible.

The LoRA values are rounded to bf16-representable fp32 (stored as F32), so an implementation
that keeps the adapter in bf16 or in fp32 sees the same numbers.

Usage (needs torch, transformers, peft; everything runs on the CPU in fp32):
    python3 tools/goldens/make_generate_goldens.py tests/data/goldens OUT_DIR
    python3 tools/goldens/make_generate_goldens.py --dry-run tests/data/goldens OUT_DIR
    python3 tools/goldens/make_generate_goldens.py --archs qwen3_moe --summary S.json GOLDENS OUT
The dry run needs only numpy: it checks the checkpoints, ids and tensor names, draws the
prompts and writes OUT_DIR/generate_plan.json. tools/goldens/run_generate_goldens.sh wraps the
real run for the GPU machine.
"""
import argparse
import json
import math
import os
import struct
import sys
import zlib

import numpy as np

ARCHS = ("llama", "qwen2", "qwen3", "mistral", "gemma3")
PROMPT_LENS = (1, 5, 13, 29)
NEW_TOKENS = 12
ADAPTER_PROMPTS = (1, 3)  # indices into PROMPT_LENS
FIRST_ID = 3  # 0, 1, 2 are pad, bos, eos in the tiny configs
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# The adapter's B is scaled until max|adapter logits - base logits| is this fraction of the
# base logits' range: large enough that a missing or mis-scaled adapter fails any test, small
# enough that the logits stay in the regime of a trained adapter.
TARGET_DELTA = 0.10
DELTA_BAND = (0.05, 0.20)
# Base logits recomputed here must match the committed logits_fp32.npy to fp32 summation noise.
BASE_MATCH_TOL = 1e-4


def lora_settings(arch):
    """The LoraConfig arguments of each architecture's adapter."""
    s = dict(r=4, lora_alpha=8, target_modules=list(LINEARS), use_rslora=False)
    if arch == "qwen3":
        s.update(r=8, lora_alpha=16, use_rslora=True)
    elif arch == "llama":
        s.update(target_modules=["q_proj", "v_proj", "down_proj"])
    elif arch == "qwen3_moe":  # fp8rl has no LoRA on experts yet: attention only
        s.update(target_modules=list(LINEARS[:4]))
    return s


def moe_layer(cfg, layer):
    """Whether `layer`'s MLP is a mixture of experts, as transformers decides it."""
    experts = cfg.get("num_experts", cfg.get("num_local_experts", 0)) or 0
    step = cfg.get("decoder_sparse_step", 1) or 1
    return (layer not in (cfg.get("mlp_only_layers") or []) and experts > 0
            and (layer + 1) % step == 0)


def lora_scale(s):
    return s["lora_alpha"] / (math.sqrt(s["r"]) if s["use_rslora"] else s["r"])


def arch_seed(arch, salt):
    return zlib.crc32(f"{arch}/{salt}".encode())


def draw_prompts(vocab):
    """PROMPT_LENS prompts of ids in [FIRST_ID, vocab), the same for every run (numpy PCG64)."""
    rng = np.random.default_rng(20240601)
    return [rng.integers(FIRST_ID, vocab, size=n).tolist() for n in PROMPT_LENS]


def step_stats(logits_f32, tokens):
    """logits [S, V] f32 raw, tokens [S] -> (logprob of each token, top-1 minus top-2 logit,
    whether each token is the argmax), all computed in float64."""
    x = np.asarray(logits_f32, dtype=np.float32).astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
    rows = np.arange(x.shape[0])
    tok = np.asarray(tokens, dtype=np.int64)
    logprobs = x[rows, tok] - lse
    top2 = np.sort(x, axis=1)[:, -2:]
    gaps = top2[:, 1] - top2[:, 0]
    is_argmax = x[rows, tok] == m[:, 0]
    return logprobs.tolist(), gaps.tolist(), bool(is_argmax.all())


def safetensors_names(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


def check_arch_dir(d):
    """Validates one committed checkpoint dir without torch; returns (config, ids)."""
    for name in ("config.json", "model.safetensors", "ids.json", "logits_fp32.npy"):
        if not os.path.isfile(os.path.join(d, name)):
            raise SystemExit(f"missing {os.path.join(d, name)}")
    cfg = json.load(open(os.path.join(d, "config.json")))
    ids = json.load(open(os.path.join(d, "ids.json")))
    vocab = cfg["vocab_size"]
    if not ids or not all(isinstance(i, int) and 0 <= i < vocab for i in ids):
        raise SystemExit(f"{d}/ids.json: ids must be ints in [0, {vocab})")
    tensors = safetensors_names(os.path.join(d, "model.safetensors"))
    for layer in range(cfg["num_hidden_layers"]):
        for name in LINEARS:
            part = "self_attn" if name in LINEARS[:4] else "mlp"
            if part == "mlp" and moe_layer(cfg, layer):
                name = "gate"  # the router; the experts are in either layout
            key = f"model.layers.{layer}.{part}.{name}.weight"
            if key not in tensors:
                raise SystemExit(f"{d}/model.safetensors lacks {key}")
    base = np.load(os.path.join(d, "logits_fp32.npy"))
    if base.shape != (len(ids), vocab):
        raise SystemExit(f"{d}/logits_fp32.npy has shape {base.shape}, want {(len(ids), vocab)}")
    if cfg.get("max_position_embeddings", 1 << 30) < max(PROMPT_LENS) + NEW_TOKENS:
        raise SystemExit(f"{d}: prompts + new tokens exceed max_position_embeddings")
    return cfg, ids


def dry_run(goldens, out, archs=ARCHS):
    plan = {"prompt_lens": PROMPT_LENS, "new_tokens": NEW_TOKENS, "archs": {}}
    for arch in archs:
        cfg, ids = check_arch_dir(os.path.join(goldens, arch))
        s = lora_settings(arch)
        plan["archs"][arch] = {"vocab": cfg["vocab_size"], "ids_len": len(ids),
                               "prompts": draw_prompts(cfg["vocab_size"]),
                               "lora": {**s, "scale": lora_scale(s)}}
        print(arch, "ok: vocab", cfg["vocab_size"], "ids", len(ids), "lora", s, flush=True)
    # Exercise step_stats on known logits so the numpy path is checked here too.
    lp, gap, ok = step_stats(np.array([[0.0, math.log(3.0)], [2.0, 1.0]], np.float32), [1, 1])
    assert abs(lp[0] - math.log(0.75)) < 1e-6 and abs(gap[1] - 1.0) < 1e-12 and not ok
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "generate_plan.json"), "w") as f:
        json.dump(plan, f, indent=1)
    print("dry run ok ->", os.path.join(out, "generate_plan.json"))


# ---------------------------------------------------------------------------------------------
# Everything below needs torch + transformers (+ peft for the adapter).


def load_model(path):
    import torch
    from transformers import AutoModelForCausalLM
    kw = dict(attn_implementation="eager")
    try:  # transformers >= 4.56 spells it dtype (v5 defaults to the checkpoint's bf16)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kw)
    except TypeError:
        model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32, **kw)
    if next(model.parameters()).dtype != torch.float32:
        print("WARNING: dtype ignored by from_pretrained, upcasting", flush=True)
        model = model.float()
    model.eval()
    try:  # MoE (transformers 5): the reference loop over the experts hit
        model.config._experts_implementation = "eager"
    except AttributeError:
        pass
    # Greedy decoding with no end-of-sequence: every prompt yields NEW_TOKENS tokens and no
    # logits processor (min_new_tokens would mask eos) changes the argmax.
    model.generation_config.eos_token_id = None
    for cfg in (model.config, getattr(model.config, "text_config", None)):
        if cfg is not None and hasattr(cfg, "eos_token_id"):
            cfg.eos_token_id = None
    return model


def forward_logits(model, ids):
    import torch
    with torch.no_grad():
        t = torch.tensor([ids], dtype=torch.long)
        return model(input_ids=t, use_cache=False).logits[0].float().numpy()


def greedy_manual(model, prompt):
    """Greedy decoding by full forwards (no cache): the fallback when generate() misbehaves."""
    seq, steps = list(prompt), []
    for _ in range(NEW_TOKENS):
        row = forward_logits(model, seq)[-1]
        steps.append(row)
        seq.append(int(np.argmax(row)))
    return seq[len(prompt):], np.stack(steps)


def greedy_generate(model, prompt):
    """-> (tokens [NEW_TOKENS], raw step logits [NEW_TOKENS, V] f32, method)."""
    import torch
    ids = torch.tensor([prompt], dtype=torch.long)
    kw = dict(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
              max_new_tokens=NEW_TOKENS, eos_token_id=None, return_dict_in_generate=True,
              output_logits=True, output_scores=True)
    try:
        with torch.no_grad():
            out = model.generate(**kw)
        tokens = out.sequences[0, len(prompt):].tolist()
        per_step = getattr(out, "logits", None) or out.scores  # scores == logits for greedy
        if per_step is None or len(tokens) != NEW_TOKENS or len(per_step) != NEW_TOKENS:
            raise RuntimeError(f"generate gave {len(tokens)} tokens")
        steps = torch.stack([s[0] for s in per_step]).float().numpy()
        return tokens, steps, "generate"
    except Exception as e:  # keep going: this runs once, on a GPU machine
        print(f"WARNING: generate() failed ({e!r}); using full-forward greedy", flush=True)
        tokens, steps = greedy_manual(model, prompt)
        return tokens, steps, "full_forward"


def generation_record(model, prompt):
    tokens, steps, method = greedy_generate(model, prompt)
    logprobs, gaps, argmax_ok = step_stats(steps, tokens)
    # The same logits from one uncached forward over prompt + generated: the cache path's
    # deviation from it is the fp32 noise a C++ comparison must allow.
    full = forward_logits(model, prompt + tokens[:-1])[len(prompt) - 1:]
    rec = {"prompt_ids": prompt, "generated_ids": tokens, "logprobs": logprobs,
           "top2_gap": gaps, "min_top2_gap": min(gaps), "tokens_are_argmax": argmax_ok,
           "cache_vs_full_max_abs": float(np.abs(full - steps).max()), "method": method}
    if not argmax_ok:
        print("WARNING: a generated token is not the argmax of its raw logits", flush=True)
    return rec, steps


def lora_modules(peft_model):
    """{module name: LoRA layer} of the 'default' adapter, sorted for a deterministic order."""
    mods = {}
    for name, m in peft_model.named_modules():
        a = getattr(m, "lora_A", None)
        if a is not None and hasattr(a, "keys") and "default" in a.keys():
            mods[name] = m
    return dict(sorted(mods.items()))


def set_lora(mods, normals, b_std):
    """A = z / sqrt(K) (unit-variance x A^T), B = b_std * z, both rounded to bf16 values."""
    import torch
    with torch.no_grad():
        for name, m in mods.items():
            za, zb = normals[name]
            a = za / math.sqrt(za.shape[1])
            m.lora_A["default"].weight.copy_(a.to(torch.bfloat16).float())
            m.lora_B["default"].weight.copy_((zb * b_std).to(torch.bfloat16).float())


def make_adapter(model, arch, ids, base_logits, out_dir):
    import torch
    from peft import LoraConfig, get_peft_model
    s = lora_settings(arch)
    config = LoraConfig(r=s["r"], lora_alpha=s["lora_alpha"], target_modules=s["target_modules"],
                        lora_dropout=0.0, init_lora_weights=True, use_rslora=s["use_rslora"],
                        bias="none", task_type="CAUSAL_LM")
    pm = get_peft_model(model, config)
    pm.eval()
    mods = lora_modules(pm)
    if not mods:
        raise RuntimeError("get_peft_model added no LoRA layer")
    gen = torch.Generator().manual_seed(arch_seed(arch, "lora"))
    normals = {}
    for name, m in mods.items():
        wa, wb = m.lora_A["default"].weight, m.lora_B["default"].weight
        normals[name] = (torch.randn(wa.shape, generator=gen), torch.randn(wb.shape, generator=gen))
    scales = sorted({float(m.scaling["default"]) for m in mods.values()})
    # Effect is near-linear in b_std for small values: a few secant steps reach the target.
    base_range = float(base_logits.max() - base_logits.min())
    b_std, ratio = 0.05, None
    for _ in range(6):
        set_lora(mods, normals, b_std)
        delta = float(np.abs(forward_logits(pm, ids) - base_logits).max())
        ratio = delta / base_range
        if abs(ratio - TARGET_DELTA) < 0.02:
            break
        b_std *= TARGET_DELTA / max(ratio, 1e-6)
    if not DELTA_BAND[0] <= ratio <= DELTA_BAND[1]:
        print(f"WARNING: {arch} adapter moves logits by {ratio:.3f} of their range", flush=True)
    adapter_logits = forward_logits(pm, ids)
    with pm.disable_adapter():
        disabled = forward_logits(pm, ids)
    adapter_dir = os.path.join(out_dir, "adapter")
    pm.save_pretrained(adapter_dir, safe_serialization=True, save_embedding_layers=False)
    readme = os.path.join(adapter_dir, "README.md")
    if os.path.exists(readme):  # PEFT's model card: nothing a test reads
        os.remove(readme)
    cfg_path = os.path.join(adapter_dir, "adapter_config.json")
    for f in ("adapter_config.json", "adapter_model.safetensors"):
        if not os.path.isfile(os.path.join(adapter_dir, f)):
            raise RuntimeError(f"save_pretrained did not write {f}")
    ac = json.load(open(cfg_path))
    ac["base_model_name_or_path"] = f"tests/data/goldens/{arch}"  # not the GPU machine's tmp dir
    with open(cfg_path, "w") as f:
        json.dump(ac, f, indent=2, sort_keys=True)
    np.save(os.path.join(out_dir, "adapter_logits.npy"), adapter_logits.astype(np.float32))
    saved = sorted(safetensors_names(os.path.join(adapter_dir, "adapter_model.safetensors")))
    info = {"r": s["r"], "lora_alpha": s["lora_alpha"], "use_rslora": s["use_rslora"],
            "target_modules": s["target_modules"], "scaling": lora_scale(s),
            "peft_scaling": scales, "a_init": "N(0,1)/sqrt(in_features), bf16-rounded",
            "b_std": b_std, "lora_modules": list(mods), "num_lora_modules": len(mods),
            "saved_tensors": len(saved), "logits_file": "adapter_logits.npy",
            "ids_file": "ids.json",
            "max_abs_delta_vs_base": float(np.abs(adapter_logits - base_logits).max()),
            "delta_over_base_range": float(np.abs(adapter_logits - base_logits).max())
            / base_range,
            "disabled_vs_base_max_abs": float(np.abs(disabled - base_logits).max())}
    return pm, info


def run_arch(goldens, out_root, arch, summary):
    import torch
    src = os.path.join(goldens, arch)
    cfg, ids = check_arch_dir(src)
    out = os.path.join(out_root, arch)
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(arch_seed(arch, "torch"))
    model = load_model(src)
    committed = np.load(os.path.join(src, "logits_fp32.npy"))
    base_logits = forward_logits(model, ids)
    base_err = float(np.abs(base_logits - committed).max())
    if base_err > BASE_MATCH_TOL:
        print(f"WARNING: {arch} base logits differ from logits_fp32.npy by {base_err}", flush=True)
    prompts = draw_prompts(cfg["vocab_size"])
    doc = {"arch": arch, "generator": "tools/goldens/make_generate_goldens.py", "dtype": "float32",
           "attn_implementation": "eager", "device": "cpu", "new_tokens": NEW_TOKENS,
           "eos": "disabled (eos_token_id=None): every prompt yields new_tokens tokens",
           "logprob": "log_softmax(raw fp32 logits) in float64 at the generated token",
           "top2_gap": "largest minus second largest raw logit at each step",
           "step_logits_file": "generate_step_logits.npy", "base_vs_committed_max_abs": base_err,
           "prompts": []}
    steps_all = []
    for p in prompts:
        rec, steps = generation_record(model, p)
        doc["prompts"].append(rec)
        steps_all.append(steps)
        print(arch, "prompt", len(p), "->", rec["generated_ids"], "min gap",
              f"{rec['min_top2_gap']:.3g}", rec["method"], flush=True)
    np.save(os.path.join(out, "generate_step_logits.npy"), np.stack(steps_all).astype(np.float32))
    s = {"prompts": len(prompts), "new_tokens": NEW_TOKENS, "base_vs_committed_max_abs": base_err,
         "min_top2_gap": min(r["min_top2_gap"] for r in doc["prompts"]),
         "cache_vs_full_max_abs": max(r["cache_vs_full_max_abs"] for r in doc["prompts"]),
         "methods": sorted({r["method"] for r in doc["prompts"]})}
    try:
        pm, info = make_adapter(model, arch, ids, base_logits, out)
        info["prompts"], steps_ad = [], []
        for i in ADAPTER_PROMPTS:
            rec, steps = generation_record(pm, prompts[i])
            rec["prompt_index"] = i
            rec["differs_from_base"] = rec["generated_ids"] != doc["prompts"][i]["generated_ids"]
            info["prompts"].append(rec)
            steps_ad.append(steps)
            print(arch, "adapter prompt", len(prompts[i]), "->", rec["generated_ids"], flush=True)
        np.save(os.path.join(out, "adapter_generate_step_logits.npy"),
                np.stack(steps_ad).astype(np.float32))
        info["step_logits_file"] = "adapter_generate_step_logits.npy"
        doc["adapter"] = info
        s["adapter"] = {k: info[k] for k in ("r", "lora_alpha", "use_rslora", "scaling",
                                             "num_lora_modules", "saved_tensors", "b_std",
                                             "max_abs_delta_vs_base", "delta_over_base_range",
                                             "disabled_vs_base_max_abs")}
        s["adapter"]["greedy_differs_from_base"] = [r["differs_from_base"]
                                                    for r in info["prompts"]]
        s["adapter"]["adapter_prompts"] = len(info["prompts"])
    except ImportError as e:
        print(f"WARNING: no adapter for {arch}: {e!r}", flush=True)
        s["adapter"] = f"skipped: {e!r}"
    with open(os.path.join(out, "generate.json"), "w") as f:
        json.dump(doc, f, indent=1)
    summary["archs"][arch] = s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("goldens", help="tests/data/goldens (read only)")
    ap.add_argument("out", help="output root: OUT/<arch>/... and OUT/generate_summary.json")
    ap.add_argument("--dry-run", action="store_true", help="validate inputs without torch")
    ap.add_argument("--archs", default=",".join(ARCHS))
    ap.add_argument("--summary", default="generate_summary.json", help="summary file in OUT")
    args = ap.parse_args()
    if os.path.abspath(args.goldens) == os.path.abspath(args.out):
        raise SystemExit("OUT must differ from GOLDENS_DIR: the committed goldens stay untouched")
    if args.dry_run:
        return dry_run(args.goldens, args.out, args.archs.split(","))
    # The GPU machine has no network: never let a library wait on the hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    import transformers
    torch.set_num_threads(1)  # one thread: the fp32 summation order is fixed
    summary = {"torch": torch.__version__, "transformers": transformers.__version__,
               "numpy": np.__version__, "archs": {}}
    try:
        import peft
        summary["peft"] = peft.__version__
    except ImportError:
        summary["peft"] = None
        print("WARNING: peft not importable: adapters skipped", flush=True)
    os.makedirs(args.out, exist_ok=True)
    for arch in args.archs.split(","):
        run_arch(args.goldens, args.out, arch, summary)
    with open(os.path.join(args.out, args.summary), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    sys.exit(main())
