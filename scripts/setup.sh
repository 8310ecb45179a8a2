#!/usr/bin/env bash
# Installs what fp8rl needs to build and test on Debian 12 (run as root or with sudo).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
packages=(
  build-essential cmake pkg-config
  nlohmann-json3-dev libcli11-dev libpcre2-dev libfmt-dev libyaml-cpp-dev
  libgtest-dev googletest libbenchmark-dev
  python3-jinja2
  clang-15 libfuzzer-15-dev libomp-15-dev  # fuzz/run.sh: libFuzzer targets (clang's OpenMP)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js + npm run the tokenizer test peers; a machine may already have them from NodeSource
# (whose nodejs package conflicts with Debian's npm), so only the commands are checked.
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then missing+=(nodejs npm); fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
