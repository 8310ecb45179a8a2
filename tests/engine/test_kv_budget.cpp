// The engine's KV pool under a device memory budget, planned without a device (a dry-run CUDA
// context whose planned buffers count against the budget, as `--dry-run --gpu-memory` plans):
// the pool takes what the budget leaves after the weights and the step plan, less the margin.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/check.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/presets.h"
#include "ops/memory.h"
#include "ops/memory_budget.h"

namespace fp8rl {
namespace {

constexpr size_t kGiB = size_t(1) << 30;

struct PlannedRun {
  Arena measuring = Arena::measuring(Device::cuda, 256);
  PlannedDevice planned;
  Context ctx{Device::cuda, &measuring};
  Model model;
  explicit PlannedRun(size_t budget)
      : model([&] {
          ctx.dry_run = true;
          planned.budget = budget;
          ctx.planned = &planned;
          Model m =
              Model::random(preset_config("qwen3-8b"), Fp8Scheme::row, ctx, 0, true, DType::bf16);
          m.to_device(ctx);
          return m;
        }()) {}
};

TEST(KvBudget, PoolTakesWhatTheBudgetLeaves) {
  PlannedRun run(16 * kGiB);
  const size_t weights = run.planned.held;
  EXPECT_GT(weights, 8 * kGiB);  // Qwen3-8B in FP8-row, embeddings and lm_head in bf16
  EXPECT_LT(weights, 11 * kGiB);
  EngineOptions eo;
  eo.max_num_batched_tokens = 1024;
  Engine engine(run.ctx, run.model, nullptr, nullptr, {}, eo);
  const EngineStats& s = engine.stats();
  const size_t block = s.kv_bytes / size_t(s.kv_blocks + 1);
  // Everything the plan holds now (weights, the engine's buffers, the scratch arena, the pool)
  // leaves the budget's margin, to a block or two (the pool is whole blocks, plus the null
  // block).
  const size_t left = 16 * kGiB - run.planned.held;
  const size_t margin = memory_budget_margin(16 * kGiB);
  EXPECT_LE(left, margin + 2 * block) << left;
  EXPECT_GE(left + 2 * block, margin) << left;
  EXPECT_GT(s.kv_bytes, 4 * kGiB);
}

TEST(KvBudget, WithoutABudgetThePlanTakesWhatTheSequencesCanUse) {
  // Control: no budget, no device, so what is left is unknown: the pool is what max_num_seqs
  // sequences of the full context hold (far more than any budget here).
  PlannedRun run(0);
  EngineOptions eo;
  eo.max_num_batched_tokens = 1024;
  Engine engine(run.ctx, run.model, nullptr, nullptr, {}, eo);
  EXPECT_GT(engine.stats().kv_bytes, 100 * kGiB);
}

TEST(KvBudget, AFractionAndAnExplicitSize) {
  PlannedRun half(16 * kGiB), full(16 * kGiB), fixed(16 * kGiB);
  EngineOptions eo;
  eo.max_num_batched_tokens = 1024;
  const size_t whole = Engine(full.ctx, full.model, nullptr, nullptr, {}, eo).stats().kv_bytes;
  eo.kv_memory_fraction = 0.5;
  const size_t part = Engine(half.ctx, half.model, nullptr, nullptr, {}, eo).stats().kv_bytes;
  EXPECT_NEAR(double(part), 0.5 * double(whole), double(whole) * 0.01);
  eo.kv_memory_fraction.reset();
  eo.kv_memory_bytes = kGiB;
  const size_t given = Engine(fixed.ctx, fixed.model, nullptr, nullptr, {}, eo).stats().kv_bytes;
  EXPECT_LE(given, kGiB + kGiB / 100);
}

TEST(KvBudget, AGivenSizeBeyondTheBudgetIsAClearError) {
  PlannedRun run(16 * kGiB);
  EngineOptions eo;
  eo.max_num_batched_tokens = 1024;
  eo.kv_memory_bytes = 8 * kGiB;  // beside 8.8 GiB of weights
  try {
    Engine engine(run.ctx, run.model, nullptr, nullptr, {}, eo);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("engine: gpu_memory 16.00 GiB: a KV pool of 8.00 GiB (kv_memory) and the "
                     "step plan ("),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("lower kv_memory"), std::string::npos) << m;
  }
  // Control: a size that fits is taken as given.
  PlannedRun fits(16 * kGiB);
  eo.kv_memory_bytes = 4 * kGiB;
  EXPECT_LE(Engine(fits.ctx, fits.model, nullptr, nullptr, {}, eo).stats().kv_bytes,
            4 * kGiB + kGiB / 100);
}

TEST(KvBudget, NoRoomForOneBlockIsAClearError) {
  PlannedRun run(9 * kGiB);  // about the weights alone
  EngineOptions eo;
  eo.max_num_batched_tokens = 1024;
  try {
    Engine engine(run.ctx, run.model, nullptr, nullptr, {}, eo);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("engine: gpu_memory 9.00 GiB leaves"), std::string::npos) << m;
    EXPECT_NE(m.find("give a larger --gpu-memory"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace fp8rl
