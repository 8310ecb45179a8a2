// The memory budget's arithmetic and messages (ops/memory_budget.h), the plan's device ledger
// (ops/memory.h: PlannedDevice), and the GPU capability decisions (ops/gpu_support.h), all on
// the host with made-up numbers: what the CUDA backend and the commands decide from them.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "ops/gpu_support.h"
#include "ops/memory.h"
#include "ops/memory_budget.h"

namespace fp8rl {
namespace {

constexpr size_t kGiB = size_t(1) << 30;
constexpr size_t kMiB = size_t(1) << 20;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MemoryBudget, GpuMemoryRange) {
  EXPECT_EQ(gpu_memory_bytes("gpu_memory", 16), 16 * kGiB);
  EXPECT_EQ(gpu_memory_bytes("gpu_memory", 0.5), kGiB / 2);
  EXPECT_EQ(gpu_memory_bytes("gpu_memory", kMaxGpuMemoryGib), size_t(kMaxGpuMemoryGib) * kGiB);
  const std::string range = "is out of range (must be in (0, 4096] GiB";
  for (const double bad : {-1.0, 0.0, 4097.0, 1e12, std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::infinity()}) {
    const std::string e = error_of([&] { gpu_memory_bytes("--gpu-memory", bad); });
    EXPECT_NE(e.find("--gpu-memory = "), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find(range), std::string::npos) << bad << ": " << e;
  }
  EXPECT_NE(error_of([] { gpu_memory_bytes("gpu_memory", -1); }).find("gpu_memory = -1 is out"),
            std::string::npos);
}

TEST(MemoryBudget, ExcessNamesEveryPartAndTheAmountOver) {
  const std::vector<MemoryPart> parts = {
      {"weights", size_t(9.44 * double(kGiB))}, {"adapter", 0}, {"KV pool", 8 * kGiB}};
  EXPECT_EQ(memory_parts_total(parts), parts[0].bytes + parts[2].bytes);
  const std::string e = memory_budget_excess(16 * kGiB, parts, "lower --kv-memory");
  EXPECT_EQ(e,
            "gpu_memory 16.00 GiB: weights 9.44 GiB + KV pool 8.00 GiB = 17.44 GiB, 1.44 GiB "
            "over; lower --kv-memory");
  EXPECT_EQ(error_of([&] { check_memory_budget(16 * kGiB, parts, "lower --kv-memory"); }), e);
  EXPECT_EQ(memory_budget_left(16 * kGiB, parts), 0u);
  // Control: a budget they fit says nothing and leaves the difference.
  EXPECT_EQ(memory_budget_excess(18 * kGiB, parts, "x"), "");
  EXPECT_NO_THROW(check_memory_budget(18 * kGiB, parts, "x"));
  EXPECT_EQ(memory_budget_left(18 * kGiB, parts), 18 * kGiB - memory_parts_total(parts));
}

TEST(MemoryBudget, RefusalOfOneAllocation) {
  EXPECT_EQ(memory_budget_refusal(16 * kGiB, 15 * kGiB, 2 * kGiB),
            "gpu_memory 16.00 GiB: 15.00 GiB held, 2.00 GiB more asked for, 1.00 GiB over");
}

TEST(MemoryBudget, KvPoolFromWhatIsLeft) {
  const size_t usable = std::numeric_limits<size_t>::max();
  // No budget: a fraction of the free memory after the step plan.
  EXPECT_EQ(kv_pool_bytes_from_left(10 * kGiB, 2 * kGiB, 0.5, 0, usable), 4 * kGiB);
  // A budget of 16 GiB: all of what it leaves after the plan, less its margin (256 MiB).
  EXPECT_EQ(memory_budget_margin(16 * kGiB), 256 * kMiB);
  EXPECT_EQ(kv_pool_bytes_from_left(10 * kGiB, 2 * kGiB, 1.0, 16 * kGiB, usable),
            8 * kGiB - 256 * kMiB);
  // At most what max_num_seqs full sequences use, and nothing when nothing is left.
  EXPECT_EQ(kv_pool_bytes_from_left(10 * kGiB, 2 * kGiB, 1.0, 16 * kGiB, kGiB), kGiB);
  EXPECT_EQ(kv_pool_bytes_from_left(2 * kGiB, 2 * kGiB, 1.0, 16 * kGiB, usable), 0u);
  EXPECT_EQ(kv_pool_bytes_from_left(kGiB, 2 * kGiB, 0.9, 0, usable), 0u);
  // The margin stays between 64 and 512 MiB.
  EXPECT_EQ(memory_budget_margin(kGiB), 64 * kMiB);
  EXPECT_EQ(memory_budget_margin(141 * kGiB), 512 * kMiB);
}

// A plan without its device counts its planned buffers (and the scratch arena as reserved)
// against the budget it plans for: what the engine then sizes its KV pool from.
TEST(MemoryBudget, PlannedDeviceLedger) {
  Arena measuring = Arena::measuring(Device::cuda, 256);
  Context ctx{Device::cuda, &measuring};
  ctx.dry_run = true;
  PlannedDevice planned;
  ctx.planned = &planned;
  // Control: without a budget what is left is unknown.
  EXPECT_FALSE(ops::device_memory_left(ctx).has_value());
  planned.budget = 4 * kGiB;
  EXPECT_EQ(ops::device_memory_budget(ctx), 4 * kGiB);
  EXPECT_EQ(ops::device_memory_left(ctx), std::optional<size_t>(4 * kGiB));
  {
    DeviceBuffer a(ctx, kGiB);
    DeviceBuffer b = std::move(a);  // counted once
    EXPECT_EQ(planned.held, kGiB);
    ops::scratch_reserve(ctx, 256 * kMiB);
    ops::scratch_reserve(ctx, 128 * kMiB);  // an arena only grows
    EXPECT_EQ(planned.held, kGiB + 256 * kMiB);
    EXPECT_EQ(ops::device_memory_left(ctx), std::optional<size_t>(3 * kGiB - 256 * kMiB));
  }
  EXPECT_EQ(planned.held, 256 * kMiB);
  EXPECT_EQ(planned.peak, kGiB + 256 * kMiB);
  // Pinned host memory is not the device's.
  DeviceBuffer host = DeviceBuffer::pinned_host(ctx, kGiB);
  EXPECT_EQ(planned.held, 256 * kMiB);
  // The CPU has no device budget.
  Arena arena;
  const Context cpu{Device::cpu, &arena};
  EXPECT_FALSE(ops::device_memory_left(cpu).has_value());
  EXPECT_EQ(ops::device_memory_budget(cpu), 0u);
}

GpuCapability gpu(const char* name, int major, int minor, bool tensor, bool outer, bool block) {
  GpuCapability g;
  g.name = name;
  g.major = major;
  g.minor = minor;
  g.fp8_tensor = tensor;
  g.fp8_outer = outer;
  g.fp8_block = block;
  return g;
}

TEST(GpuSupport, CudaArchitecturesRunOn) {
  EXPECT_TRUE(cuda_archs_run_on("90a", 9, 0));
  EXPECT_FALSE(cuda_archs_run_on("90a", 8, 9));   // arch-specific: that chip alone
  EXPECT_FALSE(cuda_archs_run_on("90a", 10, 0));  // no PTX that JITs forward
  EXPECT_TRUE(cuda_archs_run_on("89;90a;120", 8, 9));
  EXPECT_TRUE(cuda_archs_run_on("89,90a,120", 12, 0));
  EXPECT_TRUE(cuda_archs_run_on("80", 8, 6));        // SASS within the family
  EXPECT_TRUE(cuda_archs_run_on("80", 9, 0));        // PTX by JIT
  EXPECT_FALSE(cuda_archs_run_on("80-real", 9, 0));  // SASS only
  EXPECT_TRUE(cuda_archs_run_on("80-real", 8, 9));   // same major, later minor
  EXPECT_FALSE(cuda_archs_run_on("86-real", 8, 0));  // SASS never runs on an earlier minor
  EXPECT_TRUE(cuda_archs_run_on("80-virtual", 12, 0));
  EXPECT_FALSE(cuda_archs_run_on("90-virtual", 8, 9));
  EXPECT_TRUE(cuda_archs_run_on("native", 7, 5));
  EXPECT_FALSE(cuda_archs_run_on("", 9, 0));
}

TEST(GpuSupport, GpuRefusedAtStartNamesWhatIsMissing) {
  const GpuCapability h100 = gpu("NVIDIA H100", 9, 0, true, true, true);
  const GpuCapability l4 = gpu("NVIDIA L4", 8, 9, true, false, false);
  const GpuCapability t4 = gpu("Tesla T4", 7, 5, false, false, false);
  EXPECT_EQ(gpu_refusal(h100, "90a"), "");  // control
  const std::string arch = gpu_refusal(l4, "90a");
  EXPECT_NE(arch.find("GPU 'NVIDIA L4' (compute capability 8.9)"), std::string::npos) << arch;
  EXPECT_NE(arch.find("built for CUDA architectures 90a only"), std::string::npos) << arch;
  EXPECT_NE(arch.find("-DCMAKE_CUDA_ARCHITECTURES=\"89\""), std::string::npos) << arch;
  EXPECT_EQ(gpu_refusal(l4, "89;90a"), "");
  const std::string old = gpu_refusal(t4, "75;90a");
  EXPECT_NE(old.find("'Tesla T4' (compute capability 7.5) is below"), std::string::npos) << old;
  EXPECT_NE(old.find("compute capability 8.0"), std::string::npos) << old;
}

TEST(GpuSupport, SchemePathsAndRefusals) {
  const GpuCapability h100 = gpu("NVIDIA H100", 9, 0, true, true, true);
  const GpuCapability l4 = gpu("NVIDIA L4", 8, 9, true, false, false);
  const GpuCapability a100 = gpu("NVIDIA A100", 8, 0, false, false, false);
  const GpuCapability t4 = gpu("Tesla T4", 7, 5, false, false, false);
  for (const Fp8Scheme s : {Fp8Scheme::off, Fp8Scheme::tensor, Fp8Scheme::row, Fp8Scheme::block}) {
    EXPECT_EQ(fp8_gemm_path(s, h100), Fp8GemmPath::native);
    EXPECT_EQ(fp8_scheme_refusal(s, h100), "");
    EXPECT_EQ(fp8_scheme_note(s, h100), "");
    EXPECT_EQ(fp8_gemm_path(s, t4), Fp8GemmPath::none);
  }
  EXPECT_EQ(fp8_gemm_path(Fp8Scheme::tensor, l4), Fp8GemmPath::native);
  EXPECT_EQ(fp8_gemm_path(Fp8Scheme::block, l4), Fp8GemmPath::dequantized);
  EXPECT_EQ(fp8_gemm_path(Fp8Scheme::row, a100), Fp8GemmPath::dequantized);
  EXPECT_EQ(fp8_gemm_path(Fp8Scheme::off, a100), Fp8GemmPath::native);
  const std::string refusal = fp8_scheme_refusal(Fp8Scheme::block, t4);
  EXPECT_NE(refusal.find("--fp8 block: GPU 'Tesla T4' (compute capability 7.5) has no path"),
            std::string::npos)
      << refusal;
  EXPECT_EQ(fp8_scheme_refusal(Fp8Scheme::block, l4), "");  // control: the fallback runs
  const std::string note = fp8_scheme_note(Fp8Scheme::block, l4);
  EXPECT_NE(note.find("--fp8 block on GPU 'NVIDIA L4' (compute capability 8.9): no native"),
            std::string::npos)
      << note;
  EXPECT_NE(note.find("compute capability 9.0"), std::string::npos) << note;
}

// FP8RL_CUDA_CAPABILITY: an H100 takes another GPU's paths, which every later decision reads.
TEST(GpuSupport, ForcedCapabilityTakesThatGpusPaths) {
  EXPECT_EQ(forced_capability_of(nullptr), 0);
  EXPECT_EQ(forced_capability_of(""), 0);
  EXPECT_EQ(forced_capability_of("8.9"), 89);
  EXPECT_EQ(forced_capability_of("12.0"), 120);
  for (const char* bad : {"89", "7.5", "10.0", "9", "sm_89", "8.9 "}) {
    try {
      forced_capability_of(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected one of 8.0, 8.6, 8.9, 9.0, 12.0"),
                std::string::npos)
          << e.what();
    }
  }
  const GpuCapability h100 = gpu("NVIDIA H100", 9, 0, true, true, true);
  const GpuCapability l4 = gpu("NVIDIA L4", 8, 9, true, false, false);
  for (const int cc : {80, 86, 89, 90, 120}) EXPECT_EQ(forced_capability_refusal(h100, cc), "");
  EXPECT_EQ(forced_capability_refusal(l4, 80), "");
  const std::string up = forced_capability_refusal(l4, 90);
  EXPECT_NE(up.find("FP8RL_CUDA_CAPABILITY=9.0: GPU 'NVIDIA L4' (compute capability 8.9) cannot "
                    "take that GPU's code paths (it lacks wgmma"),
            std::string::npos)
      << up;
  EXPECT_NE(forced_capability_refusal(gpu("A100", 8, 0, false, false, false), 120)
                .find("it lacks FP8 tensor cores"),
            std::string::npos);

  const GpuCapability as_l4 = as_capability(h100, 89);
  EXPECT_EQ(as_l4.name, "NVIDIA H100 as compute capability 8.9");
  EXPECT_EQ(as_l4.major * 10 + as_l4.minor, 89);
  EXPECT_EQ(fp8_gemm_path(Fp8Scheme::tensor, as_l4), Fp8GemmPath::native);
  EXPECT_EQ(fp8_gemm_path(Fp8Scheme::row, as_l4), Fp8GemmPath::dequantized);
  EXPECT_EQ(fp8_gemm_path(Fp8Scheme::tensor, as_capability(h100, 120)), Fp8GemmPath::native);
  EXPECT_EQ(fp8_gemm_path(Fp8Scheme::block, as_capability(h100, 120)), Fp8GemmPath::dequantized);
  EXPECT_EQ(fp8_gemm_path(Fp8Scheme::tensor, as_capability(h100, 80)), Fp8GemmPath::dequantized);
  EXPECT_EQ(fp8_gemm_path(Fp8Scheme::row, as_capability(h100, 90)), Fp8GemmPath::native);
  // The build's architectures are checked against the real GPU: forcing 8.0 on an sm_90a build
  // is not refused for the build (the H100 runs its sm_90a code).
  EXPECT_EQ(gpu_refusal(h100, "90a"), "");
}

}  // namespace
}  // namespace fp8rl
