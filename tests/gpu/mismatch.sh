#!/usr/bin/env bash
# The engine-trainer mismatch of GRPO on the trained demo model (examples/demo.yaml, 20 steps on
# CUDA, one run each) with FP8-row weights, bf16 weights, and FP8-row weights over an FP8 KV
# cache, from a bundle (tests/gpu/bundle.sh): the mean over steps of
# sampling/sampling_logp_difference/mean and of sampling/token_prob_error/mean, and FP8-row's
# and FP8 KV's over bf16's (the trainer reads no cache, so FP8 KV's excess over FP8-row's is the
# deviation the FP8 cache adds).
#   BUILD=build-gpu tests/gpu/mismatch.sh [OUT_DIR]      (default: $OUT, else /tmp/fp8rl-gpu)
set -u
OUT_DIR=${1:-${OUT:-/tmp/fp8rl-gpu}}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT_DIR"
. "$(dirname "$0")/env.sh"
run() {  # NAME FLAGS...
  local name=$1
  shift
  rm -rf "/tmp/mismatch-$name"
  timeout 120 "$BUILD/bin/fp8rl" grpo --config examples/demo.yaml --device cuda --max-steps 20 \
    --output-dir "/tmp/mismatch-$name" --save-steps 0 "$@" > "$OUT_DIR/mismatch_$name.log" 2>&1 ||
    echo "grpo $* failed (see mismatch_$name.log)"
}
run row --fp8 row
run off --fp8 off
run row_fp8kv --fp8 row --kv-dtype fp8
python3 - /tmp/mismatch-{row,off,row_fp8kv}/metrics.jsonl <<'PY'
import json, sys
def means(path):
    rows = [json.loads(l) for l in open(path)]
    rows = [r for r in rows if "sampling/sampling_logp_difference/mean" in r]  # not eval lines
    pick = lambda k: sum(r[k] for r in rows) / len(rows)
    return (pick("sampling/sampling_logp_difference/mean"),
            pick("sampling/token_prob_error/mean"), rows[0]["reward"], rows[-1]["reward"])
row, off, kv = (means(p) for p in sys.argv[1:4])
for name, m in (("fp8-row", row), ("bf16", off), ("fp8-row, fp8 KV", kv)):
    print(f"demo on CUDA, {name}: mean |dlogp| {m[0]:.5f}, token_prob_error {m[1]:.5f}, "
          f"reward {m[2]:.3f} -> {m[3]:.3f}")
for name, m in (("fp8-row", row), ("fp8-row, fp8 KV", kv)):
    print(f"{name} / bf16: |dlogp| x{m[0] / off[0]:.2f}, "
          f"token_prob_error - 1: x{(m[1] - 1) / (off[1] - 1):.2f}")
PY
