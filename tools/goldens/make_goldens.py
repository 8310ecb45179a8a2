#!/usr/bin/env python3
"""Builds tiny random checkpoints with HF transformers and the logits fp8rl must reproduce.

For each architecture: a random model is rounded to bf16 and saved with save_pretrained (that
is the checkpoint fp8rl loads); then the same weights, upcast to fp32, run HF's eager forward
on a fixed token sequence (ids.json -> logits_fp32.npy), and again with every decoder linear
replaced by an emulation of fp8rl's FP8 recipe (src/quant/fp8.h) for each scaling scheme
(ids_fp8_<scheme>.json -> logits_fp8_<scheme>.npy). The FP8 token sequences are drawn until no
activation lands within MIN_MARGIN of an e4m3 rounding boundary: otherwise a
last-ulp difference in fp32 summation order between two correct implementations flips one
rounding, and in a quantized network one flip cascades into the FP8 noise level.

Runs wherever torch + transformers exist (the GPU machine); everything runs on the CPU in fp32
so the results do not depend on TF32 or GPU kernels. Usage:
    python3 tools/goldens/make_goldens.py OUT_DIR [--only ARCH ...]
--only makes the named goldens alone (OUT_DIR/ARCH each, and OUT_DIR/ARCH_summary.json instead
of summary.json), e.g. `--only qwen3_yarn` for the YaRN golden without remaking the others:
copy OUT_DIR/qwen3_yarn to tests/data/goldens/qwen3_yarn.

The goldens after the first five (FP32_ONLY) draw their weights and ids from a seed of their
own, so a full run and an --only run make the same files, and have only the fp32 logits (they
test something besides the FP8 recipe, which the five cover).
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

E4M3_MAX = 448.0
BLOCK = 128
SEQ_LEN = 32      # tokens of the fp32 golden
FP8_SEQ_LEN = 12  # tokens of the FP8 goldens: fewer quantized elements, fewer near-ties
MIN_MARGIN = 1.5e-7  # ~2.5 fp32 ulps of the group maximum, see record_margin
REL_MARGIN = 2e-6    # ~30 fp32 ulps of the element itself
MAX_TRIES = 3000
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

COMMON = dict(vocab_size=256, hidden_size=192, intermediate_size=320, num_hidden_layers=2,
              num_attention_heads=6, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
              max_position_embeddings=256, initializer_range=0.08, bos_token_id=1,
              eos_token_id=2, pad_token_id=0)


def configs():
    return {
        "llama": (LlamaForCausalLM, LlamaConfig(
            **COMMON, tie_word_embeddings=False, rope_theta=10000.0,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
        "qwen2": (Qwen2ForCausalLM, Qwen2Config(
            **COMMON, tie_word_embeddings=True, rope_theta=1000000.0)),
        "qwen3": (Qwen3ForCausalLM, Qwen3Config(
            **{**COMMON, "num_attention_heads": 4, "head_dim": 64}, tie_word_embeddings=True,
            rope_theta=1000000.0)),
        "mistral": (MistralForCausalLM, MistralConfig(
            **COMMON, tie_word_embeddings=False, rope_theta=10000.0, sliding_window=8)),
        "gemma3": (Gemma3ForCausalLM, Gemma3TextConfig(
            **COMMON, tie_word_embeddings=True, rope_theta=1000000.0, rope_local_base_freq=10000.0,
            rope_scaling={"rope_type": "linear", "factor": 2.0}, sliding_window=8,
            query_pre_attn_scalar=24, layer_types=["sliding_attention", "full_attention"],
            hidden_activation="gelu_pytorch_tanh")),
        # YaRN past its original context: factor 4 over 16 positions (the 32-token sequence
        # runs to twice that), max_position_embeddings = factor x original as YaRN configs set
        # it; theta 10000 puts the ramp over several frequencies; the default attention factor.
        "qwen3_yarn": (Qwen3ForCausalLM, Qwen3Config(
            **{**COMMON, "num_attention_heads": 4, "head_dim": 64, "max_position_embeddings": 64},
            tie_word_embeddings=True, rope_theta=10000.0,
            rope_scaling={"rope_type": "yarn", "factor": 4.0,
                          "original_max_position_embeddings": 16})),
    }


# Goldens with a seed of their own and no FP8 logits (see the module docstring).
FP32_ONLY = {"qwen3_yarn": 4321}


def e4m3_midpoints():
    """The rounding boundaries of e4m3 (midpoints between consecutive positive values)."""
    codes = torch.arange(0, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    return (codes[1:] + codes[:-1]) / 2


MIDPOINTS = e4m3_midpoints()
# Smallest distance of any activation (x / scale) to an e4m3 rounding boundary, in units of
# E4M3_MAX (the scaled group maximum), seen in the emulated forwards since the last reset. Two
# fp32 implementations differ in an element by a few ulps of its row's magnitude (reduction
# order), not of the element itself, hence this normalisation.
# The score also asks for a relative margin (distance / the element itself) of
# REL_MARGIN: a score >= 1 meets both.
MARGIN = {"min": float("inf")}


def record_margin(v):
    a = v.abs().flatten()
    idx = torch.bucketize(a, MIDPOINTS).clamp(1, MIDPOINTS.numel() - 1)
    d = torch.minimum((a - MIDPOINTS[idx - 1]).abs(), (a - MIDPOINTS[idx]).abs())
    score = torch.minimum(d / (E4M3_MAX * MIN_MARGIN), d / (a.clamp_min(1e-30) * REL_MARGIN))
    MARGIN["min"] = min(MARGIN["min"], float(score.min()))


def to_e4m3(x):
    # Clamp first: torch's float->e4m3fn cast turns |x| >= 480 into NaN instead of saturating.
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)


def scale_from_amax(amax):
    return torch.where(amax == 0, torch.ones_like(amax), amax / E4M3_MAX)


def quantize_weight(w, scheme):
    """w [N,K] fp32 -> (dequantized weight [N,K], scales)."""
    n, k = w.shape
    if scheme == "tensor":
        s_full = scale_from_amax(w.abs().max()).expand(n, k)
    elif scheme == "row":
        s_full = scale_from_amax(w.abs().amax(dim=1, keepdim=True)).expand(n, k)
    else:  # block: edge blocks take the amax of their valid part (zero padding)
        nb, kb = -(-n // BLOCK), -(-k // BLOCK)
        padded = torch.zeros(nb * BLOCK, kb * BLOCK, dtype=w.dtype)
        padded[:n, :k] = w
        amax = padded.abs().view(nb, BLOCK, kb, BLOCK).amax(dim=(1, 3))
        s = scale_from_amax(amax)
        s_full = s.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:n, :k]
    return to_e4m3(w / s_full) * s_full


def quantize_activation(x, scheme):
    """x [M,K] fp32 -> dequantized activation with dynamic scales matching the weight scheme."""
    m, k = x.shape
    if scheme == "tensor":
        s_full = scale_from_amax(x.abs().max()).expand(m, k)
    elif scheme == "row":
        s_full = scale_from_amax(x.abs().amax(dim=1, keepdim=True)).expand(m, k)
    else:
        kb = -(-k // BLOCK)
        padded = torch.zeros(m, kb * BLOCK, dtype=x.dtype)
        padded[:, :k] = x
        s = scale_from_amax(padded.abs().view(m, kb, BLOCK).amax(dim=2))
        s_full = s.repeat_interleave(BLOCK, 1)[:, :k]
    record_margin(x / s_full)
    return to_e4m3(x / s_full) * s_full


class Fp8EmulatedLinear(torch.nn.Module):
    def __init__(self, linear, scheme):
        super().__init__()
        self.scheme = scheme
        self.weight_dq = quantize_weight(linear.weight.detach().float(), scheme)
        self.bias = None if linear.bias is None else linear.bias.detach().float()

    def forward(self, x):
        shape = x.shape
        x2 = quantize_activation(x.reshape(-1, shape[-1]).float(), self.scheme)
        y = x2 @ self.weight_dq.T
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], -1)


def randomize(model, gen):
    """HF's init leaves norms at their neutral value; perturb them so the tests see them."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name:
                neutral = 0.0 if isinstance(model, Gemma3ForCausalLM) else 1.0
                p.copy_(neutral + 0.2 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 1:  # biases
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def logits_of(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits[0].float().numpy()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--only", nargs="+", metavar="ARCH", help="make these goldens alone")
    args = parser.parse_args()
    out_root = args.out_dir
    all_configs = configs()
    unknown = sorted(set(args.only or []) - set(all_configs))
    if unknown:
        sys.exit(f"--only: no golden named {', '.join(unknown)} (known: {', '.join(all_configs)})")
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    summary = {"transformers": transformers.__version__, "torch": torch.__version__}
    for arch, (cls, cfg) in all_configs.items():
        fp32_only = arch in FP32_ONLY
        if fp32_only:
            # Its own seeds: the same weights and ids whichever goldens the run makes.
            torch.manual_seed(FP32_ONLY[arch])
            gen = torch.Generator().manual_seed(FP32_ONLY[arch])
        elif args.only:
            # The five share one random stream in order; one alone would differ from a full run.
            if arch in args.only:
                sys.exit(f"--only {arch}: it shares its random stream with the other FP8 "
                         "goldens; run without --only to remake them")
            continue
        if args.only and arch not in args.only:
            continue
        cfg._attn_implementation = "eager"
        model = cls(cfg).float().eval()
        randomize(model, gen)
        model = model.to(torch.bfloat16)
        out = os.path.join(out_root, arch)
        model.save_pretrained(out, safe_serialization=True)
        state = model.float().state_dict()

        def fresh():
            # A new module gets fp32 rotary buffers; .to(bfloat16) above rounded the old ones.
            m = cls(cfg).float().eval()
            m.load_state_dict(state)
            return m

        model = fresh()
        qmodels = {}
        for scheme in () if fp32_only else ("tensor", "row", "block"):
            qmodels[scheme] = fresh()
            for layer in qmodels[scheme].model.layers:
                for parent in (layer.self_attn, layer.mlp):
                    for name in LINEARS:
                        if hasattr(parent, name):
                            setattr(parent, name, Fp8EmulatedLinear(getattr(parent, name), scheme))
        ids = torch.randint(3, cfg.vocab_size, (1, SEQ_LEN), generator=gen)
        np.save(os.path.join(out, "logits_fp32.npy"), logits_of(model, ids))
        with open(os.path.join(out, "ids.json"), "w") as f:
            json.dump(ids[0].tolist(), f)
        # Per scheme, a token sequence whose FP8 forward keeps every activation away from the
        # e4m3 rounding boundaries: the FP8 golden then tests the recipe, not summation order.
        for scheme, qmodel in qmodels.items():
            best = None
            for attempt in range(MAX_TRIES):
                ids = torch.randint(3, cfg.vocab_size, (1, FP8_SEQ_LEN), generator=gen)
                MARGIN["min"] = float("inf")
                lg = logits_of(qmodel, ids)
                if best is None or MARGIN["min"] > best[0]:
                    best = (MARGIN["min"], ids, lg)
                if MARGIN["min"] >= 1.0:
                    break
            margin, ids, lg = best
            np.save(os.path.join(out, f"logits_fp8_{scheme}.npy"), lg)
            with open(os.path.join(out, f"ids_fp8_{scheme}.json"), "w") as f:
                json.dump(ids[0].tolist(), f)
            summary[f"{arch}_{scheme}_margin_score"] = margin
            summary[f"{arch}_{scheme}_tries"] = attempt + 1
            print(arch, scheme, "margin score", margin, "tries", attempt + 1, flush=True)
        summary[arch] = json.load(open(os.path.join(out, "config.json")))
        print(arch, "done", flush=True)
    name = "_".join(args.only) + "_summary.json" if args.only else "summary.json"
    with open(os.path.join(out_root, name), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
