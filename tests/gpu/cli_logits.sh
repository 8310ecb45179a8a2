#!/usr/bin/env bash
# On the GPU machine: `fp8rl info --device cuda` and `fp8rl logits --device cuda` vs --device cpu
# for every golden and scheme, with the CLI of a bundle (tests/gpu/bundle.sh; run.sh unpacks
# it). Prints rel max diff and top-1 per case against both CPU references: the exact fp32
# forward (--activations f32) and the one emulating CUDA's bf16 activations
# (--activations bf16), which the unquantized model must meet within 2e-2 (kCudaBf16Logits in
# tests/tolerances.h; FP8 schemes are recorded, tolerances.h says why they cannot be held to
# it). Exits 1 if a case fails to run or an unquantized case misses the bound.
#
#   tests/gpu/cli_logits.sh [BUNDLE_DIR]      (default build-gpu)
set -u
BUILD=${1:-build-gpu}
export LD_LIBRARY_PATH=$PWD/$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$BUILD/bin/fp8rl
NPY=$(mktemp -d)
export NPY
FAILED=0
$B info tests/data/goldens/gemma3 --device cuda | tail -12
for a in llama qwen2 qwen3 mistral gemma3; do
  ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('tests/data/goldens/$a/ids.json')))))")
  for s in off row block tensor; do
    $B logits tests/data/goldens/$a --ids $ids --fp8 $s --device cuda --out $NPY/${a}_${s}_cuda.npy || { echo FAIL $a $s; FAILED=1; }
    for act in f32 bf16; do
      $B logits tests/data/goldens/$a --ids $ids --fp8 $s --device cpu --activations $act \
        --out $NPY/${a}_${s}_cpu_${act}.npy || { echo FAIL $a $s cpu $act; FAILED=1; }
    done
  done
done
python3 - <<'PY'
import numpy as np, os
import sys
out = os.environ["NPY"]
bad = 0
print(f"{'arch':8s} {'scheme':7s} {'vs cpu f32':>22s}   {'vs cpu-bf16 (off: bound 0.02)':>33s}")
for a in ["llama","qwen2","qwen3","mistral","gemma3"]:
    for s in ["off","row","block","tensor"]:
        g = np.load(f"{out}/{a}_{s}_cuda.npy")
        cols = []
        for act in ["f32", "bf16"]:
            c = np.load(f"{out}/{a}_{s}_cpu_{act}.npy")
            rel = np.abs(g-c).max()/np.abs(c).max(); top1 = (g.argmax(1)==c.argmax(1)).mean()
            cols.append(f"rel_max_diff {rel:.4f} top1 {top1:.3f}")
        ok = "" if s != "off" or rel <= 2e-2 else "  FAIL"
        bad += ok != ""
        print(f"{a:8s} {s:7s} {cols[0]}   {cols[1]}{ok}")
sys.exit(1 if bad else 0)
PY
[ $? -ne 0 ] && FAILED=1
rm -rf "$NPY"
exit $FAILED
