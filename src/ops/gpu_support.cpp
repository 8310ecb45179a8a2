#include "ops/gpu_support.h"

#include <charconv>

#include <fmt/format.h>

#include "core/check.h"

namespace fp8rl {

namespace {

int capability(const GpuCapability& gpu) {
  return gpu.major * 10 + gpu.minor;
}

std::string gpu_text(const GpuCapability& gpu) {
  return fmt::format("GPU '{}' (compute capability {}.{})", gpu.name, gpu.major, gpu.minor);
}

// What a scheme's native GEMM needs, for the messages (the cuBLASLt documentation's list).
const char* native_need(Fp8Scheme scheme) {
  switch (scheme) {
    case Fp8Scheme::off:
      return "bf16 tensor cores, compute capability 8.0";
    case Fp8Scheme::tensor:
      return "FP8 tensor cores, compute capability 8.9";
    case Fp8Scheme::row:
    case Fp8Scheme::block:
      return "cuBLASLt's outer-vector and 128-block FP8 scaling, compute capability 9.0 with "
             "cuBLASLt 12.9";
  }
  return "?";
}

// One CUDA_ARCHITECTURES entry runs on major.minor (see cuda_archs_run_on).
bool arch_runs_on(std::string_view entry, int major, int minor) {
  if (entry == "all" || entry == "all-major" || entry == "native") return true;
  bool sass = true, ptx = true;
  if (entry.ends_with("-real")) {
    ptx = false;
    entry.remove_suffix(5);
  } else if (entry.ends_with("-virtual")) {
    sass = false;
    entry.remove_suffix(8);
  }
  int arch = 0;
  const auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), arch);
  if (ec != std::errc() || arch < 10) return false;
  const std::string_view suffix(end, size_t(entry.data() + entry.size() - end));
  const bool specific = suffix == "a";  // sm_90a: that chip alone
  const int cc = major * 10 + minor;
  if (specific) return cc == arch;
  const bool same_family = major == arch / 10 && minor >= arch % 10;
  return (sass && same_family) || (ptx && (suffix == "f" ? same_family : cc >= arch));
}

}  // namespace

Fp8GemmPath fp8_gemm_path(Fp8Scheme scheme, const GpuCapability& gpu) {
  if (capability(gpu) < kMinComputeCapability) return Fp8GemmPath::none;
  switch (scheme) {
    case Fp8Scheme::off:
      return Fp8GemmPath::native;
    case Fp8Scheme::tensor:
      return gpu.fp8_tensor ? Fp8GemmPath::native : Fp8GemmPath::dequantized;
    case Fp8Scheme::row:
      return gpu.fp8_outer ? Fp8GemmPath::native : Fp8GemmPath::dequantized;
    case Fp8Scheme::block:
      return gpu.fp8_block ? Fp8GemmPath::native : Fp8GemmPath::dequantized;
  }
  return Fp8GemmPath::none;
}

bool cuda_archs_run_on(std::string_view archs, int major, int minor) {
  size_t start = 0;
  while (start < archs.size()) {
    size_t end = archs.find_first_of(";, ", start);
    if (end == std::string_view::npos) end = archs.size();
    const std::string_view entry = archs.substr(start, end - start);
    if (!entry.empty() && arch_runs_on(entry, major, minor)) return true;
    start = end + 1;
  }
  return false;
}

std::string gpu_refusal(const GpuCapability& gpu, std::string_view archs) {
  if (capability(gpu) < kMinComputeCapability)
    return fmt::format(
        "{} is below what fp8rl's CUDA kernels need (compute capability {}.{}: mma.sync on "
        "bf16); run on the CPU (--device cpu) or on a newer GPU",
        gpu_text(gpu), kMinComputeCapability / 10, kMinComputeCapability % 10);
  if (!cuda_archs_run_on(archs, gpu.major, gpu.minor))
    return fmt::format(
        "{}: this fp8rl was built for CUDA architectures {} only, which do not run there; "
        "build with -DCMAKE_CUDA_ARCHITECTURES=\"{}{}\" (scripts/build.sh passes it on)",
        gpu_text(gpu), archs, gpu.major, gpu.minor);
  return {};
}

namespace {

struct Features {
  bool bf16_mma = false, fp8_mma = false, hopper = false;
};

Features features_of(int cc) {
  return {cc >= 80, cc >= 89, cc == 90};
}

}  // namespace

int parse_forced_capability(std::string_view text) {
  for (const int cc : {80, 86, 89, 90, 120})
    if (text == fmt::format("{}.{}", cc / 10, cc % 10)) return cc;
  RAISE(
      "FP8RL_CUDA_CAPABILITY='{}': expected one of 8.0, 8.6, 8.9, 9.0, 12.0 (the GPU whose code "
      "paths to take)",
      text);
}

int forced_capability_of(const char* environment_value) {
  if (environment_value == nullptr || *environment_value == 0) return 0;
  return parse_forced_capability(environment_value);
}

std::string forced_capability_refusal(const GpuCapability& gpu, int forced) {
  const Features have = features_of(capability(gpu)), need = features_of(forced);
  const char* missing = need.hopper && !have.hopper       ? "wgmma and the Hopper FP8 scaling modes"
                        : need.fp8_mma && !have.fp8_mma   ? "FP8 tensor cores"
                        : need.bf16_mma && !have.bf16_mma ? "bf16 tensor cores"
                                                          : nullptr;
  if (missing == nullptr) return {};
  return fmt::format(
      "FP8RL_CUDA_CAPABILITY={}.{}: {} cannot take that GPU's code paths (it lacks {})",
      forced / 10, forced % 10, gpu_text(gpu), missing);
}

GpuCapability as_capability(const GpuCapability& gpu, int forced) {
  GpuCapability g = gpu;
  const Features f = features_of(forced);
  g.name = fmt::format("{} as compute capability {}.{}", gpu.name, forced / 10, forced % 10);
  g.major = forced / 10;
  g.minor = forced % 10;
  g.fp8_tensor = gpu.fp8_tensor && f.fp8_mma;
  g.fp8_outer = gpu.fp8_outer && f.hopper;
  g.fp8_block = gpu.fp8_block && f.hopper;
  return g;
}

std::string fp8_scheme_refusal(Fp8Scheme scheme, const GpuCapability& gpu) {
  if (fp8_gemm_path(scheme, gpu) != Fp8GemmPath::none) return {};
  return fmt::format("--fp8 {}: {} has no path for these GEMMs (they need at least {})",
                     scheme_name(scheme), gpu_text(gpu), native_need(Fp8Scheme::off));
}

std::string fp8_scheme_note(Fp8Scheme scheme, const GpuCapability& gpu) {
  if (fp8_gemm_path(scheme, gpu) != Fp8GemmPath::dequantized) return {};
  return fmt::format(
      "note: --fp8 {} on {}: no native GEMM (that needs {}), its weights are dequantized to "
      "bf16 for each GEMM (the same results, slower)",
      scheme_name(scheme), gpu_text(gpu), native_need(scheme));
}

}  // namespace fp8rl
