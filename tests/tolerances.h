// Every numeric tolerance of the test suite, with where it comes from. Tests compare with
// rel_max_diff(): max |a - b| over all elements divided by max |reference|.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace fp8rl::test {

// fp32 unit roundoff.
inline constexpr double kF32Eps = 5.960464477539063e-08;  // 2^-24

// Bound for two fp32 computations of the same quantity whose reductions of length K are summed
// in different orders (blocked GEMM vs naive loop): the standard sqrt(K) random-walk estimate
// of the accumulated rounding, with a safety factor of 8 for the worst element.
inline double f32_reduction_bound(int64_t k) {
  return 8.0 * kF32Eps * std::sqrt(double(k));
}

// Our fp32 CPU forward vs HF transformers' fp32 eager forward. Both are fp32 of
// the same weights; the errors come from reduction order (K up to a few hundred here, ~1e-7
// relative each), transcendental implementations (exp, tanh, pow, cos: a few ulp) and their
// growth through the layers. Measured on the five goldens (test_goldens prints it): 4.3e-7
// (gemma3) to 2.3e-6 (qwen3) of max |logit|. The bound is ~4x the largest: it still catches any
// formula difference (a wrong norm, rope or mask moves logits by >1e-2) and a drift of the
// reduction structure by an order of magnitude. (It was 1e-3 before the measurement.)
inline constexpr double kHfFp32Logits = 1e-5;
// A classifier's score (ops::linear's fp32 fma chain over H = 128) against the test's fp64 dot
// product of the same hidden state and head: H fp32 roundings, ~1e-7 relative each, of the
// score's scale. A wrong position or head moves the score by its own size.
inline constexpr double kF32HeadDot = 1e-5;
// The trainer against HF + PEFT in fp32 on the CPU (tests/train/test_train_goldens.cpp): the
// loss relative, LoRA gradients and one optimizer step as max |ours - ref| / max |ref|. Both
// sides are fp32 with different reduction orders over a forward of a few hundred-term sums and
// its backward; 1e-4 at first, ratcheted to a few times the measured error:
// loss <= 1.3e-7, gradients <= 2.6e-6 (mistral), SGD <= 6e-7. AdamW's first step is
// lr * g / (|g| + eps) elementwise, which turns a gradient's relative error into the update's
// wherever |g| ~ eps: measured <= 1.3e-5.
inline constexpr double kHfTrainLoss = 1e-6;
// The CUDA trainer against the fp32 CPU trainer (tests/gpu/test_train_gpu.cpp): bf16
// activations (unit roundoff 2^-8 per stored value) through every layer of the forward and the
// backward, so the loss moves by a few 2^-8 relative and each gradient, a sum over tokens of
// products of such values, by ~sqrt(layers x ops) 2^-8 of its scale. Measured on the H200
// (2026-12-01): loss <= 8.7e-4 (bf16 base); gradients <= 1.73e-2 (bf16).
inline constexpr double kCudaTrainLoss = 2.0 / 256;
inline constexpr double kCudaTrainGrad = 8.0 / 256;
// With an FP8 base the CUDA forward quantizes bf16 activations and the CPU fp32 ones: a value
// near an e4m3 rounding boundary lands on the other code, a step of 2^-4 relative, and the
// flip propagates through the later layers (the CPU's bf16 emulation, which would share the
// roundings, is not extended to the backward). So the gradients are held to a few e4m3 steps
// only, a weak check beside the bf16 base's: measured <= 0.124 (mistral).
inline constexpr double kCudaFp8TrainGrad = 3.0 / 16;
// The loss under those flips: each flipped code moves its product by 2^-4 relative, and a
// tiny model's loss by ~1e-3 per flip in an early layer. Measured on the H200 (2026-12-04,
// down_proj's input quantized from the activation's fp32 values as the engine does):
// <= 7.94e-3 (mistral), so twice that.
inline constexpr double kCudaFp8TrainLoss = 4.0 / 256;
// FP8-row against unquantized base over the same SFT run (tests/train/test_sft_trainer.cpp):
// the relative difference of the end-of-run loss, the claim being 1%. Measured 0.15%.
inline constexpr double kFp8SftLossCurve = 0.01;
inline constexpr double kHfTrainGrad = 1e-5;
inline constexpr double kHfTrainStep = 5e-5;

// Our FP8 forward vs the PyTorch emulation of the same FP8 recipe. On top of the fp32 effects,
// an activation within an ulp of an e4m3 rounding boundary could round the other way in one
// implementation (a 2^-4 relative change of that one element, ~1e-4 of the logit range). On
// the goldens' inputs no such flip happens: measured 2.9e-7 to 9.8e-7 over the 15 cases; the
// bound is 5x the largest, so a single flip (new inputs, a changed quantizer) fails the test
// and has to be looked at rather than absorbed. (It was 2e-3 before the measurement.)
inline constexpr double kHfFp8Logits = 5e-6;

// The same computation run as one prefill, as prefill + decode steps or inside a batch has no
// tolerance at all on the CPU: the GEMM is batch-invariant (ops/cpu/gemm.h) and every other op
// works per token, so the tests require bit-identical logits.

// ---- CUDA backend vs the CPU reference (tests/gpu) ----------------------------------------
// The CUDA ops take bf16 activations and do their math in fp32; the CPU ops get the same
// bf16-representable inputs as f32. What differs is then the rounding of each output to bf16
// (at most half an ulp of an 8-bit significand: 2^-9 relative), fp32 reduction order and the
// ulp-level differences of expf/tanhf/sincospif. Unless stated, errors are max |gpu - cpu| /
// max |cpu| over the output (test_util.h rel_max_diff).

inline constexpr double kBf16HalfUlp = 1.0 / 512;  // 2^-9

// One op with a bf16 output (embedding, RMSNorm, RoPE, gated activations, add, softcap, the
// bf16 GEMM): one output rounding (2^-9) plus fp32-level noise; a factor 2 of margin.
inline constexpr double kCudaBf16Op = 2 * kBf16HalfUlp;

// RMSNorm then RoPE in one kernel (rms_norm_rope), as max |gpu - cpu| / max |cpu|: the CUDA
// path rounds the normed pair p = (a, b) to bf16 before rotating it, as the unfused ops do,
// and the rotated values once more. The first rounding is an error vector e with
// |e| <= 2^-9 |p|; the rotation turns it without growing it, so each output moves by
// <= 2^-9 |p|, and since one of the pair's two outputs is >= |p| / sqrt(2) (a rotation keeps
// |p|), that is <= sqrt(2) 2^-9 of max |out|. The output rounding adds 2^-9: (1 + sqrt(2)) 2^-9
// = 2.4 2^-9 at worst, plus ulps of cos/sin; bound 4 2^-9.
inline constexpr double kCudaNormRope = 4 * kBf16HalfUlp;

// Attention, as max |gpu - cpu| / max |v|: P is rounded to bf16 before P.V (FlashAttention-2
// does too), each weight by <= 2^-9 relative, so sum_j dp_j v_j <= 2^-9 max|v| (the weights sum
// to 1); the output rounding adds <= 2^-9 max|o| <= 2^-9 max|v|; a factor 2 of margin.
inline constexpr double kCudaAttention = 4 * kBf16HalfUlp;

// The paged decode kernel, as max |gpu - cpu| / max |v| against the exact attention: P stays
// fp32 (no bf16 rounding before P V), so the only bf16 rounding is the output's, <= 2^-9 max|o|
// <= 2^-9 max|v|; the fp32 sums (scores over D, weights over the context, the split-K merge)
// in another order than the CPU's and exp2f's ulps add ~1e-6 relative; a factor 2 of margin.
// The shared-prefix path (ops::PagedBatch's prefix_*) is the same sums in another chunking:
// the same bound with its CUDA-core prefix kernel; its mma.sync prefix kernel rounds P to bf16
// on the prefix keys as the prefill kernels do, so kCudaAttention's derivation holds there.
inline constexpr double kCudaPagedDecode = 2 * kBf16HalfUlp;

// An FP8 GEMM (cuBLASLt, fast accumulation off) against the CPU's fp32 sum of the same
// dequantized products: the output rounding to bf16 (2^-9, doubled) plus Hopper's FP8 tensor
// core accumulation, which keeps ~14 significant bits inside each 128-element K chunk before
// promoting to fp32 (DeepSeek-V3 report §3.3): 2^-14 relative to the chunk sums, whose total
// is of the size of the output for random operands; 4x that for the worst element.
inline constexpr double kCudaFp8Gemm = 2 * kBf16HalfUlp + 4.0 / 16384;

// moe_route's weights on CUDA against the CPU with emulated bf16 activations, on router logits
// that are exact in fp32 in any summation order (tests/gpu/op_cases_moe.cpp), so both round
// the same logits: the fp32 softmax differs by its sum's order and expf's ulps (~1e-7), and
// the weight's bf16 rounding can land one ulp apart, up to 2^-7 of the weight (4 half-ulps).
inline constexpr double kCudaMoeRoute = 4 * kBf16HalfUlp;

// moe_experts on CUDA against the CPU with emulated bf16 activations, as max |gpu - cpu| / S,
// S = max over tokens of sum_j |w_j| max |y_j| (y_j the token's j-th expert output: S bounds
// every product and partial sum of the combine). The cases make gate and up exact in fp32
// (grid values, power-of-two FP8 scales), so act(gate) * up and its FP8 codes are the CPU's
// bit for bit; each y_j is then a dense GEMM's result (kCudaFp8Gemm of max |y_j|, which covers
// kCudaBf16Op for bf16 experts), and where the y_j differ, each of the combine's k rounded
// products and k rounded sums can round to the neighbouring bf16 value (one ulp, 2 half-ulps
// of S) on top of the propagated difference.
inline double cuda_moe_experts_bound(int64_t k) {
  return kCudaFp8Gemm + 4.0 * double(k) * kBf16HalfUlp;
}

// A group of projections with LoRA adapters (ops::linear_group) against the CPU's f32 group:
// the base GEMM's error (kCudaFp8Gemm, or kCudaBf16Op for bf16 weights, at most the larger),
// plus the adapter's xa stored in bf16 (2^-9 of the LoRA term, at most the output's size) and,
// where the up product runs after the base GEMM, the second rounding of the output (2^-9).
inline constexpr double kCudaLoraGroup = kCudaFp8Gemm + 2 * kBf16HalfUlp;

// The dequantize-to-bf16 fallback GEMM (devices or shapes without a native FP8 mode): both
// operands' dequantized values are rounded to bf16 (2^-9 each) before an exact-product fp32 GEMM;
// those errors are independent per product, so they add like the output rounding does.
inline constexpr double kCudaDequantGemm = kCudaFp8Gemm + 2 * kBf16HalfUlp;

// A GEMM with an fp32 output (the lm_head's logits): only the summation order differs; the
// fp32 rounding of K additions is bounded by K * 2^-24 relative to sum |x w|, which for random
// operands is ~sqrt(K) times max |y|; 8 * 2^-24 * K covers both with margin.
inline double cuda_f32_gemm_bound(int64_t k) {
  return std::max(1e-5, 8.0 * kF32Eps * double(k));
}

// Fused quantization (RMSNorm -> FP8, act*up -> FP8) on the GPU vs op + quantize_activation on
// the CPU: the fp32 values before quantization differ by the RMSNorm's K-long fp32 reduction
// (summation order: f32_reduction_bound(K) relative, ~4e-6 measured at K = 4096 on the H200)
// or by a few ulps of expf/tanhf; the group amax and so the scale inherit that relative
// difference (fused_scale_bound), and a code flips only for values that close to an e4m3
// midpoint (a fraction ~1e-4 of them): at most kFp8FusedFlips of the codes may differ, each by
// one e4m3 step (2^-3 of the value, or one subnormal step scale * 2^-9).
inline constexpr double kFp8FusedFlips = 1e-3;
inline double fused_scale_bound(int64_t k) {
  return std::max(1e-6, f32_reduction_bound(k));
}
// Per-tensor fused scaling stages the op's output in bf16 first: the quantized values are then
// perturbed by up to 2^-9 relative, which flips a rounding with probability <= 2^-9 / 2^-4
// (the narrowest e4m3 rounding interval is 2^-4 of the value): up to 2^-5 of the codes; and the
// amax moves by up to 2^-9.
inline constexpr double kFp8TensorFusedFlips = 1.0 / 16;
inline constexpr double kFp8TensorScaleRel = 2 * kBf16HalfUlp;

// Logits of the CUDA forward (bf16 activations) vs the CPU forward (fp32) on the goldens.
// Every op output on the way to a logit is rounded to bf16: about 13 per decoder layer
// (norm, q/k/v, rope, attention, o, add, norm, gate/up, act, down, add) plus the embedding and
// the final norm, each an independent relative error of at most 2^-9 (std 2^-9/sqrt(3)). The
// pre-norm residual network carries them with a gain of ~1, so the relative logit error is a
// random walk of n = 13 L + 2 steps, std sqrt(n) * 2^-9 / sqrt(3) (L = 2: 6.1e-3), and the
// largest of the T x V elements sits ~4 std out, relative to max |logit| rather than the
// typical one (>= 2x larger): ~1.2e-2. Bound 2e-2.
inline constexpr double kCudaBf16Logits = 2e-2;

// FP8 schemes: every activation that reaches a quantizer carries the bf16 error accumulated
// so far, a relative error eps_a of a few 1e-3 (the logits of the fp8-off forward differ by
// ~1e-2). Its e4m3 rounding then differs from the CPU's fp32 value with probability
// p ~ 2 eps_a / w, w ~ 0.09 the mean relative width of an e4m3 rounding interval (2^-4..2^-3):
// p ~ 0.1 at eps_a = 5e-3. A flipped value differs by one step, where the CPU's own FP8 error
// is uniform within half a step, so the variance of CUDA-vs-CPU is 12 p ~ 1.3 times the
// variance of the FP8-vs-fp32 difference d_fp8 that the same input shows on the CPU (measured
// by the test): std ratio ~1.15, bound 1.25 d_fp8 on top of the bf16 bound. In words: with
// bf16 activations an FP8 forward agrees with the fp32-activation FP8 forward only to the size
// of the FP8 effect itself (measured on the H200, 2026-11-29: ratio 0.3..0.85).
inline double cuda_fp8_logits_bound(double d_fp8) {
  return kCudaBf16Logits + 1.25 * d_fp8;
}
// That bound would also pass a CUDA forward that skipped FP8 (its distance to the CPU's FP8
// logits is d_fp8 plus bf16 noise). The discriminating check (test_model_gpu "FP8 effect"):
// CUDA's FP8 effect (FP8 logits minus its own unquantized logits of the same ids) against the
// CPU's, as ||e_cuda - e_cpu||_F / ||e_cpu||_F. Skipping FP8 scores exactly 1 (the negative
// control). If CUDA's flipped e4m3 roundings were independent of the CPU's the score would be
// ~sqrt(2); the shared recipe makes the effects agree where no rounding flips, and the flips
// (the cascade above) carry only part of the effect's energy. Measured on the H200
// (2026-12-01, test_model_gpu's "FP8 effect" rows): 0.44..0.83 over the 15
// golden and 9 random-model cases; the controls score 1. Bound 0.9: below the control's 1.
inline constexpr double kCudaFp8EffectResidual = 0.9;

// ---- The CPU's emulation of bf16 activations (Context::bf16_activations) ------------------
// The emulating CPU forward rounds to bf16 exactly where the CUDA backend stores bf16, with the
// same fp32 formula before each rounding (ops/cpu/cpu_ops.h).

// Emulation vs the exact fp32 CPU forward: the differences are those roundings and nothing
// else, which is what the derivation of kCudaBf16Logits counts (13 L + 2 independent 2^-9
// relative errors carried to the logits), so the same bound holds; for FP8 schemes
// cuda_fp8_logits_bound(d_fp8), by the same argument as for CUDA.
inline constexpr double kBf16EmulationLogits = kCudaBf16Logits;

// An op's emulated output vs round_to_bf16 of its exact fp32 output, for the ops whose only
// bf16 rounding is the output's (embedding of a bf16 table, RMSNorm, RoPE, gated activations,
// add, softcap, a linear with bf16 weights or a native FP8 GEMM): the same fp32 value rounded
// the same way, so 0 (bit-identical). Attention rounds P inside as well: kCudaAttention (same
// derivation) against the exact attention.

// ---- fp32-level noise (tools/experiments/fp8_sensitivity.cpp) ------------------------------
// The noise: every norm weight and FP8 weight scale times (1 +- kUlpNoise), random signs, so
// that every norm and GEMM output moves by up to kUlpNoise of itself (2 to 4 fp32 ulps).
inline constexpr double kUlpNoise = 0x1p-22;
// What it may do to the exact fp32 forward without FP8, which is smooth in it: each of the
// n = 13 L + 2 op outputs on the way to a logit (as counted for kCudaBf16Logits) changes by the
// noise carried in with a gain of ~1, plus kUlpNoise from its own weight or scale, plus one
// rounding that may now go the other way (2^-23 = kUlpNoise / 2). Added without cancellation:
// 1.5 n kUlpNoise relative; a factor ~5 for the gains the ~1 leaves out (attention's softmax,
// the largest element against max |logit|): 8 n kUlpNoise, 5.3e-5 at L = 2. A stray bf16 or
// e4m3 rounding in that path would, when the noise flips it, move logits by 1e-3 and more.
inline double ulp_noise_f32_logits_bound(int64_t layers) {
  return 8.0 * double(13 * layers + 2) * kUlpNoise;
}

// CUDA vs the emulating CPU forward (tests/gpu/test_model_gpu "vs cpu-bf16"): the same
// roundings at the same points, so what is left is the fp32-level difference of each value
// before its rounding: reduction order, exp2/tanh/sin/cos ulps and, in FP8 GEMMs, the tensor
// cores' accumulation (<= 2^-14 of the chunk sums, see kCudaFp8Gemm), which no CPU reference
// reproduces. Unquantized, that is invisible: measured on the H200 (2026-11-29) 1.2e-3..8e-3
// against the emulation where the exact fp32 CPU gives 5e-3..1.7e-2, bound kCudaBf16Logits.
// With FP8 a last-bit difference before an activation quantizer rounds a value near an e4m3
// midpoint the other way (one element moves by a whole e4m3 step, 6..12%), and that
// perturbation flips further roundings in every later layer: the cascade the goldens avoid
// for fp32 by drawing inputs with margins of a few fp32 ulps, margins that the FP8 GEMM's
// accumulation error exceeds. Measured: 0.02..0.12 against the emulation, about what the fp32
// CPU reference gives (0.03..0.14), also for the one-layer random model (0.05..0.06). The
// emulation itself is that sensitive (tools/experiments/fp8_sensitivity.cpp): kUlpNoise on
// every norm weight and FP8 weight scale, an fp32-level change of every norm and GEMM output,
// moves its FP8 logits on the goldens' FP8 inputs by 0.029..0.070 in 8 of the 15 architecture
// x scheme cases and by 0..0.013 in the other 7, where the unquantized emulation moves by
// <= 0.0093 and the exact fp32 forwards, FP8 or not, by <= 1.7e-6 (the FP8 ones protected by
// the goldens' margins; with 24 other noise seeds one case moved by up to 0.012). A case moves
// when an e4m3 rounding flips; CUDA's FP8 GEMMs differ from the CPU's by up to 2^-14 of the
// chunk sums, far more than kUlpNoise, and there every case is 0.02 or more off. So the FP8
// rows keep cuda_fp8_logits_bound(d_fp8): FP8 on CUDA cannot agree with a CPU reference as
// closely as bf16 unless the GEMMs agree bit for bit, and the aim is not met. The
// per-op harness holds each FP8 op to its own bound (codes bit-exact, GEMMs within
// kCudaFp8Gemm).

// ---- Random initialization statistics (tests/model/test_adapter.cpp) ----------------------
// The sample second moment of n iid draws X has relative standard error sqrt(E[X^4] / E[X^2]^2
// - 1) / sqrt(n): sqrt(4/5) / sqrt(n) for a uniform (E[X^4] / E[X^2]^2 = 9/5), sqrt(2) / sqrt(n)
// for a normal (3). Five standard errors: a correct initializer fails once in ~2 million runs
// (the streams are deterministic, so in practice never), while a wrong scale (1/K for
// 1/sqrt(K), 1/sqrt(r) for 1/r) is off by a factor of 2 or more at the test sizes.
inline double second_moment_tolerance(double kurtosis, int64_t n) {
  return 5.0 * std::sqrt(kurtosis - 1.0) / std::sqrt(double(n));
}

// Greedy generation against HF transformers' fp32 eager generate (tests/engine): the logprob
// of each generated token, |ours - HF|. Both compute log_softmax of fp32 logits that agree to
// ~1e-6 of their magnitude (kHfFp32Logits' measurement: logits of |x| <~ 10, summation
// orders differ), and log_softmax adds a few ulps; 1e-4 leaves ~10x.
inline constexpr double kGenerateLogprob = 1e-4;

// FP8 KV cache against the unquantized one (tests/engine Fp8KvCacheDeviation): each key and
// value element carries a relative error up to 2^-4 (e4m3 keeps 3 mantissa bits, RNE).
// Attention outputs are convex combinations of values, so their error is at most ~2^-4 of
// their magnitude plus what 2^-4-relative key errors do to the softmax weights; the residual
// stream adds them to the other blocks' exact outputs, so the logits move by at most ~2^-4
// relative, and a logprob z_y - logsumexp(z) by at most twice the largest logit change. For
// logits of a few units (|z| <~ 4 assumed for the goldens' tiny random models, not measured)
// this gives 2 * 2^-4 * 4 = 0.5. Measured: 0.009 (gemma3) to 0.16 (llama) max, means
// 0.003-0.05 (docs/PERFORMANCE.md "KV cache dtype"): a heuristic bound, ~3x above them.
inline constexpr double kKvFp8Logprob = 0.5;
// The same for a mixture-of-experts model: the argument above assumes the logits move
// smoothly with the K/V errors, but a token whose router scores sit near a tie can switch an
// expert, replacing that expert's output by another's. Measured on the qwen3_moe golden: 0.53
// max, 0.053 mean; 1.0 is ~2x the max.
inline constexpr double kKvFp8LogprobMoe = 1.0;

// ---- The sampler (ops/sampling.h; tests/engine/test_sampler.cpp, tests/gpu sample cases) ---

// Chi-square goodness of fit of N draws against the exact fp64 distribution: the statistic is
// chi-square with dof degrees of freedom under the null (expected counts >= 5 per bin, the
// rest pooled), and a test must fail by chance with probability <= 1e-6. The (1 - 1e-6)
// quantile by Wilson-Hilferty, q = dof (1 - 2/(9 dof) + z sqrt(2/(9 dof)))^3 with
// z = 4.7534 (the standard normal's 1 - 1e-6 quantile). Against tabulated quantiles it is
// within 1% for dof >= 10 and above the exact value for dof 1..3 (dof 1: 27.5 vs 23.9), i.e.
// conservative where it is inaccurate.
inline double chi_square_bound(int dof) {
  const double k = dof, z = 4.7534;
  const double c = 1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k));
  return k * c * c * c;
}

// A logprob of the sampler (fp32: shift by max, fp64 (CPU) or fp32 (CUDA) sum of V exps, one
// log) against the fp64 log_softmax: the fp32 division x / T and subtraction round at
// 2^-24 of |x / T| (the largest operand), expf contributes up to 2 ulps per term (2^-23
// relative to the sum), the sum's order f32_reduction_bound(V), the log one more ulp of
// |log_sum|. Absolute bound: 8 2^-24 (|x / T|max + |logprob|) for the roundings, plus
// f32_reduction_bound(V) + 2^-22 for the sum.
inline double sample_logprob_bound(double max_abs_scaled_logit, double abs_logprob, int64_t v) {
  return 8.0 * kF32Eps * (max_abs_scaled_logit + abs_logprob) + f32_reduction_bound(v) + 0x1p-22;
}

// CUDA vs CPU sampled ids: the tempered logits l_i are bit-identical (IEEE division) and the
// uniforms too (integer hashing), but g = -log(-log u) goes through two logf calls whose CUDA
// results differ from glibc's by up to 1 ulp each (CUDA C Programming Guide, logf: 1 ulp):
// the inner one moves -log u by 2^-23 relative, which moves g by 2^-23 absolute, the outer
// one by 1 ulp of |g| <= 17.3 (2^-19); the sum l + g rounds at 2^-24 |s|. A row's draw is
// compared only when its two best scores differ by more than 4 (2^-23 + 2^-19 + 2^-24 |s|max).
inline double sample_score_margin(double max_abs_score) {
  return 4.0 * (0x1p-23 + 0x1p-19 + kF32Eps * max_abs_score);
}

// ---- Optimizers (tests/train) ------------------------------------------------------------
// An optimizer of train/optimizer.h (fp64 arithmetic; parameters and moments stored in fp32)
// against the same formulas in fp64 throughout, after `steps` steps. Per step: storing p
// rounds it by at most 2^-24 |p|; the stored moments are off by at most 2^-24 of their size
// per step, and they carry over (times beta <= 1), so after t steps the bias-corrected m_hat
// is off by <= t 2^-24 max|g| and sqrt(v_hat) by <= t 2^-25 max|g|, which moves an update
// lr m_hat / sqrt(v_hat) by <= 2 t 2^-24 lr max|g| / min|g| (the tests draw |g| from
// [0.5, 1], so max|g| / min|g| <= 2). An earlier step's parameter error carries over with
// factor 1 - lr wd <= 1. Summed over the steps and with a factor 2 of margin:
// 2 steps 2^-24 (max|p| + 2 steps max_update), where max_update = lr max|g| / min|g| for
// AdamW and lr (1 + momentum) max|g + wd p| / (1 - momentum) for SGD.
inline double optimizer_f32_bound(int steps, double max_abs_param, double max_abs_update) {
  return 2.0 * steps * kF32Eps * (max_abs_param + 2.0 * steps * max_abs_update);
}

// ---- Backward ops vs fp64 finite differences (tests/ops/test_backward.cpp) ---------------
// The reference gradient is a central difference (L(x + h) - L(x - h)) / 2h of an fp64
// re-implementation of the forward, for L = sum c * y with c uniform in [-1, 1] and inputs of
// size ~1. Its error: truncation h^2 / 6 |L'''|, with |L'''| / |L'| <~ 100 for these ops
// (softcaps and exp at scores of a few units), 1.7e-7 relative at h = 1e-4; cancellation
// 2^-53 |L| / h <~ 1e-12 |L| with |L| < 1e4 here. kFdError bounds both with margin.
inline constexpr double kFdStep = 1e-4;
inline constexpr double kFdError = 1e-6;

// The fp32 op's gradient against it, as max |op - fd| / max |fd|: each gradient element is a
// chain of fp32 reductions of total length n (e.g. D for a norm row, context * D for attention,
// N for a linear's dX), each step rounding at 2^-24 of its running magnitude: a random walk of
// sqrt(n) 2^-24 relative to sum |terms|. The gradients subtract terms of their own size
// (rms_norm's mean term, attention's P (dP - Delta), softmax - onehot), which can make
// sum |terms| ~8x the largest result; another 8x for the worst element of a few thousand:
// 64 sqrt(n) 2^-24. A dropped term (the negative controls) moves gradients by O(10%) and more.
inline double backward_grad_bound(int64_t n) {
  return 64.0 * kF32Eps * std::sqrt(double(n)) + kFdError;
}

// The fp32 forward op against the same fp64 forward (before any gradient is compared), relative
// to max |fp64 output|: reductions of length n (f32_reduction_bound) plus a few ulps of exp,
// tanh, sin/cos and log (8 2^-24); lse and log-probabilities are compared in absolute terms
// relative to max(1, |value|) by the same bound.
inline double forward_f32_bound(int64_t n) {
  return f32_reduction_bound(n) + 8.0 * kF32Eps;
}

// ---- CUDA backward ops vs the CPU reference (tests/gpu/op_cases_backward.cpp) ------------
// Both sides get the same inputs: activations bf16-representable (the CUDA kernels read them
// as bf16, exactly), gradients and parameters f32. The backward ops compute in fp32 on both
// devices, so what differs is reduction order and transcendental ulps. Each side lies within
// 64 sqrt(n) 2^-24 of the exact gradient (backward_grad_bound's derivation without the
// finite-difference term: fp32 reductions of total length n, terms of the result's own size
// cancelling, the worst of thousands of elements), so the two lie within twice that of each
// other, as max |gpu - cpu| / max |cpu|. At n = 1 (element-wise ops) that is 128 ulps, which
// also covers CUDA's expf / tanhf (2 ulp each, a few ulps after the cancellations of act' and
// 1 - t^2 at |x| <= 4) and RoPE's cos/sin from the fp32-rounded phase (sincospif of turns
// rounded to fp32: 2^-24 pi rad, ~3 ulps of the output). A dropped term or a wrong angle
// moves a gradient by O(10%) (the negative controls).
inline double cuda_backward_bound(int64_t n) {
  return 128.0 * kF32Eps * std::sqrt(double(std::max<int64_t>(n, 1)));
}

// paged_attention_backward on the tiled CUDA kernels (attention_backward_mma.cu; the reference
// kernels are held to cuda_backward_bound), as max |gpu - cpu| / max |cpu|: the MMAs take bf16
// operands, so dout, P and dS are each rounded to bf16 once (q, k, v and out are bf16 values
// on both sides already), with fp32 accumulation. One rounding is a relative error uniform
// within half an ulp (2^-8 of the value at the bottom of a binade, 2^-9 at its top), of RMS
// 2^-8 / sqrt(6) = 0.82 2^-9 over a binade. A term of dv_j = sum_i P_ij dout_i carries two
// (P's and dout's); a term of dk_j = scale sum_i dS_ij q_i or dq_i = scale sum_j dS_ij k_j
// carries dS's and dout's, the latter through dP_ij - Delta_i = dout_i . (v_j - out_i) (Delta
// is computed from the same rounded dout), whose error sum_d e_d dout_d (v_j - out_i)_d is the
// same 0.82 2^-9 of it in RMS: 1.2 2^-9 RMS per term either way. Over a reduction of terms of
// random signs (queries x group heads for dk, dv; keys for dq) the error is a random walk of
// the same relative size as the sum's RMS, and the worst of up to ~1e6 elements lies ~5 std
// out: 6 2^-9 of that RMS, which is at most max |cpu| (the largest of such random-sign sums
// exceeds their RMS 3-4x; no credit taken). A sum of a few dominant terms (the first keys, the
// shortest sequences) errs by at most two roundings' worst case, 4 2^-9 of itself. The fp32
// summation order (f32_reduction_bound of n <= 4096, ~4e-6) and ex2.approx's 2^-22 are far
// below. The estimate with the 3-4x credit is ~2 2^-9; measured 1.87 2^-9 at most over the op
// harness's cases (2026-12-02, H200, dq of T=989 D=32 window 50); bound 6 2^-9 (was 8).
inline constexpr double kCudaAttentionBackward = 6 * kBf16HalfUlp;

// The log-sum-exp the attention forward saves for the backward, as |gpu - cpu| / max(1, |lse|):
// the scores are fp32 sums of D exact bf16 products (a random walk of sqrt(D) roundings of
// 2^-24, relative to the scores, which lse bounds), then exp2 / log2 of the running sum with
// the approximate instructions' 2^-22 relative each, which moves lse by ~2^-22 absolute.
// Measured at most 3.7, 6.5, 9.3 and 20.7 x 2^-24 for D = 32, 64, 128, 256 (2026-12-02, H200);
// bound 4 sqrt(D) 2^-24 (23-64 x 2^-24). It was cuda_backward_bound(keys x D), ~1,000x looser.
inline double cuda_lse_bound(int64_t d) {
  return 4.0 * std::sqrt(double(d)) * kF32Eps;
}

// linear_backward_input on CUDA: dy (f32) and the dequantized weight are each rounded to bf16
// (<= 2^-9 relative) before a GEMM with exact bf16 products and fp32 accumulation and output.
// A product's relative error e = d1 + d2 has std 2^-9 sqrt(2/3) (each d uniform within half
// an ulp); summed over N products of random signs the error is a random walk of the same
// relative size as the sum itself (~0.8 2^-9 of the typical |dx|), and the worst of M x K
// elements sits ~5 std out: 4 2^-9 of the typical |dx|, at most that of max |dx|. The fp32
// accumulation order (f32_reduction_bound(N), ~1e-5) is far below it.
inline constexpr double kCudaBf16OperandGemm = 4 * kBf16HalfUlp;

// linear_backward_input's FP8 path (FP8-row weights on the FP8 tensor cores): the codes are
// exact and dY diag(s) is rounded to e4m3 per token: 3 mantissa bits, <= 2^-4 relative per
// value (values below 2^-6 of the row's scale are subnormal, with an absolute error of at
// most 2^-10 of it: smaller still). One operand's error, uniform within half an ulp, has std
// 2^-4 / sqrt(3) of a product; summed over N products of random signs, a random walk of that
// relative size of the typical |dx| (0.58 2^-4), the worst of M x K elements ~5 std out:
// ~2.9 2^-4 of the typical |dx|, which is ~1/3 of max |dx| (the compare's scale) for these
// 10^2..10^6 normal-like values: 2^-4 of max |dx|. The tensor cores' chunk accumulation
// (kCudaFp8Gemm's 2^-14) is far below. Measured on the H200 (2026-12-02): <= 0.46 2^-4.
// The recipe's price: a gradient ~30x coarser than the bf16 path's, which torchao's rowwise
// FP8 recipe and DeepSeek-V3's e4m3 dgrad accept.
inline constexpr double kCudaFp8GradientGemm = 1.0 / 16;

// lora_backward on CUDA (bf16 operands as PEFT under autocast, fp32 accumulation): dy, A and B
// are rounded to bf16 (one half-ulp each, <= 2^-9 relative, RMS 0.82 2^-9 over a binade), and
// the intermediates u = x A^T and du = s dy B are stored in bf16 after reductions whose own
// operand errors average out (a random walk: ~0.8 2^-9 of u, du), one more rounding each: u and
// du carry ~1.2 2^-9 RMS. A term of dB = s dy^T u carries dy's and u's errors (1.45 2^-9 RMS),
// of dA = du^T x (x exact) du's (1.2 2^-9), of dx = du A du's and A's (1.45 2^-9). Summed over
// M (or r) terms of random signs the error is a random walk of the same relative size as the
// sum's RMS, and the worst of ~1e6 elements sits ~5 std out: 7.3 2^-9 of that RMS, at most
// max |ref| (the largest random-sign sum exceeds the RMS 3-4x; no credit taken). Bound 8 2^-9;
// the += of the initial values (of the gradients' size) only dilutes it.
inline constexpr double kCudaLoraBackward = 8 * kBf16HalfUlp;

// ---- fp8rl merge (tests/model/test_merge.cpp) ---------------------------------------------
// bf16's unit roundoff: 8 significant bits, so rounding moves a value by at most half an ulp,
// 2^-8 of the value at the bottom of a binade (kBf16HalfUlp's 2^-9 holds only at its top).
inline constexpr double kBf16UnitRoundoff = 0x1p-8;

// The f32 merged checkpoint vs the unmerged adapter (both fp32 CPU), as rel_max_diff of the
// logits; the 1e-5. What differs: the merged weight carries one more fp32 rounding
// (2^-24 of each element) and its GEMM sums x W' where the unmerged one sums x W and the low-rank
// term separately; either is fp32 reduction noise, sqrt(K) 2^-24 of the output's magnitude
// (K <= 320: 1.1e-6). Carried with a gain of ~1 through the 7 L linear outputs (a random walk,
// sqrt(14) at L = 2): 4e-6 of the typical logit; the worst of T x V elements sits ~4 std out,
// but is measured against max |logit| (>= 2x the typical): ~8e-6. Measured 2.6e-7..1.1e-6.
inline constexpr double kMergeF32Logits = 1e-5;

// The bf16 merged checkpoint vs the unmerged fp32 adapter. Each merged weight is rounded to
// bf16: a relative error uniform within half an ulp, of RMS 2^-8 / sqrt(3) * E[2^e / |w|]
// (~0.72 over a binade): 1.6e-3. An output sum_k x_k w_k d_k of independent errors d_k has
// that RMS relative to sqrt(sum (x_k w_k)^2) ~ its typical magnitude. Over the 7 L rounded
// linear outputs carried with a gain of ~1: sqrt(14) 1.6e-3 = 6e-3 of the typical logit; the
// worst of T x V elements ~4 std out against max |logit| (>= 2x the typical): 1.2e-2; bound
// 2e-2, as kCudaBf16Logits counts roundings. Measured 2.3e-3..1.05e-2; the adapter itself
// moves the logits by 0.16..0.20 (the negative control).
inline constexpr double kMergeBf16Logits = 2e-2;

// The FP8-row merged checkpoint vs the unmerged fp32 adapter, relative to the FP8 effect of
// the base (base quantized on load vs base fp32, same ids): both are the same recipe's
// roundings of weights and activations of the same distribution (the adapter moves logits by
// ~20%), so their expected size is equal; the worst element of two such random fields differs
// by tens of percent (measured ratio 0.88..1.14). Bound 1.5.
inline constexpr double kMergeFp8Ratio = 1.5;

// ---- fp64 host math of the RL losses (tests/rl) ---------------------------------------------
// A hand-computed value (the arithmetic written out in the test) vs the fp64 implementation:
// both evaluate the same dozen or so correctly rounded fp64 operations (+, *, /, exp, log, sqrt
// within an ulp or two), possibly in another order: ~1e-15 relative. 1e-12 (of max(1, |value|))
// leaves three orders of margin; any formula difference (a normaliser, a clip bound, a 1e-4)
// moves the values by 1e-5 and more.
inline constexpr double kF64Formula = 1e-12;

// A derivative vs the central difference (f(x + h) - f(x - h)) / 2h of the fp64 loss, with
// h = kFiniteDifferenceStep. Truncation: h^2 |f'''| / 6, and the losses' third derivatives in
// logp are O(1..10) at the test points (exp of log-ratios below 1, normalisers <= 1): <= 2e-10.
// Rounding: ~2^-53 |f| / h with |f| <= 10: 1e-10. The bound 1e-8 (of max(1, |derivative|)) is
// 30x that sum, and far below what a wrong factor, a missing chain-rule term or gradient
// through a clipped branch gives (>= 1e-3 at the test points). The test points keep every
// ratio >= 1e-3 (in log space) away from a clip boundary, where the loss has a kink.
inline constexpr double kFiniteDifferenceStep = 1e-5;
// A whole fp32 model's loss differenced (tests/rl/test_reward_trainer.cpp): the forward's fp32
// rounding, ~1e-7 of a loss near 1, over a step of 1e-2 gives ~1e-5 of absolute noise in the
// central difference, against gradients of 1e-3 and more (the test's head has unit scale);
// truncation h^2/6 |L'''| is smaller. Bound: 2% of the group's largest gradient. A missing
// path (the head's gradient alone, no backward through the adapter) misses whole elements.
inline constexpr double kF32ModelFdStep = 1e-2;
inline constexpr double kF32ModelFd = 2e-2;
inline constexpr double kF64FiniteDifference = 1e-8;

}  // namespace fp8rl::test
