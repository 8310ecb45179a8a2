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

Mixture-of-experts architectures (qwen3_moe; FP32_ONLY: their fused experts are no nn.Linear
the emulation could replace) are written twice from the same weights: OUT/<arch> as the Hub
stores experts (mlp.experts.E.{gate,up,down}_proj.weight) and OUT/<arch>_fused as transformers
5 fuses them (mlp.experts.gate_up_proj [E, 2I, H], gate rows then up rows of each expert;
mlp.experts.down_proj [E, H, I]), whatever layout save_pretrained itself writes.

Runs wherever torch + transformers exist (the GPU machine); everything runs on the CPU in fp32
so the results do not depend on TF32 or GPU kernels. Usage:
    python3 tools/goldens/make_goldens.py OUT_DIR [--only NAME[,NAME] ...]
--only makes the named goldens alone (OUT_DIR/NAME each, and OUT_DIR/<names>_summary.json,
the names joined by "_", instead of summary.json), e.g. `--only qwen3_yarn` for the YaRN golden
without remaking the others (copy OUT_DIR/qwen3_yarn to tests/data/goldens/qwen3_yarn), or
`--only qwen3_moe` (tools/goldens/run_moe_goldens.sh packs it).

The goldens after the first five (FP32_ONLY) draw their weights and ids from seeds of their own,
so a full run and an --only run make the same files, and have only the fp32 logits (they test
something besides the FP8 recipe, which the five cover). The five share one random stream in
their listed order, so --only refuses them (one alone would get other weights).
"""
import argparse
import json
import os
import re
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

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
        # Layer 0 sparse (4 experts, top-2, renormalized as Qwen3-30B-A3B), layer 1 dense.
        "qwen3_moe": (Qwen3MoeForCausalLM, Qwen3MoeConfig(
            **COMMON, tie_word_embeddings=False, rope_theta=1000000.0, num_experts=4,
            num_experts_per_tok=2, moe_intermediate_size=96, norm_topk_prob=True,
            decoder_sparse_step=1, mlp_only_layers=[1])),
    }


# Goldens with seeds of their own (torch's, the generator's) and no FP8 logits (see the module
# docstring). qwen3_moe's are zlib.crc32(b"qwen3_moe") and one more.
FP32_ONLY = {"qwen3_yarn": (4321, 4321), "qwen3_moe": (2791911863, 2791911864)}
MOE_ARCHS = ("qwen3_moe",)


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


def randomize_moe(model, gen, std):
    """Routers and experts drawn here, N(0, std), whatever the library's init does with them."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".mlp.experts." in name or name.endswith(".mlp.gate.weight"):
                p.copy_(std * torch.randn(p.shape, generator=gen))


# Smallest gap, over tokens and MoE layers, between the k-th and (k+1)-th routing probability:
# where it is near fp32 noise another correct implementation could pick another expert.
ROUTING = {"min_gap": float("inf")}


def record_routing(model, top_k):
    def hook(module, args):
        x = args[0].reshape(-1, args[0].shape[-1]).float()
        p = torch.softmax(x @ module.weight.float().T, dim=-1).sort(dim=-1, descending=True).values
        ROUTING["min_gap"] = min(ROUTING["min_gap"], float((p[:, top_k - 1] - p[:, top_k]).min()))
    for layer in model.model.layers:
        gate = getattr(layer.mlp, "gate", None)
        if gate is not None and hasattr(gate, "weight") and not hasattr(layer.mlp, "gate_proj"):
            gate.register_forward_pre_hook(hook)


def expert_layouts(state):
    """The state dict as the Hub stores experts and as transformers 5 fuses them: (hub, fused).
    Accepts either layout (transformers 4 modules are per expert, 5's parameters fused)."""
    per_expert, common = {}, {}
    for name, t in state.items():
        t = t.detach().clone()
        m = re.fullmatch(r"(model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight", name)
        f = re.fullmatch(r"(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)", name)
        if m:
            per_expert.setdefault(m[1], {})[(int(m[2]), m[3])] = t
        elif f and f[2] == "gate_up_proj":
            half = t.shape[1] // 2
            for e in range(t.shape[0]):
                per_expert.setdefault(f[1], {})[(e, "gate")] = t[e, :half].clone()
                per_expert[f[1]][(e, "up")] = t[e, half:].clone()
        elif f:
            for e in range(t.shape[0]):
                per_expert.setdefault(f[1], {})[(e, "down")] = t[e].clone()
        else:
            common[name] = t
    hub, fused = dict(common), dict(common)
    for prefix, parts in per_expert.items():
        n = 1 + max(e for e, _ in parts)
        for (e, proj), t in parts.items():
            hub[f"{prefix}.{e}.{proj}_proj.weight"] = t
        fused[f"{prefix}.gate_up_proj"] = torch.stack(
            [torch.cat([parts[(e, "gate")], parts[(e, "up")]], dim=0) for e in range(n)])
        fused[f"{prefix}.down_proj"] = torch.stack([parts[(e, "down")] for e in range(n)])
    return hub, fused


def write_weights(out, tensors):
    """OUT/model.safetensors alone (no shards, no index)."""
    for f in os.listdir(out):
        if f.endswith(".safetensors") or f.endswith(".safetensors.index.json"):
            os.remove(os.path.join(out, f))
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())},
              os.path.join(out, "model.safetensors"), metadata={"format": "pt"})


def logits_of(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits[0].float().numpy()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", help="output root: OUT_DIR/<name>/... and the summary")
    parser.add_argument("--only", nargs="+", metavar="NAME[,NAME]",
                        help="make these goldens alone (space- or comma-separated)")
    args = parser.parse_args()
    out_root = args.out_dir
    all_configs = configs()
    only = [a for item in args.only or [] for a in item.split(",") if a]
    unknown = sorted(set(only) - set(all_configs))
    if unknown:
        sys.exit(f"--only: no golden named {', '.join(unknown)} (known: {', '.join(all_configs)})")
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    summary = {"transformers": transformers.__version__, "torch": torch.__version__}
    for arch, (cls, cfg) in all_configs.items():
        fp32_only = arch in FP32_ONLY
        if fp32_only:
            # Its own seeds: the same weights and ids whichever goldens the run makes.
            torch.manual_seed(FP32_ONLY[arch][0])
            gen = torch.Generator().manual_seed(FP32_ONLY[arch][1])
        elif only:
            # The five share one random stream in order; one alone would differ from a full run.
            if arch in only:
                sys.exit(f"--only {arch}: it shares its random stream with the other FP8 "
                         "goldens; run without --only to remake them")
            continue
        if only and arch not in only:
            continue
        moe = arch in MOE_ARCHS
        cfg._attn_implementation = "eager"
        if moe:  # transformers 5: the reference loop over the experts hit
            try:
                cfg._experts_implementation = "eager"
            except AttributeError:
                pass
        model = cls(cfg).float().eval()
        randomize(model, gen)
        if moe:
            randomize_moe(model, gen, cfg.initializer_range)
        model = model.to(torch.bfloat16)
        out = os.path.join(out_root, arch)
        model.save_pretrained(out, safe_serialization=True)
        if moe:
            # Both expert layouts of the same bf16 weights; config.json etc. as saved.
            hub, fused = expert_layouts(model.state_dict())
            fused_out = os.path.join(out_root, arch + "_fused")
            os.makedirs(fused_out, exist_ok=True)
            for f in os.listdir(out):
                if f.endswith(".json") and "safetensors" not in f:
                    with open(os.path.join(out, f)) as src, open(os.path.join(fused_out, f), "w") as dst:
                        dst.write(src.read())
            write_weights(out, hub)
            write_weights(fused_out, fused)
        state = model.float().state_dict()

        def fresh():
            # A new module gets fp32 rotary buffers; .to(bfloat16) above rounded the old ones.
            m = cls(cfg).float().eval()
            m.load_state_dict(state)
            return m

        model = fresh()
        if moe:
            record_routing(model, cfg.num_experts_per_tok)
        ids = torch.randint(3, cfg.vocab_size, (1, SEQ_LEN), generator=gen)
        ROUTING["min_gap"] = float("inf")
        logits = logits_of(model, ids)
        outs = [out, os.path.join(out_root, arch + "_fused")] if moe else [out]
        for o in outs:
            np.save(os.path.join(o, "logits_fp32.npy"), logits)
            with open(os.path.join(o, "ids.json"), "w") as f:
                json.dump(ids[0].tolist(), f)
        if moe:
            summary[f"{arch}_min_routing_gap"] = ROUTING["min_gap"]
            summary[f"{arch}_fp8"] = "none: the emulation replaces nn.Linear modules only"
            summary[f"{arch}_experts_implementation"] = str(
                getattr(cfg, "_experts_implementation", None))
            print(arch, "min routing gap", ROUTING["min_gap"], flush=True)
        qmodels = {}
        for scheme in () if fp32_only else ("tensor", "row", "block"):
            qmodels[scheme] = fresh()
            for layer in qmodels[scheme].model.layers:
                for parent in (layer.self_attn, layer.mlp):
                    for name in LINEARS:
                        if hasattr(parent, name):
                            setattr(parent, name, Fp8EmulatedLinear(getattr(parent, name), scheme))
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
    name = "_".join(only) + "_summary.json" if only else "summary.json"
    with open(os.path.join(out_root, name), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
