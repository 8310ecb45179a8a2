// Which GPUs the CUDA backend runs on, and how each FP8 scheme's GEMMs run there, decided from
// the compute capability (and cuBLASLt's answers for the scaling modes) by plain functions, so
// that each decision is tested with a made-up capability on any machine. The backend asks at
// start and a command before its weights load: a GPU that cannot run the request is an error
// then, naming the GPU, its capability and what is missing, never a failed launch mid-run.
#pragma once

#include <string>
#include <string_view>

#include "formats/quant_config.h"

namespace fp8rl {

// What the decisions read of a GPU (cuda::Capabilities has it all, found at start).
struct GpuCapability {
  std::string name;
  int major = 0, minor = 0;
  // cuBLASLt's native FP8 scaling modes on this GPU: SCALAR_32F (per tensor), OUTER_VEC_32F
  // (per-row weights), BLK128x128_32F (128x128 blocks).
  bool fp8_tensor = false, fp8_outer = false, fp8_block = false;
};

// The lowest compute capability the kernels run on, as major * 10 + minor: the attention and
// the bf16 GEMMs need mma.sync on bf16 (sm_80).
inline constexpr int kMinComputeCapability = 80;

// How a scheme's GEMMs run: on the FP8 tensor cores with cuBLASLt's scaling mode, through the
// dequantize-to-bf16 fallback (slower, never wrong), or not at all (below sm_80).
enum class Fp8GemmPath { native, dequantized, none };
Fp8GemmPath fp8_gemm_path(Fp8Scheme scheme, const GpuCapability& gpu);

// Whether code built for CMake's CUDA_ARCHITECTURES `archs` (entries separated by ';', ',' or
// spaces: "90a", "89;90a;120", "80-real", "90-virtual") runs on compute capability
// major.minor: SASS for sm_XY on X.y with y >= Y, an arch-specific sm_XYa on X.Y alone; PTX
// (a plain or -virtual entry) on X.Y and later by JIT, compute_XYa on X.Y alone. "all",
// "all-major" and "native" are taken to run.
bool cuda_archs_run_on(std::string_view archs, int major, int minor);

// Empty when the backend built for `archs` runs on `gpu`; else why not, naming both.
std::string gpu_refusal(const GpuCapability& gpu, std::string_view archs);

// Empty when `scheme`'s GEMMs have a path on `gpu`; else the refusal naming the scheme and the
// capability it lacks.
std::string fp8_scheme_refusal(Fp8Scheme scheme, const GpuCapability& gpu);
// A one-line note when `scheme` runs on the dequantize-to-bf16 fallback on `gpu` (it has no
// native scaling mode for it); empty otherwise.
std::string fp8_scheme_note(Fp8Scheme scheme, const GpuCapability& gpu);

}  // namespace fp8rl
