#!/usr/bin/env bash
# The shared body of run_generate_goldens.sh and run_train_goldens.sh: runs a goldens script on
# the COMMITTED checkpoints in tests/data/goldens (which it only reads) and packs what it made
# into OUT_DIR/NAME_goldens.tar.gz (+ OUT_DIR/NAME_summary.json), refusing any file that would
# replace a committed one and an archive over MAX_MB.
#   bash tools/goldens/added_goldens.sh SCRIPT.py NAME MAX_MB OUT_DIR
set -euo pipefail
script=${1:?usage: added_goldens.sh SCRIPT.py NAME MAX_MB OUT_DIR}
name=${2:?} max_mb=${3:?} out=${4:?}
here=$(cd "$(dirname "$0")" && pwd)
goldens="$here/../../tests/data/goldens"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PYTHONUNBUFFERED=1 python3 "$here/$script" "$goldens" "$work/goldens"
# Nothing in the archive may replace a committed file.
(cd "$work/goldens" && find . -type f) | while read -r f; do
  if [ -e "$goldens/$f" ]; then echo "refusing: $f already committed" >&2; exit 1; fi
done
tar -czf "$out/${name}_goldens.tar.gz" -C "$work" goldens
cp "$work/goldens/${name}_summary.json" "$out/${name}_summary.json"
size=$(stat -c %s "$out/${name}_goldens.tar.gz")
echo "${name}_goldens.tar.gz: $size bytes"
if [ "$size" -gt $((max_mb * 1024 * 1024)) ]; then echo "archive over $max_mb MB" >&2; exit 1; fi
