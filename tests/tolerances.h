// Every numeric tolerance of the test suite, with where it comes from. Tests compare with
// rel_max_diff(): max |a - b| over all elements divided by max |reference|.
#pragma once

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

// Our fp32 CPU forward vs HF transformers' fp32 eager forward (issue 2 item 8). Both are fp32 of
// the same weights; the errors come from reduction order (K up to a few hundred here, ~1e-5
// each), transcendental implementations (exp, tanh, pow, cos: a few ulp) and their growth
// through the layers. 1e-3 of max |logit| leaves two orders of magnitude of margin and still
// catches any real formula difference (a wrong norm, rope or mask moves logits by >1e-2).
inline constexpr double kHfFp32Logits = 1e-3;

// Our FP8 forward vs the PyTorch emulation of the same FP8 recipe. On top of the fp32 effects,
// an activation within an ulp of an e4m3 rounding boundary may round the other way in one
// implementation (a 2^-4 relative change of that one element), which moves logits by ~1e-4 of
// their range per flip; 2e-3 allows a handful of flips and no systematic error.
inline constexpr double kHfFp8Logits = 2e-3;

// The same computation run as one prefill, as prefill + decode steps or inside a batch has no
// tolerance at all on the CPU: the GEMM is batch-invariant (ops/cpu/gemm.h) and every other op
// works per token, so the tests require bit-identical logits.

}  // namespace fp8rl::test
