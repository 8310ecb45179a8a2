#!/usr/bin/env bash
# `fp8rl serve --device cuda` under 256 concurrent clients against `bench generate` on the same
# sequences, in one call, from the repo root with a bundle (tests/gpu/bundle.sh):
#   BUILD=build-gpu tests/gpu/serve_throughput.sh [OUT_DIR]
# A random Qwen3-8B checkpoint (fp8rl init) served FP8-row; tools/bench/serve_load.py sends 256
# requests of 128 random prompt tokens for exactly 512 new tokens at once; bench generate runs
# 256 prompts x 1 sample of the same lengths. Prints both and their ratio.
set -u
OUT_DIR=${1:-${OUT:-/tmp/fp8rl-gpu}}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT_DIR"
. "$(dirname "$0")/env.sh"
FP8RL="$BUILD/bin/fp8rl"
CLIENTS=${CLIENTS:-256}
model=$(mktemp -d)
trap 'rm -rf "$model"; [ -n "${server:-}" ] && kill "$server" 2>/dev/null' EXIT
"$FP8RL" init --arch qwen3 --preset qwen3-8b --out "$model" > "$OUT_DIR/serve_init.log" 2>&1 ||
  { echo "init failed"; exit 1; }
"$FP8RL" serve "$model" --device cuda --fp8 row --kv-memory 40 --max-num-seqs "$CLIENTS" \
  --http-threads $(( CLIENTS + 16 )) --port 8011 > "$OUT_DIR/serve.log" 2>&1 &
server=$!
timeout 300 python3 tools/bench/serve_load.py --port 8011 --clients "$CLIENTS" \
  --prompt-tokens 128 --max-tokens 512 > "$OUT_DIR/serve_load.json"
kill "$server"; wait "$server" 2>/dev/null; server=
timeout 120 "$FP8RL" bench generate --model tools/bench/configs/qwen3-8b --prompts "$CLIENTS" \
  --n 1 --prompt-tokens 128 --max-tokens 512 --kv-memory 40 --fp8 row --device cuda \
  --out "$OUT_DIR/serve_bench_generate.json" > "$OUT_DIR/serve_bench_generate.log" 2>&1
python3 - "$OUT_DIR" <<'PY'
import json, sys
d = sys.argv[1]
s = json.load(open(f"{d}/serve_load.json"))
g = json.load(open(f"{d}/serve_bench_generate.json"))
r = s["output_tokens_per_second"] / g["output_tokens_per_second"]
print(f"serve {s['output_tokens_per_second']:.0f} tok/s ({s['completion_tokens']} tokens, "
      f"{s['failures']} failures) / bench generate {g['output_tokens_per_second']:.0f} = {r:.3f}")
PY
