#include "ops/gpu_support.h"

#include <charconv>

#include <fmt/format.h>

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
