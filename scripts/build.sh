#!/usr/bin/env bash
# Configures and builds fp8rl into build/ (Release). The CUDA backend is compiled when nvcc is
# found, for every GPU it runs on (A100, RTX 30, RTX 40 / L4, H100 / H200, RTX 50) unless
# CMAKE_CUDA_ARCHITECTURES is given (CI builds "90a" alone).
#
#   scripts/build.sh [-DOPTION=VALUE ...] [TARGET ...]   (no target: everything)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
options=()
targets=()
for a in "$@"; do
  case "$a" in
    -*) options+=("$a") ;;
    *) targets+=(--target "$a") ;;
  esac
done
case " ${options[*]:-} " in
  *CMAKE_CUDA_ARCHITECTURES*) ;;
  *) options+=(-DCMAKE_CUDA_ARCHITECTURES="80;86;89;90a;120") ;;
esac
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${options[@]}" >/dev/null
cmake --build build -j"$(nproc)" "${targets[@]}"
