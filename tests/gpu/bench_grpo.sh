#!/usr/bin/env bash
# What users run, timed on the GPU machine, from the repo root with a bundle (tests/gpu/bundle.sh)
# in $BUILD:
#   BUILD=build-gpu bash tests/gpu/bench_grpo.sh [OUT_DIR]   (default: $OUT, else /tmp/fp8rl-gpu)
# All on the Qwen3-8B config (tools/bench/configs/qwen3-8b, random weights), FP8-row and bf16:
# - fp8rl bench grpo, LoRA r 32 (alpha 64) on all seven projections, checkpointing on, at a small
#   shape (1 prompt x 8 generations, 128 + 512 tokens) and a realistic one (16 x 8, 256 + 768);
# - fp8rl bench generate with a random r 32 adapter (B nonzero) and without, at 256 sequences
#   (32 prompts x 8, 128 + 512 tokens) and at 8 (1 x 8);
# - the HF transformers + PEFT anchor (tools/bench/hf_generate.py --lora-r 32, bf16) at 8 and 128
#   rows.
# Each run's JSON goes to OUT_DIR/NAME.json and one line of OUT_DIR/results.jsonl; its table row
# is printed when it ends, the FP8/bf16 speed ratios after each pair. Every call has its own time
# limit, cut to what is left of DEADLINE seconds (default 570) so that the whole stays inside a
# 10-minute device call; a run with under 20 s left is skipped. PARTS (default "grpo gen hf")
# picks the sections, e.g. PARTS=grpo for the bench grpo pairs alone; SHAPES (default
# "small real") the bench grpo shapes, SEQS (default "256 8") the bench generate sizes; part
# "options" runs the small FP8-row shape once more with each developer control named in OPTIONS
# off (e.g. OPTIONS="streaming_lora_down"), part "kv" FP8-row with FP8 KV (after "grpo" and
# "gen", whose bf16-KV runs it is compared with), part "budget" --gpu-memory (below). REAL_GAS
# (default 1) trains the realistic shape's 128 completions in that many micro-batches (4 fits
# an 80 GB card); part "ppo" runs fp8rl bench ppo at the realistic shape (below).
set -u
PARTS=${PARTS:-grpo gen hf}
SHAPES=${SHAPES:-small real}
SEQS=${SEQS:-256 8}
part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
OUT_DIR=${1:-${OUT:-/tmp/fp8rl-gpu}}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT_DIR"
. "$(dirname "$0")/env.sh"
FP8RL="$BUILD/bin/fp8rl"
CONFIG=tools/bench/configs/qwen3-8b
: > "$OUT_DIR/results.jsonl"
start=$(date +%s)
DEADLINE=${DEADLINE:-570}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

# table row NAME RC SECONDS | table ratio NAME_FP8 NAME_BF16 | table adapter NAME_LORA NAME_BASE |
# table anchor NAME_FP8RL NAME_HF | table gain NAME NAME_WITHOUT_AN_OPTION |
# table peak NAME_PPO NAME_GRPO
table() {
  python3 - "$OUT_DIR" "$@" <<'PY'
import json, os, sys
out, what, a, b = sys.argv[1:5]


def load(name):
    path = os.path.join(out, name + ".json")
    if os.path.exists(path):
        return json.load(open(path))
    path = os.path.join(out, name + ".stdout")
    lines = [l for l in open(path) if l.startswith("{")] if os.path.exists(path) else []
    return json.loads(lines[-1]) if lines else None


def m(j, k):  # a bench grpo metric of the last step, or a top-level key
    return j.get("last_step/" + k, j.get(k, 0)) or 0


def tok_s(j):
    return j.get("output_tokens_per_second") or j.get("output_tokens_per_s") or \
        m(j, "rollout_tokens_per_second")


if what == "row":
    rc, secs = int(b), sys.argv[5]
    j = load(a) if rc == 0 else None
    if j is None:
        status = {124: "TIMEOUT", 125: "SKIPPED (no time left)"}.get(rc, f"FAILED rc={rc}")
        print(f"{a:<26} {status} after {secs} s (see {a}.log)")
        sys.exit(0)
    j["run"] = a
    open(os.path.join(out, "results.jsonl"), "a").write(json.dumps(j) + "\n")
    if j.get("command") == "bench grpo":
        print(f"{a:<26} rollout {m(j, 'timing/rollout_seconds'):6.2f} s  logprob "
              f"{m(j, 'timing/rollout_logprob_seconds'):5.2f} s  train "
              f"{m(j, 'timing/train_seconds'):6.2f} s  step {m(j, 'timing/step_seconds'):6.2f} s"
              f"  rollout {tok_s(j):7.0f} tok/s  |dlogp| "
              f"{m(j, 'sampling/sampling_logp_difference/mean'):.4f}  prob error "
              f"{m(j, 'sampling/token_prob_error/mean'):.4f}  ({secs} s)")
    elif j.get("command") == "bench ppo":
        gib = lambda k: m(j, "peak_memory_bytes/" + k) / 2**30
        print(f"{a:<26} rollout {m(j, 'timing/rollout_seconds'):6.2f} s ({gib('rollout'):.1f} GiB)"
              f"  logprob {m(j, 'timing/rollout_logprob_seconds'):5.2f} s"
              f" ({gib('rollout_logprob'):.1f})  value {m(j, 'timing/rollout_value_seconds'):5.2f}"
              f" s ({gib('rollout_value'):.1f})  policy train "
              f"{m(j, 'timing/policy_train_seconds'):6.2f} s  value train "
              f"{m(j, 'timing/value_train_seconds'):6.2f} s  optimizer "
              f"{m(j, 'timing/optimizer_seconds'):5.2f} s  train ({gib('train'):.1f} GiB)  step "
              f"{m(j, 'timing/step_seconds'):6.2f} s  peak {gib('step'):.1f} GiB  ({secs} s)")
    else:
        print(f"{a:<26} {tok_s(j):7.0f} output tok/s  lora_r {j.get('lora_r', 0)}  ({secs} s)")
elif what == "peak":  # a bench ppo run's peak over the bench grpo run's of its shape
    x, y = load(a), load(b)
    if x is None or y is None:
        sys.exit(0)
    ppo = m(x, "peak_memory_bytes/step")
    grpo = max(m(y, "peak_memory_bytes/rollout"), m(y, "peak_memory_bytes/train"))
    print(f"  peak {a} / {b}: {ppo / 2**30:.2f} / {grpo / 2**30:.2f} GiB = "
          f"x{ppo / (grpo or float('nan')):.3f} (target <= 1.15)")
else:
    x, y = load(a), load(b)
    if x is None or y is None:
        sys.exit(0)
    label = {"ratio": f"FP8-row / bf16 speed", "adapter": "tok/s with / without the adapter",
             "gain": f"speed of {a} / {b}",
             "anchor": f"tok/s {a} / {b}"}[what]
    if x.get("command") in ("bench grpo", "bench ppo"):
        t = lambda j, k: m(j, "timing/" + k) or float("nan")
        print(f"  {label}: rollout x{t(y, 'rollout_seconds') / t(x, 'rollout_seconds'):.3f}"
              f"  logprob x{t(y, 'rollout_logprob_seconds') / t(x, 'rollout_logprob_seconds'):.3f}"
              f"  train x{t(y, 'train_seconds') / t(x, 'train_seconds'):.3f}"
              f"  step x{t(y, 'step_seconds') / t(x, 'step_seconds'):.3f}")
    else:
        print(f"  {label}: x{tok_s(x) / (tok_s(y) or float('nan')):.3f}")
PY
}

# run NAME SECONDS CMD...: CMD under a time limit, stdout in NAME.stdout, stderr in NAME.log.
run() {
  local name=$1 secs=$2 t0 left
  shift 2
  t0=$(date +%s)
  left=$(( DEADLINE - (t0 - start) ))
  [ "$left" -lt "$secs" ] && secs=$left
  if [ "$secs" -lt 20 ]; then
    table row "$name" 125 0
    return
  fi
  timeout "$secs" "$@" > "$OUT_DIR/$name.stdout" 2> "$OUT_DIR/$name.log"
  table row "$name" $? $(( $(date +%s) - t0 ))
}

grpo="bench grpo --model $CONFIG --lora-r 32 --checkpointing --device cuda"
# The bench grpo flags of a shape.
dims_of() {
  case $1 in
    small) echo "--prompts 1 --generations 8 --prompt-tokens 128 --completion-tokens 512 \
             --steps 3 --kv-memory 1" ;;
    real) echo "--prompts 16 --generations 8 --prompt-tokens 256 --completion-tokens 768 \
            --steps 2 --kv-memory 24 --gradient-accumulation-steps ${REAL_GAS:-1}" ;;
  esac
}
part grpo && for shape in $SHAPES; do
  dims=$(dims_of $shape)
  for fp8 in row off; do
    run "grpo_${shape}_$fp8" 150 "$FP8RL" $grpo $dims --fp8 $fp8 \
      --out "$OUT_DIR/grpo_${shape}_$fp8.json"
  done
  table ratio "grpo_${shape}_row" "grpo_${shape}_off"
done

# Part "ppo": bench ppo at the realistic shape (its 128 responses in REAL_GAS micro-batches, as
# grpo_real's completions), FP8-row and bf16; the FP8-row peak beside grpo_real_row's when that
# JSON is in OUT_DIR (part grpo in this or an earlier call with the same OUT_DIR).
part ppo && {
  for fp8 in row off; do
    run "ppo_real_$fp8" 200 "$FP8RL" bench ppo --model $CONFIG --lora-r 32 --checkpointing \
      --device cuda $(dims_of real) --fp8 $fp8 --out "$OUT_DIR/ppo_real_$fp8.json"
  done
  table ratio "ppo_real_row" "ppo_real_off"
  table peak "ppo_real_row" "grpo_real_row"
}

# Each developer control of OPTIONS switched off in turn at the small shape, FP8-row: its
# gain is grpo_small_row's speed over grpo_small_row_no_KEY's.
part options && for key in ${OPTIONS:-}; do
  run "grpo_small_row_no_$key" 150 "$FP8RL" $grpo $(dims_of small) --fp8 row \
    --device-option "$key=false" --out "$OUT_DIR/grpo_small_row_no_$key.json"
  table gain "grpo_small_row" "grpo_small_row_no_$key"
done

gen="bench generate --model $CONFIG --prompt-tokens 128 --max-tokens 512 --kv-memory 40 \
  --device cuda"
part gen && for seqs in $SEQS; do
  prompts=$(( seqs / 8 ))
  for fp8 in row off; do
    for r in 32 0; do
      run "gen${seqs}_${fp8}_r$r" 90 "$FP8RL" $gen --prompts $prompts --n 8 --fp8 $fp8 \
        --lora-r $r --out "$OUT_DIR/gen${seqs}_${fp8}_r$r.json"
    done
    table adapter "gen${seqs}_${fp8}_r32" "gen${seqs}_${fp8}_r0"
  done
  table ratio "gen${seqs}_row_r32" "gen${seqs}_off_r32"
done

# FP8 KV (--kv-dtype fp8) beside bf16 KV, FP8-row weights: bench grpo at SHAPES (its rollout,
# and the mismatch against the trainer, which reads no cache) and bench generate at SEQS, r 32.
part kv && for shape in $SHAPES; do
  dims=$(dims_of $shape)
  run "grpo_${shape}_row_fp8kv" 150 "$FP8RL" $grpo $dims --fp8 row --kv-dtype fp8 \
    --out "$OUT_DIR/grpo_${shape}_row_fp8kv.json"
  table gain "grpo_${shape}_row_fp8kv" "grpo_${shape}_row"
done
part kv && for seqs in $SEQS; do
  run "gen${seqs}_row_r32_fp8kv" 90 "$FP8RL" bench generate --model $CONFIG --prompt-tokens 128 \
    --max-tokens 512 --kv-memory 40 --device cuda --prompts $(( seqs / 8 )) --n 8 --fp8 row \
    --lora-r 32 --kv-dtype fp8 --out "$OUT_DIR/gen${seqs}_row_r32_fp8kv.json"
  table gain "gen${seqs}_row_r32_fp8kv" "gen${seqs}_row_r32"
done

# Part "budget": the small FP8-row shape under --gpu-memory GIB for each of BUDGETS (default
# "16 11 4"), the KV pool sized from what the budget leaves: a budget that fits completes with
# both phases' peaks under it; one that does not stops before the first step (11) or before the
# weights load (4), with the error printed here.
part budget && for gib in ${BUDGETS:-16 11 4}; do
  small=$(dims_of small)
  run "grpo_small_row_budget$gib" 150 "$FP8RL" $grpo ${small/--kv-memory 1/} --fp8 row \
    --gpu-memory "$gib" --out "$OUT_DIR/grpo_small_row_budget$gib.json"
  [ -f "$OUT_DIR/grpo_small_row_budget$gib.json" ] && python3 -c "import json,sys; j=json.load(open(sys.argv[1])); \
print('  peaks GiB:', {k: round((j.get('last_step/' + k) or 0) / 2**30, 2) for k in ('peak_memory_bytes/rollout', 'peak_memory_bytes/train')})" \
    "$OUT_DIR/grpo_small_row_budget$gib.json"
  grep -h "error" "$OUT_DIR/grpo_small_row_budget$gib.log" | tail -1 | cut -c1-300
done

part hf && for rows in 8 128; do
  run "hf_peft_gen$rows" 150 python3 tools/bench/hf_generate.py --model "$CONFIG" \
    --prompts $(( rows / 8 )) --n 8 --prompt-tokens 128 --max-tokens 512 --lora-r 32
done
table anchor gen8_off_r32 hf_peft_gen8
table anchor gen8_row_r32 hf_peft_gen8
