#!/usr/bin/env bash
# Configures and builds fp8rl into build/ (Release). The CUDA backend is compiled when nvcc is
# found, for every GPU it runs on (A100, RTX 30, RTX 40 / L4, H100 / H200, RTX 50) unless
# CMAKE_CUDA_ARCHITECTURES is given (CI builds "90a" alone).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
archs=()
case " $* " in
  *CMAKE_CUDA_ARCHITECTURES*) ;;
  *) archs=(-DCMAKE_CUDA_ARCHITECTURES="80;86;89;90a;120") ;;
esac
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${archs[@]}" "$@" >/dev/null
cmake --build build -j"$(nproc)"
