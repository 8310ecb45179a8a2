// The CPU forward against HF transformers: fp32 logits and FP8 logits per scheme, for every
// architecture of tests/data/goldens (made by tools/goldens/make_goldens.py).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "formats/npy.h"
#include "model_test_util.h"
#include "tolerances.h"

using namespace fp8rl;
using namespace fp8rl::test;

namespace {

// The token ids of a golden: ids.json for fp32, ids_fp8_<scheme>.json for an FP8 scheme.
struct Case {
  std::string arch;
  std::string scheme;
};

class Golden : public ::testing::TestWithParam<Case> {};

TEST_P(Golden, LogitsMatchTransformers) {
  const Case& c = GetParam();
  LoadOptions opts;
  opts.fp8 = parse_scheme(c.scheme);
  const Model m = Model::load(golden_dir(c.arch), opts);
  const Tensor ours = prefill_logits(m, golden_ids(c.arch, c.scheme));
  const std::string file =
      c.scheme == "off" ? "logits_fp32.npy" : "logits_fp8_" + c.scheme + ".npy";
  const Tensor ref = read_npy(golden_dir(c.arch) + "/" + file);
  ASSERT_EQ(ours.shape(), ref.shape());
  const double bound = c.scheme == "off" ? kHfFp32Logits : kHfFp8Logits;
  const double err = rel_max_diff(ours, ref);
  EXPECT_LE(err, bound) << c.arch << " " << c.scheme;
  EXPECT_GE(top1_agreement(ours, ref), 0.95);
  std::printf("%s %s rel_max_diff %.3g top1 %.3f\n", c.arch.c_str(), c.scheme.c_str(), err,
              top1_agreement(ours, ref));
}

std::vector<Case> all_cases() {
  std::vector<Case> v;
  for (const char* a : {"llama", "qwen2", "qwen3", "mistral", "gemma3"})
    for (const char* s : {"off", "tensor", "row", "block"}) v.push_back({a, s});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllArchs, Golden, ::testing::ValuesIn(all_cases()), [](const auto& info) {
  return info.param.arch + "_" + info.param.scheme;
});

// Qwen3-MoE against HF (tools/goldens/make_goldens.py --only qwen3_moe): the same tiny random
// model as the Hub stores it (qwen3_moe: experts.E.{gate,up,down}_proj) and as transformers 5
// fuses it (qwen3_moe_fused: experts.gate_up_proj, experts.down_proj), fp32 logits only (the
// FP8 emulation of the goldens script covers nn.Linear modules, not fused experts).
class MoeGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeGolden, LogitsMatchTransformers) {
  const std::string arch = GetParam();
  if (!std::filesystem::exists(golden_dir(arch) + "/logits_fp32.npy"))
    GTEST_SKIP() << "no golden " << golden_dir(arch)
                 << ": make it with tools/goldens/run_moe_goldens.sh";
  const Model m = Model::load(golden_dir(arch));
  ASSERT_TRUE(m.config().has_moe());
  const Tensor ours = prefill_logits(m, golden_ids(arch));
  const Tensor ref = read_npy(golden_dir(arch) + "/logits_fp32.npy");
  const double err = rel_max_diff(ours, ref);
  EXPECT_LE(err, kHfFp32Logits) << arch;
  EXPECT_GE(top1_agreement(ours, ref), 0.95);
  std::printf("%s rel_max_diff %.3g\n", arch.c_str(), err);
  // Control: the routing matters at this bound (the same weights routed top-1).
  namespace fs = std::filesystem;
  const fs::path top1 =
      fs::temp_directory_path() / ("fp8rl_moe_top1_" + std::to_string(::getpid()));
  fs::remove_all(top1);
  fs::create_directories(top1);
  fs::create_symlink(fs::absolute(golden_dir(arch) + "/model.safetensors"),
                     top1 / "model.safetensors");
  nlohmann::json config = nlohmann::json::parse(std::ifstream(golden_dir(arch) + "/config.json"));
  ASSERT_GT(m.config().moe.top_k, 1);
  config["num_experts_per_tok"] = 1;
  std::ofstream(top1 / "config.json") << config.dump();
  const double off =
      rel_max_diff(prefill_logits(Model::load(top1.string()), golden_ids(arch)), ref);
  fs::remove_all(top1);
  EXPECT_GT(off, 100 * kHfFp32Logits) << arch;
}

INSTANTIATE_TEST_SUITE_P(Moe, MoeGolden, ::testing::Values("qwen3_moe", "qwen3_moe_fused"));

// The FP8 schemes really change the numbers (the test above would pass vacuously if the
// scheme were ignored): FP8 logits differ from fp32 by far more than the golden bound.
TEST(Golden, Fp8DiffersFromFp32) {
  const std::vector<int32_t> ids = golden_ids("llama");
  const Tensor fp32 = prefill_logits(Model::load(golden_dir("llama")), ids);
  LoadOptions opts;
  opts.fp8 = Fp8Scheme::row;
  const Tensor fp8 = prefill_logits(Model::load(golden_dir("llama"), opts), ids);
  EXPECT_GT(rel_max_diff(fp8, fp32), 5 * kHfFp8Logits);
}

// Softcapping against HF (tools/goldens/make_softcap_goldens.py: the gemma3 golden checkpoint
// with attn_logit_softcapping 0.05 and final_logit_softcapping set in its config). transformers
// applies only the final cap for Gemma 3 (its attention never reads the other; the summary in
// tests/data/goldens/softcap_summary.json records that cap's effect on HF's logits: 0), so
// neither must we. Control: the same checkpoint and ids without the final cap is far off.
TEST(Golden, SoftcappingMatchesTransformers) {
  const std::string dir = golden_dir("gemma3_softcap");
  const std::vector<int32_t> ids = golden_ids("gemma3_softcap");
  const Tensor ref = read_npy(dir + "/logits_fp32.npy");
  const Model m = Model::load(dir);
  EXPECT_EQ(m.config().attn_logit_softcapping, 0);  // 0.05 in config.json, not applied
  EXPECT_GT(m.config().final_logit_softcapping, 0);
  const Tensor ours = prefill_logits(m, ids);
  ASSERT_EQ(ours.shape(), ref.shape());
  const double err = rel_max_diff(ours, ref);
  EXPECT_LE(err, kHfFp32Logits);
  const double off = rel_max_diff(prefill_logits(Model::load(golden_dir("gemma3")), ids), ref);
  EXPECT_GT(off, 100 * kHfFp32Logits);
  std::printf("gemma3 softcap rel_max_diff %.3g (without the caps %.3g)\n", err, off);
}

// YaRN against HF: the qwen3_yarn golden (tools/goldens/make_goldens.py --only qwen3_yarn) is a
// tiny Qwen3 with rope_scaling yarn, factor 4 over 16 original positions, so that its 32-token
// sequence runs past them, and the default attention factor. Control: the same checkpoint with
// the rope scaling taken out of its config is far off.
TEST(Golden, YarnMatchesTransformers) {
  namespace fs = std::filesystem;
  const std::string dir = golden_dir("qwen3_yarn");
  if (!fs::exists(dir))
    GTEST_SKIP() << dir << " is not there: make it with `python3 tools/goldens/make_goldens.py "
                 << "OUT --only qwen3_yarn` (torch + transformers) and copy OUT/qwen3_yarn there";
  const std::vector<int32_t> ids = golden_ids("qwen3_yarn");
  const Model m = Model::load(dir);
  const RopeConfig& rope = m.config().layers[0].rope;
  ASSERT_EQ(int(rope.type), int(RopeConfig::Type::yarn));
  ASSERT_GT(int64_t(ids.size()), rope.original_max_position_embeddings);
  const Tensor ref = read_npy(dir + "/logits_fp32.npy");
  const Tensor ours = prefill_logits(m, ids);
  ASSERT_EQ(ours.shape(), ref.shape());
  const double err = rel_max_diff(ours, ref);
  EXPECT_LE(err, kHfFp32Logits);
  EXPECT_GE(top1_agreement(ours, ref), 0.95);

  const fs::path plain = fs::temp_directory_path() / ("fp8rl_yarn_" + std::to_string(::getpid()));
  fs::create_directories(plain);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (cfg.contains(key) && cfg[key].is_object()) {
      const double theta = cfg[key].value("rope_theta", cfg.value("rope_theta", 10000.0));
      cfg[key] = {{"rope_type", "default"}, {"rope_theta", theta}};
    }
  std::ofstream(plain / "config.json") << cfg.dump();
  fs::copy_file(dir + "/model.safetensors", plain / "model.safetensors");
  const double off = rel_max_diff(prefill_logits(Model::load(plain.string()), ids), ref);
  fs::remove_all(plain);
  EXPECT_GT(off, 100 * kHfFp32Logits);
  std::printf("qwen3 yarn rel_max_diff %.3g (without the rope scaling %.3g)\n", err, off);
}

}  // namespace
