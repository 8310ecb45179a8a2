// How far fp32-level noise moves the logits of the CPU forward, unquantized and with each FP8
// scheme, exact and with CUDA's bf16 activations emulated: the evidence for the FP8 bounds of
// the CUDA-vs-emulation comparison at the end of tests/tolerances.h. The noise is put where
// CUDA and the emulation differ at the fp32 level: each norm and GEMM output, before its
// rounding to bf16 or e4m3.
//
// An experiment, not a test: it asserts that a problem exists (FP8 logits are sensitive to
// fp32-level noise), which is evidence for a bound, not a property of the code to keep.
// Build and run: cmake --build build --target fp8_sensitivity &&
// build/tools/experiments/fp8_sensitivity
#include <gtest/gtest.h>

#include "model_test_util.h"
#include "ops/uniform_hash.h"
#include "tolerances.h"

using namespace fp8rl;
using namespace fp8rl::test;

namespace {

// Moves each element x of `w` to x (1 +- kUlpNoise), rounded to f32 (2 to 4 ulps), the sign a
// hash of (seed, index), into an f32 copy. For Gemma's norms (plus_one: the kernels apply
// 1 + w) it is the applied weight that moves by that relative amount. Random signs: a common
// factor would cancel in the next RMSNorm and in the per-row and per-block activation scales.
Tensor with_ulp_noise(const TensorView& w, bool plus_one, uint64_t seed) {
  Tensor p = Tensor::empty(w.shape, DType::f32);
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double x = load_as_f32(w.data, w.dtype, size_t(i));
    const double sign = uniform_hash(seed, uint64_t(i), 1.0f) < 0 ? -1.0 : 1.0;
    p.ptr<float>()[i] = float(x + sign * kUlpNoise * std::fabs(plus_one ? 1.0 + x : x));
  }
  return p;
}

// Points every RMSNorm weight and FP8 weight scale of `m` at a copy with ulp noise. These, not
// the embedding or the linears, because they are f32 on CUDA too and applied in fp32 just
// before an output is rounded (a norm's output; a GEMM's, by its epilogue), so the noise
// reaches every norm and GEMM output at the size of fp32 reduction-order differences (the
// bf16 embedding and weights would lose a 2^-22 change to rounding). Not the first norm alone:
// with bf16 activations its noise dies at the next bf16 rounding unless it flips an e4m3
// rounding in the first quantizer (tried: 1 of the 15 cases moved).
// Returns the copies, which must outlive the model's use.
std::vector<Tensor> add_ulp_noise(Model& m) {
  std::vector<Tensor> copies;
  uint64_t seed = 0;
  auto replace = [&](TensorView& w, bool plus_one) {
    if (w.empty()) return;
    copies.push_back(with_ulp_noise(w, plus_one, seed++));
    w = copies.back().view();
  };
  const bool plus_one = m.config().norm_plus_one;
  for (LayerWeights& l : m.layers) {
    for (TensorView* w : {&l.input_norm, &l.post_attention_norm, &l.pre_feedforward_norm,
                          &l.post_feedforward_norm, &l.q_norm, &l.k_norm})
      replace(*w, plus_one);
    for (LinearWeight* w : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      if (w->is_fp8()) replace(w->scales, false);
  }
  replace(m.final_norm, plus_one);
  return copies;
}

// rel_max_diff of the logits of `dir`'s model (with `scheme`) with and without ulp noise.
double moved_by_noise(const std::string& dir, Fp8Scheme scheme, const std::vector<int32_t>& ids,
                      bool bf16_activations) {
  const Tensor clean = prefill_logits(load_model(dir, scheme), ids, bf16_activations);
  Model noisy = load_model(dir, scheme);
  const std::vector<Tensor> copies = add_ulp_noise(noisy);
  return rel_max_diff(prefill_logits(noisy, ids, bf16_activations), clean);
}

// On the goldens' FP8 inputs (those of test_model_gpu's FP8 rows). Catches: (1) a discontinuity
// in the unquantized fp32 forward (a stray bf16 or e4m3 rounding that the noise flips moves it
// by 1e-3 and more, not 1e-6); (2) an unquantized bf16 forward that does not absorb the noise
// within the bf16 bound, as the CUDA "off" rows need; (3) noise moving an FP8 forward beyond
// the bound test_model_gpu gives the CUDA FP8 rows; (4) an emulation that no longer amplifies
// fp32 noise past the bf16 bound anywhere (the noise not reaching the forward, the schemes or
// the bf16 roundings ignored): the argument for those FP8 bounds would then be void.
TEST(Fp8Sensitivity, UlpNoiseMovesFp8LogitsPastTheBf16Bound) {
  int past = 0, cases = 0;
  double largest = 0;
  for (const char* arch : {"llama", "qwen2", "qwen3", "mistral", "gemma3"}) {
    const std::string dir = golden_dir(arch);
    const double f32_bound = ulp_noise_f32_logits_bound(ModelConfig::load(dir).num_layers);
    for (Fp8Scheme scheme : {Fp8Scheme::tensor, Fp8Scheme::row, Fp8Scheme::block}) {
      const std::string name = std::string(arch) + " " + std::string(scheme_name(scheme));
      const std::vector<int32_t> ids = golden_ids(arch, std::string(scheme_name(scheme)));
      // d_fp8 as test_model_gpu computes it: FP8 vs unquantized, both exact fp32.
      const double d_fp8 = rel_max_diff(prefill_logits(load_model(dir, scheme), ids),
                                        prefill_logits(load_model(dir, Fp8Scheme::off), ids));
      const double fp8_bound = cuda_fp8_logits_bound(d_fp8);
      const double off_f32 = moved_by_noise(dir, Fp8Scheme::off, ids, false);
      const double off_bf16 = moved_by_noise(dir, Fp8Scheme::off, ids, true);
      const double fp8_f32 = moved_by_noise(dir, scheme, ids, false);
      const double fp8_bf16 = moved_by_noise(dir, scheme, ids, true);
      std::printf(
          "%-14s ulp noise moves logits by: fp8 off f32 %.2g (bound %.2g), bf16 %.2g | FP8 f32 "
          "%.2g, bf16 %.2g (bound %.2g, d_fp8 %.2g) | kCudaBf16Logits %.2g\n",
          name.c_str(), off_f32, f32_bound, off_bf16, fp8_f32, fp8_bf16, fp8_bound, d_fp8,
          kCudaBf16Logits);
      EXPECT_LE(off_f32, f32_bound) << name;
      EXPECT_LE(off_bf16, kBf16EmulationLogits) << name;
      EXPECT_LE(fp8_f32, fp8_bound) << name;
      EXPECT_LE(fp8_bf16, fp8_bound) << name;
      ++cases;
      past += fp8_bf16 > kCudaBf16Logits;
      largest = std::max(largest, fp8_bf16);
    }
  }
  // Only in aggregate: whether a case goes past the bf16 bound depends on whether the noise
  // flips an e4m3 rounding. With 25 noise seeds (this one and 24 others) a case did in 0 to 25
  // of them (never: llama, qwen2 and gemma3 with tensor scaling, whose quantizers read
  // bf16-staged values, gemma3 block, qwen3 row), each seed in 3 to 9 of the 15 cases, the
  // largest by 0.038..0.070.
  std::printf(
      "bf16-emulated FP8: ulp noise alone moved %d of %d cases past kCudaBf16Logits = "
      "%.2g, the largest by %.3g\n",
      past, cases, kCudaBf16Logits, largest);
  EXPECT_GT(largest, kCudaBf16Logits);
}

}  // namespace
