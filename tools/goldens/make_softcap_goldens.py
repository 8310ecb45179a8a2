#!/usr/bin/env python3
"""The softcapping golden: HF transformers' Gemma 3 with attention and final-logit softcapping.

Neither committed golden sets attn_logit_softcapping or final_logit_softcapping (Gemma 3's
released configs leave them null; Gemma 2 uses 50 and 30). This takes the committed gemma3
checkpoint (GOLDENS_DIR/gemma3, read only), sets both caps in its config, small enough that
tanh would bend the values the model produces (the final cap from the model's own logit
range; transformers 5.17 applies only the final cap for Gemma 3, see main), and runs HF's
eager fp32 forward on the committed ids.json:
  OUT_DIR/goldens/gemma3_softcap/{config.json, model.safetensors (a copy), ids.json,
  logits_fp32.npy} and OUT_DIR/goldens/softcap_summary.json (caps, the effect of each cap on
  the logits, library versions).
Runs on the CPU in fp32 wherever torch + transformers exist (the GPU machine):
    bash tools/goldens/added_goldens.sh make_softcap_goldens.py softcap 3 OUT_DIR
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
import transformers
from transformers import Gemma3ForCausalLM


def logits_of(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits[0].float().numpy()


def load(src, attn_cap, final_cap):
    cfg = transformers.AutoConfig.from_pretrained(src)
    cfg.attn_logit_softcapping = attn_cap
    cfg.final_logit_softcapping = final_cap
    # eager: the sdpa path has no softcap (and from_pretrained picks sdpa unless told).
    model = Gemma3ForCausalLM.from_pretrained(src, config=cfg, dtype=torch.float32,
                                              attn_implementation="eager").eval()
    assert model.config._attn_implementation == "eager"
    return model, cfg


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def main():
    src = os.path.join(sys.argv[1], "gemma3")
    out = os.path.join(sys.argv[2], "gemma3_softcap")
    ids = torch.tensor([json.load(open(os.path.join(src, "ids.json")))])
    plain, _ = load(src, None, None)
    base = logits_of(plain, ids)
    final_cap = round(0.5 * float(np.abs(base).max()), 3)
    # transformers' Gemma3Attention stores attn_logit_softcapping but never applies it (only
    # Gemma 2 passes it to the attention); a cap this small would flatten every score if it
    # were applied. The summary records its effect on HF's logits (0) and fp8rl must match.
    attn_cap = 0.05
    model, cfg = load(src, attn_cap, final_cap)
    logits = logits_of(model, ids)
    only_attn = logits_of(load(src, attn_cap, None)[0], ids)
    only_final = logits_of(load(src, None, final_cap)[0], ids)
    os.makedirs(out, exist_ok=True)
    cfg.save_pretrained(out)
    shutil.copy(os.path.join(src, "model.safetensors"), os.path.join(out, "model.safetensors"))
    shutil.copy(os.path.join(src, "ids.json"), os.path.join(out, "ids.json"))
    np.save(os.path.join(out, "logits_fp32.npy"), logits)
    summary = {
        "transformers": transformers.__version__, "torch": torch.__version__,
        "attn_logit_softcapping": attn_cap, "final_logit_softcapping": final_cap,
        "effect_attn_cap": rel(only_attn, base), "effect_final_cap": rel(only_final, base),
        "effect_both": rel(logits, base),
    }
    with open(os.path.join(sys.argv[2], "softcap_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
