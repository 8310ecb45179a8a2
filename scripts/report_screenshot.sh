#!/usr/bin/env bash
# For developers changing `fp8rl report` (src/cli/report.cpp, svg_chart.cpp): renders a run's
# report and screenshots it in headless Chromium at a desktop width (two charts per row) and a
# narrow one (one per row), to look at the layout as a browser draws it. Not part of the tests:
# CI has no browser; tests/cli/test_report.cpp checks the page's structure.
#   scripts/report_screenshot.sh [RUN_DIR] [OUT_DIR]
# RUN_DIR defaults to tests/data/report_run (40 steps of the demo's GRPO with evaluations every
# 10 steps, examples/demo.yaml); OUT_DIR to /tmp/fp8rl-report-shots. Writes OUT_DIR/report.html,
# OUT_DIR/wide.png (1280 px) and OUT_DIR/narrow.png (700 px). Environment: FP8RL (the binary;
# default build/src/cli/fp8rl, then build-demo/src/cli/fp8rl), CHROMIUM (the browser), HEIGHT
# (the screenshots' height in px, default 2000; a taller one shows the table and samples).
# Chromium on Debian / Ubuntu: apt-get install chromium (or chromium-browser).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
run_dir=${1:-$root/tests/data/report_run}
out_dir=${2:-/tmp/fp8rl-report-shots}
height=${HEIGHT:-2000}

fp8rl=${FP8RL:-}
if [ -z "$fp8rl" ]; then
  for candidate in "$root/build/src/cli/fp8rl" "$root/build-demo/src/cli/fp8rl"; do
    [ -x "$candidate" ] && { fp8rl=$candidate; break; }
  done
fi
[ -n "$fp8rl" ] && [ -x "$fp8rl" ] ||
  { echo "no fp8rl binary: build the fp8rl target (scripts/build.sh) or set FP8RL" >&2; exit 1; }

browser=${CHROMIUM:-}
if [ -z "$browser" ]; then
  for candidate in chromium chromium-browser google-chrome google-chrome-stable; do
    command -v "$candidate" >/dev/null && { browser=$candidate; break; }
  done
fi
[ -n "$browser" ] ||
  { echo "no Chromium: apt-get install chromium, or set CHROMIUM to a Chrome binary" >&2; exit 1; }

mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)  # for the file:// address
# The report goes to OUT_DIR: the run directory (a checked-in fixture) is left as it is.
"$fp8rl" report "$run_dir" --out "$out_dir/report.html"

profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
flags=(--headless --disable-gpu --hide-scrollbars --user-data-dir="$profile")
# Chromium's sandbox refuses to run as root (containers).
[ "$(id -u)" = 0 ] && flags+=(--no-sandbox)
for shot in wide:1280 narrow:700; do
  name=${shot%%:*} width=${shot#*:}
  "$browser" "${flags[@]}" --screenshot="$out_dir/$name.png" --window-size="$width,$height" \
    "file://$out_dir/report.html" >/dev/null 2>&1
  [ -s "$out_dir/$name.png" ] || { echo "$browser wrote no $out_dir/$name.png" >&2; exit 1; }
  echo "wrote $out_dir/$name.png (${width}x$height)"
done
