#!/usr/bin/env bash
# On the GPU machine: `fp8rl info --device cuda` and `fp8rl logits --device cuda` vs --device cpu
# for every golden and scheme, from a stripped binary bundled here into build-cli/ (with the
# libfmt, libgomp and libpcre2 the GPU image may lack). Prints rel max diff and top-1 per case.
set -u
export LD_LIBRARY_PATH=$PWD/build-cli/lib:$LD_LIBRARY_PATH
B=build-cli/fp8rl
$B info tests/data/goldens/gemma3 --device cuda | tail -12
for a in llama qwen2 qwen3 mistral gemma3; do
  ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('tests/data/goldens/$a/ids.json')))))")
  for s in off row block tensor; do
    $B logits tests/data/goldens/$a --ids $ids --fp8 $s --device cuda --out $OUT/${a}_${s}_cuda.npy || echo FAIL $a $s
    $B logits tests/data/goldens/$a --ids $ids --fp8 $s --device cpu --out /tmp/${a}_${s}_cpu.npy
  done
done
python3 - <<'PY'
import numpy as np, os
out = os.environ["OUT"]
for a in ["llama","qwen2","qwen3","mistral","gemma3"]:
    for s in ["off","row","block","tensor"]:
        g = np.load(f"{out}/{a}_{s}_cuda.npy"); c = np.load(f"/tmp/{a}_{s}_cpu.npy")
        rel = np.abs(g-c).max()/np.abs(c).max(); top1 = (g.argmax(1)==c.argmax(1)).mean()
        print(f"{a:8s} {s:7s} rel_max_diff {rel:.4f} top1 {top1:.3f}")
PY
rm -f $OUT/*.npy
