#!/usr/bin/env python3
"""Trainer goldens: loss, LoRA gradients and one optimizer step of HF + PEFT.

For each architecture under GOLDENS_DIR (the committed checkpoints of make_goldens.py and their
PEFT adapters in <arch>/adapter/ from make_generate_goldens.py, read only), on the CPU in fp32
with eager attention:
  * the batch: ids.json (32 tokens) split into 2 sequences of 16, no padding; labels = the
    input ids with -100 on the first LABEL_MASK positions of sequence 0, passed to the model as
    `labels`, so HF shifts them itself (position t predicts token t + 1) and takes the mean
    cross-entropy over the tokens whose shifted label is not -100 (2 * 15 - 2 = 28 here);
  * loss, and every lora_A / lora_B gradient -> <arch>/train/grads.safetensors, named as the
    adapter's tensors in adapter_model.safetensors plus ".grad"
    ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight.grad");
  * from the same start and with the same gradients: one torch.optim.SGD(lr=SGD_LR) step ->
    sgd_adapter.safetensors and one torch.optim.AdamW(lr, betas, eps, weight_decay of ADAMW)
    step -> adamw_adapter.safetensors, both with the adapter's tensor names;
  * the FP8-row variant: every decoder linear's base forward replaced by make_goldens.py's
    emulation of the recipe (row weight scales, per-token activation scales), with a
    straight-through backward: dX = dY W_deq (the activation quantizer passes the gradient
    unchanged, the frozen weight gets none); the LoRA branch sees the unquantized input.
    Its batch (2 x FP8_SEQ_LEN tokens) is drawn until no quantized activation lies within the
    margins of make_goldens.py of an e4m3 rounding boundary (see record_margin there).
    -> fp8_row_grads.safetensors (LoRA gradients only) and its loss;
  * <arch>/train/train.json: the batch (input_ids, labels) of both variants, losses, token
    counts, optimizer settings, library versions; OUT_DIR/train_summary.json.

Usage (needs torch, transformers, peft, safetensors; everything on the CPU in fp32):
    python3 tools/goldens/make_train_goldens.py tests/data/goldens OUT_DIR
    python3 tools/goldens/make_train_goldens.py --dry-run tests/data/goldens OUT_DIR
The dry run needs only the standard library: it checks the checkpoints, adapters and ids, builds the batches
and labels, estimates the output size and writes OUT_DIR/train_plan.json.
tools/goldens/run_train_goldens.sh wraps the real run for the GPU machine.
"""
import argparse
import json
import math
import os
import struct
import sys

ARCHS = ("llama", "qwen2", "qwen3", "mistral", "gemma3")
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
NUM_SEQS = 2
LABEL_MASK = 3  # labels[0, :3] = -100
IGNORE = -100
FIRST_ID = 3  # 0, 1, 2 are pad, bos, eos in the tiny configs
SGD = dict(lr=0.1)
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
FP8_SEQ_LEN = 12
FP8_MAX_TRIES = 500
MAX_TOTAL_BYTES = 3 * 1024 * 1024
OUTPUT_FILES = ("grads.safetensors", "sgd_adapter.safetensors", "adamw_adapter.safetensors",
                "fp8_row_grads.safetensors")


def safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


def make_batch(ids, num_seqs):
    """ids (a flat list) -> (input_ids [num_seqs, L], labels [num_seqs, L]) as lists."""
    if len(ids) % num_seqs:
        raise SystemExit(f"{len(ids)} ids do not split into {num_seqs} sequences")
    n = len(ids) // num_seqs
    if n <= LABEL_MASK + 1:
        raise SystemExit(f"sequences of {n} tokens are too short for the label mask")
    input_ids = [list(ids[i * n:(i + 1) * n]) for i in range(num_seqs)]
    labels = [list(s) for s in input_ids]
    labels[0][:LABEL_MASK] = [IGNORE] * LABEL_MASK
    return input_ids, labels


def counted_tokens(labels):
    """Tokens HF's causal-LM loss averages over: shifted labels (drop position 0) != -100."""
    return sum(sum(1 for t in row[1:] if t != IGNORE) for row in labels)


def check_arch(goldens, arch):
    d = os.path.join(goldens, arch)
    for name in ("config.json", "model.safetensors", "ids.json", "adapter/adapter_config.json",
                 "adapter/adapter_model.safetensors"):
        if not os.path.isfile(os.path.join(d, name)):
            raise SystemExit(f"missing {os.path.join(d, name)}")
    cfg = json.load(open(os.path.join(d, "config.json")))
    ids = json.load(open(os.path.join(d, "ids.json")))
    vocab = cfg["vocab_size"]
    if not ids or not all(isinstance(i, int) and 0 <= i < vocab for i in ids):
        raise SystemExit(f"{d}/ids.json: ids must be ints in [0, {vocab})")
    adapter = safetensors_header(os.path.join(d, "adapter", "adapter_model.safetensors"))
    if not adapter or not all(".lora_A.weight" in k or ".lora_B.weight" in k for k in adapter):
        raise SystemExit(f"{d}/adapter: expected only lora_A/lora_B tensors, got {list(adapter)}")
    numel = sum(math.prod(v["shape"]) for v in adapter.values())
    return cfg, ids, adapter, numel


def dry_run(goldens, out):
    plan = {"sgd": SGD, "adamw": ADAMW, "archs": {}}
    total = 0
    for arch in ARCHS:
        cfg, ids, adapter, numel = check_arch(goldens, arch)
        input_ids, labels = make_batch(ids, NUM_SEQS)
        n = counted_tokens(labels)
        # 4 safetensors of numel f32 each (plus small headers)
        size = len(OUTPUT_FILES) * (4 * numel + 64 * len(adapter) + 256)
        total += size
        plan["archs"][arch] = {"input_ids": input_ids, "labels": labels, "loss_tokens": n,
                               "lora_tensors": len(adapter), "lora_numel": numel,
                               "estimated_bytes": size}
        print(arch, "ok: batch", [len(s) for s in input_ids], "loss tokens", n, "lora tensors",
              len(adapter), "numel", numel, "~bytes", size, flush=True)
    assert counted_tokens([[IGNORE, IGNORE, IGNORE, 5, 6], [1, 2, 3, 4, 5]]) == 2 + 4
    plan["estimated_total_bytes"] = total
    if total > MAX_TOTAL_BYTES:
        raise SystemExit(f"estimated output {total} bytes exceeds {MAX_TOTAL_BYTES}")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "train_plan.json"), "w") as f:
        json.dump(plan, f, indent=1)
    print("dry run ok: estimated", total, "bytes ->", os.path.join(out, "train_plan.json"))


# ---------------------------------------------------------------------------------------------
# Everything below needs torch + transformers + peft.


def import_emulation():
    """make_goldens.py's FP8 recipe emulation (quantize_weight, quantize_activation, MARGIN)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_goldens
    return make_goldens


def load_peft_model(goldens, arch):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    path = os.path.join(goldens, arch)
    kw = dict(attn_implementation="eager")
    try:
        base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kw)
    except TypeError:
        base = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32, **kw)
    base = base.float()
    model = PeftModel.from_pretrained(base, os.path.join(path, "adapter"), is_trainable=True)
    model = model.float()
    model.eval()  # no dropout anywhere (the adapters have lora_dropout 0 too)
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    return model


def lora_params(model, saved_names):
    """{adapter tensor name: parameter}, named as in adapter_model.safetensors."""
    params = {}
    for name, p in model.named_parameters():
        if "lora_" not in name:
            continue
        key = name.replace(".default.", ".")
        if key not in saved_names:
            raise SystemExit(f"parameter {name} -> {key} is not in the saved adapter")
        params[key] = p
    if set(params) != set(saved_names):
        raise SystemExit(f"adapter tensors without a parameter: {set(saved_names) - set(params)}")
    return dict(sorted(params.items()))


def loss_and_grads(model, params, input_ids, labels):
    import torch
    for p in params.values():
        p.grad = None
    out = model(input_ids=torch.tensor(input_ids), labels=torch.tensor(labels), use_cache=False)
    out.loss.backward()
    grads = {k: p.grad.detach().clone().float().contiguous() for k, p in params.items()}
    return float(out.loss), grads


def step_from(params, start, grads, make_optimizer):
    """One optimizer step from `start` with `grads`; returns the new values."""
    import torch
    with torch.no_grad():
        for k, p in params.items():
            p.copy_(start[k])
            p.grad = grads[k].clone()
    opt = make_optimizer(list(params.values()))
    opt.step()
    return {k: p.detach().clone().float().contiguous() for k, p in params.items()}


class Fp8RowSte:
    """Builds the straight-through FP8-row base linear: forward through the emulated recipe,
    backward dX = dY W_deq."""

    def __init__(self, emulation):
        import torch
        em = emulation

        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, w_deq):
                ctx.save_for_backward(w_deq)
                shape = x.shape
                xq = em.quantize_activation(x.reshape(-1, shape[-1]).float(), "row")
                return (xq @ w_deq.T).reshape(*shape[:-1], -1)

            @staticmethod
            def backward(ctx, dy):
                (w_deq,) = ctx.saved_tensors
                return dy @ w_deq, None

        class Linear(torch.nn.Module):
            def __init__(self, linear):
                super().__init__()
                # The frozen original stays visible as `weight` for code that inspects the
                # base layer (shapes, dtype); the forward uses only its quantized copy.
                self.weight = linear.weight
                self.in_features, self.out_features = linear.in_features, linear.out_features
                self.w_deq = em.quantize_weight(linear.weight.detach().float(), "row")
                self.bias = None if linear.bias is None else linear.bias.detach().float()

            def forward(self, x):
                y = Fn.apply(x, self.w_deq)
                return y if self.bias is None else y + self.bias

        self.Linear = Linear


def quantize_base_linears(model, emulation):
    """Replaces the base layer of every decoder projection (PEFT's lora.Linear.base_layer, or
    the plain nn.Linear of an untargeted projection) by the FP8-row straight-through linear."""
    ste = Fp8RowSte(emulation)
    count = 0
    for name, module in list(model.named_modules()):
        leaf = name.rsplit(".", 1)[-1]
        if leaf not in LINEARS or ".layers." not in name:
            continue
        if hasattr(module, "base_layer"):
            module.base_layer = ste.Linear(module.base_layer)
        else:
            parent = model.get_submodule(name.rsplit(".", 1)[0])
            setattr(parent, leaf, ste.Linear(module))
        count += 1
    return count


def fp8_batch(model, params, emulation, vocab, seed):
    """A batch of 2 x FP8_SEQ_LEN ids whose FP8 forward keeps activations off the e4m3
    rounding boundaries (the best of FP8_MAX_TRIES draws)."""
    import numpy as np
    import torch
    rng = np.random.default_rng(seed)
    best = None
    for attempt in range(FP8_MAX_TRIES):
        ids = rng.integers(FIRST_ID, vocab, size=NUM_SEQS * FP8_SEQ_LEN).tolist()
        input_ids, labels = make_batch(ids, NUM_SEQS)
        emulation.MARGIN["min"] = float("inf")
        with torch.no_grad():
            model(input_ids=torch.tensor(input_ids), use_cache=False)
        score = emulation.MARGIN["min"]
        if best is None or score > best[0]:
            best = (score, input_ids, labels)
        if score >= 1.0:
            break
    return best[0], best[1], best[2], attempt + 1


def save(path, tensors):
    from safetensors.torch import save_file
    save_file(tensors, path, metadata={"format": "pt"})


def run_arch(goldens, out_root, arch, summary):
    import torch
    cfg, ids, adapter, _ = check_arch(goldens, arch)
    out = os.path.join(out_root, arch, "train")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)

    model = load_peft_model(goldens, arch)
    params = lora_params(model, adapter)
    start = {k: p.detach().clone() for k, p in params.items()}
    input_ids, labels = make_batch(ids, NUM_SEQS)
    loss, grads = loss_and_grads(model, params, input_ids, labels)
    save(os.path.join(out, "grads.safetensors"), {k + ".grad": g for k, g in grads.items()})
    sgd = step_from(params, start, grads, lambda ps: torch.optim.SGD(ps, **SGD))
    save(os.path.join(out, "sgd_adapter.safetensors"), sgd)
    adamw = step_from(params, start, grads, lambda ps: torch.optim.AdamW(ps, **ADAMW))
    save(os.path.join(out, "adamw_adapter.safetensors"), adamw)

    # FP8 row, straight-through, from the committed adapter again.
    emulation = import_emulation()
    fmodel = load_peft_model(goldens, arch)
    fparams = lora_params(fmodel, adapter)
    replaced = quantize_base_linears(fmodel, emulation)
    margin, f_ids, f_labels, tries = fp8_batch(fmodel, fparams, emulation, cfg["vocab_size"],
                                               seed=20240611)
    f_loss, f_grads = loss_and_grads(fmodel, fparams, f_ids, f_labels)
    save(os.path.join(out, "fp8_row_grads.safetensors"),
         {k + ".grad": g for k, g in f_grads.items()})

    record = {
        "batch_note": "each sequence alone from position 0 (no padding, no attention mask); "
                      "HF shifts the labels: position t predicts labels[t + 1]",
        "input_ids": input_ids, "labels": labels, "loss": loss,
        "loss_tokens": counted_tokens(labels),
        "sgd": SGD, "adamw": {**ADAMW, "betas": list(ADAMW["betas"])},
        "grad_max_abs": max(float(g.abs().max()) for g in grads.values()),
        "fp8_row": {"input_ids": f_ids, "labels": f_labels, "loss": f_loss,
                    "loss_tokens": counted_tokens(f_labels), "margin_score": margin,
                    "tries": tries, "replaced_linears": replaced,
                    "backward": "straight-through: dX = dY W_deq"},
        "lora_scale_note": "grads are of the loss w.r.t. the stored A and B (scale included)",
    }
    with open(os.path.join(out, "train.json"), "w") as f:
        json.dump(record, f, indent=1)
    summary[arch] = {"loss": loss, "fp8_row_loss": f_loss, "fp8_margin_score": margin,
                     "fp8_tries": tries, "grad_max_abs": record["grad_max_abs"],
                     "lora_tensors": len(grads)}
    print(arch, "loss", loss, "fp8 row loss", f_loss, "margin", margin, "tries", tries,
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("goldens")
    ap.add_argument("out")
    args = ap.parse_args()
    if args.dry_run:
        dry_run(args.goldens, args.out)
        return
    import peft
    import torch
    import transformers
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    summary = {"torch": torch.__version__, "transformers": transformers.__version__,
               "peft": peft.__version__}
    for arch in ARCHS:
        run_arch(args.goldens, args.out, arch, summary)
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(args.out) for f in fs)
    summary["total_bytes"] = total
    with open(os.path.join(args.out, "train_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if total > MAX_TOTAL_BYTES:
        raise SystemExit(f"output is {total} bytes, over {MAX_TOTAL_BYTES}")


if __name__ == "__main__":
    main()
