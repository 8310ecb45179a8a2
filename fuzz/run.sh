#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (FP8RL_FUZZ=ON: clang-15, ASan + UBSan, CPU only) in
# their own folder and runs each on its corpus: the seeds fuzz/make_corpus.py builds from the
# repository's files, the committed seeds (fuzz/corpus/<name>/) and every kept finding
# (fuzz/regressions/<name>/), which are run first.
#
#   fuzz/run.sh [--smoke|--long|--build] [TARGET ...]   default: --smoke, every target
#     --smoke   about 30 s per target (-max_total_time), what CI runs
#     --long    1,000,000 executions per target (-runs)
#     --build   build only
#   TARGET: fuzz_npy or npy; FUZZ_ARGS="-only_ascii=1 ..." adds libFuzzer flags.
#   FP8RL_FUZZ_BUILD_DIR=DIR  build folder (default: <repo>/build-fuzz)
#   FP8RL_FUZZ_JOBS=N         parallel build jobs (default: 2)
#   FP8RL_FUZZ_SECONDS=S      smoke time per target (default: 30)
#   FP8RL_FUZZ_PARALLEL=N     targets run at once (default: the number of cores)
#
# A finding (crash, sanitizer report, uncaught exception, timeout, out of memory) stops its
# target, leaves the input in DIR/findings/<name>/ and makes the script exit 1; the other
# targets still run. Each target prints one summary line: executions, seconds, result.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FP8RL_FUZZ_BUILD_DIR:-$root/build-fuzz}"
jobs="${FP8RL_FUZZ_JOBS:-2}"
mode=smoke
case "${1:-}" in
  --smoke) mode=smoke; shift ;;
  --long) mode=long; shift ;;
  --build) mode=build; shift ;;
  -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
esac

all=()
for f in "$root"/fuzz/fuzz_*.cpp; do all+=("$(basename "$f" .cpp)"); done
targets=()
for t in "$@"; do targets+=("fuzz_${t#fuzz_}"); done
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")

# Release-like code (-O2) with debug lines for readable reports.
cmake -S "$root" -B "$build" -DFP8RL_FUZZ=ON -DFP8RL_WITH_CUDA=OFF -DFP8RL_TESTS=OFF \
  -DFP8RL_BENCH=OFF -DCMAKE_CXX_COMPILER=clang++-15 -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$jobs" --target "${targets[@]}"
[ "$mode" = build ] && exit 0

rm -rf "$build/seeds"
python3 "$root/fuzz/make_corpus.py" "$build/seeds"

case "$mode" in
  smoke) limit=(-max_total_time="${FP8RL_FUZZ_SECONDS:-30}") ;;
  long) limit=(-runs=1000000) ;;
esac
# Leaks are findings too; a sanitizer report aborts so that libFuzzer keeps the input.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

# One target per core at a time: each libFuzzer process is single-threaded, so the smoke's wall
# time is its per-target time times the targets over the cores.
run_target() {
  local t=$1 name="${1#fuzz_}" start secs runs rc=0
  local corpus=("$build/corpus/$name")
  mkdir -p "$build/corpus/$name" "$build/findings/$name"
  for d in "$build/seeds/$name" "$root/fuzz/corpus/$name" "$root/fuzz/regressions/$name"; do
    [ -d "$d" ] && corpus+=("$d")
  done
  local log="$build/findings/$name.log" result="$build/findings/$name.result"
  start=$(date +%s)
  # -timeout: no input of these parsers needs seconds; -rss_limit_mb: nor gigabytes.
  "$build/fuzz/$t" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/findings/$name/" ${FUZZ_ARGS:-} "${corpus[@]}" >"$log" 2>&1 || rc=$?
  secs=$(($(date +%s) - start))
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  if [ $rc -eq 0 ]; then
    echo "run.sh: $t: ${runs:-?} executions in ${secs} s, no finding" >"$result"
  else
    {
      echo "run.sh: $t: FINDING after ${runs:-?} executions in ${secs} s (exit $rc); log: $log"
      grep -E "^(==[0-9]+==ERROR|SUMMARY|.*runtime error|artifact_prefix|Test unit written)" "$log" \
        | head -n 8 || true
    } >"$result"
    return 1
  fi
}

status=0
parallel="${FP8RL_FUZZ_PARALLEL:-$(nproc)}"
running=0
for t in "${targets[@]}"; do
  run_target "$t" &
  running=$((running + 1))
  if [ $running -ge "$parallel" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
done
while [ $running -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
for t in "${targets[@]}"; do
  result="$build/findings/${t#fuzz_}.result"
  if grep -q FINDING "$result"; then cat "$result" >&2; else cat "$result"; fi
done
exit $status
