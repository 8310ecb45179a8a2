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

// A forced capability (FP8RL_CUDA_CAPABILITY): the backend takes the paths of another GPU, so
// that one GPU runs and times the code every supported GPU would. "8.0", "8.6", "8.9", "9.0" or
// "12.0" as major * 10 + minor; anything else is an error naming the accepted values.
int parse_forced_capability(std::string_view text);
// The environment variable's value as above; 0 (the device's own) when unset or empty.
int forced_capability_of(const char* environment_value);
// Empty when `gpu` has every feature the paths of `forced` use (bf16 mma.sync from 8.0, e4m3
// mma.sync and cuBLASLt's per-tensor FP8 from 8.9, wgmma and the outer-vector and 128-block
// FP8 scaling on 9.0 alone), so that it can run them; else why not.
std::string forced_capability_refusal(const GpuCapability& gpu, int forced);
// `gpu` as the GPU of capability `forced` would be: its compute capability, and the FP8 scaling
// modes that one has (where `gpu` has them too). The name says it is forced.
GpuCapability as_capability(const GpuCapability& gpu, int forced);

// Empty when `scheme`'s GEMMs have a path on `gpu`; else the refusal naming the scheme and the
// capability it lacks.
std::string fp8_scheme_refusal(Fp8Scheme scheme, const GpuCapability& gpu);
// A one-line note when `scheme` runs on the dequantize-to-bf16 fallback on `gpu` (it has no
// native scaling mode for it); empty otherwise.
std::string fp8_scheme_note(Fp8Scheme scheme, const GpuCapability& gpu);

}  // namespace fp8rl
