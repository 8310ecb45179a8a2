#!/usr/bin/env python3
"""Builds tiny random checkpoints with HF transformers and the logits fp8rl must reproduce.

For each architecture: a random model is rounded to bf16 and saved with save_pretrained (that
is the checkpoint fp8rl loads); then the same weights, upcast to fp32, run HF's eager forward
on a fixed token sequence (logits_fp32.npy), and again with every decoder linear replaced by an
emulation of fp8rl's FP8 recipe (DESIGN.md §4) for each scaling scheme (logits_fp8_<scheme>.npy).

Runs wherever torch + transformers exist (the GPU machine); everything runs on the CPU in fp32
so the results do not depend on TF32 or GPU kernels. Usage:
    python3 tools/goldens/make_goldens.py OUT_DIR
"""
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
SEQ_LEN = 40
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
    }


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
    out_root = sys.argv[1]
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    summary = {"transformers": transformers.__version__, "torch": torch.__version__}
    for arch, (cls, cfg) in configs().items():
        cfg._attn_implementation = "eager"
        model = cls(cfg).float().eval()
        randomize(model, gen)
        model = model.to(torch.bfloat16)
        out = os.path.join(out_root, arch)
        model.save_pretrained(out, safe_serialization=True)
        model = model.float().eval()
        ids = torch.randint(3, cfg.vocab_size, (1, SEQ_LEN), generator=gen)
        np.save(os.path.join(out, "logits_fp32.npy"), logits_of(model, ids))
        for scheme in ("tensor", "row", "block"):
            qmodel = cls(cfg).float().eval()
            qmodel.load_state_dict(model.state_dict())
            for layer in qmodel.model.layers:
                for parent in (layer.self_attn, layer.mlp):
                    for name in LINEARS:
                        if hasattr(parent, name):
                            setattr(parent, name, Fp8EmulatedLinear(getattr(parent, name), scheme))
            np.save(os.path.join(out, f"logits_fp8_{scheme}.npy"), logits_of(qmodel, ids))
        with open(os.path.join(out, "ids.json"), "w") as f:
            json.dump(ids[0].tolist(), f)
        summary[arch] = json.load(open(os.path.join(out, "config.json")))
        print(arch, "ok", flush=True)
    with open(os.path.join(out_root, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
