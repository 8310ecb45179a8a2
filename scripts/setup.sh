#!/usr/bin/env bash
# Installs what fp8rl needs to build and test on Debian 12 (run as root or with sudo).
#   scripts/setup.sh             everything: the tests, benchmarks, fuzzers and npm peers too
#   scripts/setup.sh --minimal   only what the fp8rl binary (a CPU build) and the demo need
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
minimal=0
[ "${1:-}" = "--minimal" ] && minimal=1
packages=(
  build-essential cmake pkg-config
  nlohmann-json3-dev libcli11-dev libpcre2-dev libfmt-dev libyaml-cpp-dev
  libprotobuf-dev protobuf-compiler libisal-dev  # TensorBoard event files (report_to)
  libedit-dev  # fp8rl chat: line editing and history at a terminal
  libcpp-httplib-dev  # fp8rl serve: the HTTP server
  python3  # the demo's summary and its held-out evaluation (tools/demo/eval_demo_model.py)
)
if [ $minimal -eq 0 ]; then
  packages+=(
    libgtest-dev googletest libbenchmark-dev
    python3-jinja2
    clang-15 libfuzzer-15-dev libomp-15-dev  # fuzz/run.sh: libFuzzer targets (clang's OpenMP)
    lld  # links the test binaries about 3x faster than GNU ld (CMakeLists.txt)
  )
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js + npm run the tokenizer test peers; a machine may already have them from NodeSource
# (whose nodejs package conflicts with Debian's npm), so only the commands are checked.
if [ $minimal -eq 0 ] && { ! command -v npm >/dev/null || ! command -v node >/dev/null; }; then
  missing+=(nodejs npm)
fi
# The minimal set skips recommended packages: the build needs none of them, and they are most
# of what a fresh machine would download.
apt_flags=(-y -qq)
[ $minimal -eq 1 ] && apt_flags+=(--no-install-recommends)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install "${apt_flags[@]}" "${missing[@]}" >/dev/null
fi
