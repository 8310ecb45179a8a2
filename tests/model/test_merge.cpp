// fp8rl merge: W' = W + scale * B A written as a checkpoint (f32, bf16, or FP8 through the
// quantize writer) against the unmerged adapter's fp32 forward, and the output directory rules.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "model/merge.h"
#include "model/quantize.h"
#include "model_test_util.h"
#include "quant/fp8.h"
#include "tolerances.h"

using namespace fp8rl;
using namespace fp8rl::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const char* const kArchs[] = {"llama", "qwen2", "qwen3", "mistral", "gemma3"};

std::string temp_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("fp8rl_merge_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

// The golden's ids through the base model with its committed adapter (PEFT's unmerged form,
// fp32 CPU).
Tensor unmerged_logits(const Model& base, const LoraAdapter& adapter,
                       const std::vector<int32_t>& ids) {
  return prefill_logits(base, ids, false, &adapter);
}

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    return;
  }
  ADD_FAILURE() << "no error; expected one containing: " << part;
}

// The fp64 merge of one projection from the base checkpoint and the adapter's masters.
std::vector<double> fp64_merge(const Model& base, const LoraAdapter& adapter, int64_t layer,
                               int p) {
  const Linear& lin = *base.layers[size_t(layer)].projection(p);
  const int64_t n = lin.out_features(), k = lin.in_features();
  std::vector<double> w(size_t(n * k));
  for (int64_t i = 0; i < n * k; ++i)
    w[size_t(i)] = load_as_f32(lin.weight.data, lin.weight.dtype, size_t(i));
  if (!adapter.targeted(layer, p)) return w;
  const TensorView a = adapter.master_a(layer, p), b = adapter.master_b(layer, p);
  const int64_t r = a.dim(0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < k; ++c) {
      double s = 0;
      for (int64_t j = 0; j < r; ++j)
        s += double(b.ptr<float>()[i * r + j]) * a.ptr<float>()[j * k + c];
      w[size_t(i * k + c)] += adapter.config().scale() * s;
    }
  return w;
}

TEST(Merge, F32MergeEqualsTheUnmergedAdapter) {
  for (const char* arch : kArchs) {
    SCOPED_TRACE(arch);
    Model base = load_model(golden_dir(arch));
    const LoraAdapter adapter = LoraAdapter::load_peft(golden_dir(arch) + "/adapter", base);
    const std::vector<int32_t> ids = golden_ids(arch);
    const Tensor ref = unmerged_logits(base, adapter, ids);

    const std::string out = temp_dir(std::string("f32_") + arch);
    MergeOptions o;
    o.dtype = DType::f32;
    write_merged_checkpoint(base, adapter, out, o);
    const Model merged = load_model(out);
    const double d = rel_max_diff(prefill_logits(merged, ids), ref);
    EXPECT_LE(d, kMergeF32Logits);
    // Negative control: without the adapter the logits are far outside the bound.
    const double off = rel_max_diff(prefill_logits(base, ids), ref);
    EXPECT_GT(off, 100 * kMergeF32Logits);
    std::printf("%s f32 merge %.3g (no adapter %.3g)\n", arch, d, off);

    EXPECT_EQ(read_json(out + "/config.json").value("dtype", ""), "float32");
    EXPECT_FALSE(read_json(out + "/config.json").contains("quantization_config"));
    EXPECT_TRUE(fs::exists(out + "/generation_config.json"));
    // Every merged weight is the fp64 merge rounded once to fp32.
    for (int64_t l = 0; l < base.config().num_layers; ++l)
      for (int p = 0; p < 7; ++p) {
        const std::vector<double> w = fp64_merge(base, adapter, l, p);
        const TensorView got = merged.layers[size_t(l)].projection(p)->weight;
        ASSERT_EQ(got.dtype, DType::f32);
        for (int64_t i = 0; i < got.numel(); ++i)
          ASSERT_LE(std::fabs(got.ptr<float>()[i] - w[size_t(i)]),
                    kF32Eps * std::fabs(w[size_t(i)]))
              << projection_path(l, p) << " element " << i;
      }
    fs::remove_all(out);
  }
}

TEST(Merge, Bf16MergeWithinItsRoundingBound) {
  for (const char* arch : kArchs) {
    SCOPED_TRACE(arch);
    Model base = load_model(golden_dir(arch));
    const LoraAdapter adapter = LoraAdapter::load_peft(golden_dir(arch) + "/adapter", base);
    const std::vector<int32_t> ids = golden_ids(arch);
    const Tensor ref = unmerged_logits(base, adapter, ids);

    const std::string out = temp_dir(std::string("bf16_") + arch);
    write_merged_checkpoint(base, adapter, out);
    const Model merged = load_model(out);
    EXPECT_EQ(read_json(out + "/config.json").value("dtype", ""), "bfloat16");
    for (const std::string& name : merged.checkpoint().names())
      EXPECT_EQ(merged.checkpoint().info(name).dtype, DType::bf16) << name;
    const double d = rel_max_diff(prefill_logits(merged, ids), ref);
    EXPECT_LE(d, kMergeBf16Logits);
    const double off = rel_max_diff(prefill_logits(base, ids), ref);
    EXPECT_GT(off, kMergeBf16Logits);
    std::printf("%s bf16 merge %.3g (no adapter %.3g)\n", arch, d, off);
    // Each merged weight is the fp64 merge rounded to bf16 (fp32 first): within half an ulp.
    for (int64_t l = 0; l < base.config().num_layers; ++l)
      for (int p = 0; p < 7; ++p) {
        const std::vector<double> w = fp64_merge(base, adapter, l, p);
        const TensorView got = merged.layers[size_t(l)].projection(p)->weight;
        for (int64_t i = 0; i < got.numel(); ++i)
          ASSERT_LE(std::fabs(load_as_f32(got.data, got.dtype, size_t(i)) - w[size_t(i)]),
                    (kBf16UnitRoundoff + kF32Eps) * std::fabs(w[size_t(i)]))
              << projection_path(l, p) << " element " << i;
      }
    fs::remove_all(out);
  }
}

TEST(Merge, Fp8RowIsTheQuantizedF32Merge) {
  for (const char* arch : kArchs) {
    SCOPED_TRACE(arch);
    Model base = load_model(golden_dir(arch));
    const LoraAdapter adapter = LoraAdapter::load_peft(golden_dir(arch) + "/adapter", base);
    const std::vector<int32_t> ids = golden_ids(arch, "row");
    const Tensor ref = unmerged_logits(base, adapter, ids);

    const std::string out = temp_dir(std::string("fp8_") + arch);
    MergeOptions o;
    o.fp8 = Fp8Scheme::row;
    write_merged_checkpoint(base, adapter, out, o);
    const Model merged = load_model(out);  // as stored: FP8
    ASSERT_TRUE(merged.prequantized());
    EXPECT_EQ(merged.scheme(), Fp8Scheme::row);
    EXPECT_EQ(read_json(out + "/config.json")["quantization_config"].value("quant_method", ""),
              "compressed-tensors");
    EXPECT_FALSE(fs::exists(out + "/.staging"));

    // The same as quantizing the exact f32 merge on load: the codes come from the f32 merge,
    // not from a bf16 rounding of it.
    const std::string f32 = temp_dir(std::string("fp8ref_") + arch);
    MergeOptions of32;
    of32.dtype = DType::f32;
    write_merged_checkpoint(base, adapter, f32, of32);
    const Model requant = load_model(f32, Fp8Scheme::row);
    const Tensor got = prefill_logits(merged, ids);
    const Tensor want = prefill_logits(requant, ids);
    EXPECT_EQ(rel_max_diff(got, want), 0.0);

    // Against the unmerged fp32 adapter: the FP8 error of the merged model is that of the
    // base in FP8 (kMergeFp8Ratio); without the adapter the FP8 model is further away.
    const double d = rel_max_diff(got, ref);
    const double d_base =
        rel_max_diff(prefill_logits(load_model(golden_dir(arch), Fp8Scheme::row), ids),
                     prefill_logits(base, ids));
    const double off =
        rel_max_diff(prefill_logits(load_model(golden_dir(arch), Fp8Scheme::row), ids), ref);
    std::printf("%s fp8 row merge %.3g (base fp8 effect %.3g, fp8 without adapter %.3g)\n", arch, d,
                d_base, off);
    EXPECT_LE(d, kMergeFp8Ratio * d_base);
    EXPECT_GT(off, d);
    fs::remove_all(out);
    fs::remove_all(f32);
  }
}

TEST(Merge, Fp8BaseIsDequantizedThenMerged) {
  const std::string fp8 = temp_dir("fp8base");
  write_fp8_checkpoint(load_model(golden_dir("qwen2"), Fp8Scheme::block), fp8,
                       Fp8Format::compressed_tensors);
  const Model base = load_model(fp8);
  ASSERT_TRUE(base.prequantized());
  const LoraAdapter adapter = LoraAdapter::load_peft(golden_dir("qwen2") + "/adapter", base);
  const std::string out = temp_dir("fp8base_out");
  MergeOptions o;
  o.dtype = DType::f32;
  write_merged_checkpoint(base, adapter, out, o);
  const Model merged = load_model(out);
  EXPECT_FALSE(merged.prequantized());
  EXPECT_FALSE(read_json(out + "/config.json").contains("quantization_config"));
  for (const std::string& name : merged.checkpoint().names())
    EXPECT_EQ(name.find("weight_scale"), std::string::npos) << name;
  for (int p = 0; p < 7; ++p) {
    const Linear& lin = *base.layers[1].projection(p);
    Tensor deq = Tensor::empty(lin.weight.shape, DType::f32);
    dequantize_weight(lin.weight, lin.scheme, lin.scales, deq);
    const TensorView got = merged.layers[1].projection(p)->weight;
    const TensorView a = adapter.master_a(1, p), b = adapter.master_b(1, p);
    const int64_t k = got.dim(1), r = a.dim(0);
    double moved = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      double s = 0;
      for (int64_t j = 0; j < r; ++j)
        s += double(b.ptr<float>()[(i / k) * r + j]) * a.ptr<float>()[j * k + i % k];
      const double want = deq.ptr<float>()[i] + adapter.config().scale() * s;
      ASSERT_LE(std::fabs(got.ptr<float>()[i] - want), kF32Eps * std::fabs(want));
      moved = std::max(moved, double(std::fabs(got.ptr<float>()[i] - deq.ptr<float>()[i])));
    }
    EXPECT_GT(moved, 0) << kProjectionNames[p];  // the adapter is not vacuous
  }
  fs::remove_all(fp8);
  fs::remove_all(out);
}

TEST(Merge, OutputDirectoryRules) {
  const std::string model_dir = temp_dir("model");
  fs::copy(golden_dir("qwen2"), model_dir, fs::copy_options::recursive);
  const Model base = load_model(model_dir);
  const LoraAdapter adapter = LoraAdapter::load_peft(model_dir + "/adapter", base);
  expect_error([&] { write_merged_checkpoint(base, adapter, model_dir); }, "inside it");
  expect_error([&] { write_merged_checkpoint(base, adapter, model_dir + "/"); }, "inside it");
  expect_error([&] { write_merged_checkpoint(base, adapter, model_dir + "/merged"); }, "inside it");
  expect_error(
      [&] {
        write_merged_checkpoint(
            base, adapter, model_dir + "/../" + fs::path(model_dir).filename().string() + "/x");
      },
      "inside it");
  const std::string busy = temp_dir("busy");
  fs::create_directories(busy);
  std::ofstream(busy + "/keep.txt") << "x";
  expect_error([&] { write_merged_checkpoint(base, adapter, busy); }, "not an empty directory");
  EXPECT_TRUE(fs::exists(busy + "/keep.txt"));
  expect_error([&] { write_merged_checkpoint(base, adapter, temp_dir("no_parent") + "/x/y"); },
               "does not exist");
  // An empty directory is replaced; nothing temporary is left beside it.
  const std::string empty = temp_dir("empty");
  fs::create_directories(empty);
  write_merged_checkpoint(base, adapter, empty);
  EXPECT_TRUE(fs::exists(empty + "/model.safetensors"));
  const std::string tmp_prefix = std::string(".") + fs::path(empty).filename().string();
  for (const auto& e : fs::directory_iterator(fs::path(empty).parent_path()))
    EXPECT_NE(e.path().filename().string().rfind(tmp_prefix, 0), 0u) << e.path();
  fs::remove_all(model_dir);
  fs::remove_all(busy);
  fs::remove_all(empty);
}

TEST(Merge, AnotherArchitecturesAdapterIsRefused) {
  const Model llama = load_model(golden_dir("llama"));
  expect_error([&] { LoraAdapter::load_peft(golden_dir("qwen3") + "/adapter", llama); }, "shape");
}

}  // namespace
