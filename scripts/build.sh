#!/usr/bin/env bash
# Configures and builds fp8rl into build/ (Release). The CUDA backend is compiled when nvcc is
# found (for sm_90a unless CMAKE_CUDA_ARCHITECTURES is given, e.g. "89;90a;120").
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
