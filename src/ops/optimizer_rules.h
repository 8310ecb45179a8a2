// The per-element update rules of AdamW and SGD (torch.optim's formulas, train/optimizer.h),
// written once for the CPU reference (ops/cpu/optimizer.cpp) and the CUDA kernels
// (ops/cuda/optimizer.cu): both evaluate this code, so a step gives the same bits on both
// devices.
//
// Every value is computed in fp64 from the fp32 parameter, gradient and state, one IEEE
// operation at a time, and rounded to fp32 once per stored value. Why each operation is
// spelled as a call: nvcc contracts a * b + c into one fma by default, which rounds once
// instead of twice and so changes the bits; on the device the calls are the round-to-nearest
// intrinsics that nvcc never contracts, on the host plain operators in a file compiled with
// -ffp-contract=off. fp64 division and square root are correctly rounded on both.
//
// CUDA-free: plain structs and inline functions, __host__ __device__ only under nvcc.
#pragma once

#include <cstdint>

#ifndef FP8RL_HOST_DEVICE  // also defined, the same, by ops/uniform_hash.h
#if defined(__CUDACC__)
#define FP8RL_HOST_DEVICE __host__ __device__
#else
#define FP8RL_HOST_DEVICE
#endif
#endif

namespace fp8rl::ops {

// One AdamW step's constants, derived on the host from AdamWConfig, the learning rate and
// the step number t (train/optimizer.cpp), so that both devices use the same values.
struct AdamWStep {
  double lr = 0;
  double beta1 = 0, beta2 = 0, eps = 0;
  double one_minus_beta1 = 1, one_minus_beta2 = 1;    // 1 - beta
  double decay = 1;                                   // 1 - lr * weight_decay
  double bias_correction1 = 1, bias_correction2 = 1;  // 1 - beta^t
};

// One SGD step's constants.
struct SgdStep {
  double lr = 0;
  double weight_decay = 0;
  double momentum = 0;  // 0: no momentum buffer
  double keep = 1;      // 1 - dampening
  bool nesterov = false;
  bool first = false;  // the momentum buffer is created by this step: b = g'
};

// The elements per block of ops::l2_norm's fixed summation order.
inline constexpr int64_t kNormBlockElements = 16384;

namespace optimizer_rules {

FP8RL_HOST_DEVICE inline double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
FP8RL_HOST_DEVICE inline double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
FP8RL_HOST_DEVICE inline double sub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
FP8RL_HOST_DEVICE inline double div(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
FP8RL_HOST_DEVICE inline double sqrt_rn(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return __builtin_sqrt(a);
#endif
}
// The gradient as the optimizer reads it: the fp32 gradient times the fp32 clipping factor,
// rounded to fp32 (what scaling the gradient buffer in place and reading it back gives).
FP8RL_HOST_DEVICE inline double scaled_gradient(float g, float grad_scale) {
#if defined(__CUDA_ARCH__)
  return double(__fmul_rn(g, grad_scale));
#else
  return double(g * grad_scale);
#endif
}

// torch.optim.AdamW for one element: p *= decay; m = b1 m + (1 - b1) g;
// v = b2 v + (1 - b2) g g; p -= lr (m / bc1) / (sqrt(v / bc2) + eps), the update reading
// the stored (fp32-rounded) m and v.
FP8RL_HOST_DEVICE inline void adamw(const AdamWStep& s, double g, float& p, float& m, float& v) {
  m = float(add(mul(s.beta1, double(m)), mul(s.one_minus_beta1, g)));
  v = float(add(mul(s.beta2, double(v)), mul(mul(s.one_minus_beta2, g), g)));
  const double m_hat = div(double(m), s.bias_correction1);
  const double v_hat = div(double(v), s.bias_correction2);
  p = float(sub(mul(double(p), s.decay), div(mul(s.lr, m_hat), add(sqrt_rn(v_hat), s.eps))));
}

// torch.optim.SGD for one element: g' = g + wd p; with momentum b = g' (first step) or
// b = mu b + (1 - dampening) g', then g' = g' + mu b (nesterov) or b; p -= lr g'.
// buffer is null without momentum.
FP8RL_HOST_DEVICE inline void sgd(const SgdStep& s, double g, float& p, float* buffer) {
  const double p0 = p;
  g = add(g, mul(s.weight_decay, p0));
  if (buffer != nullptr) {
    *buffer = s.first ? float(g) : float(add(mul(s.momentum, double(*buffer)), mul(s.keep, g)));
    g = s.nesterov ? add(g, mul(s.momentum, double(*buffer))) : double(*buffer);
  }
  p = float(sub(p0, mul(s.lr, g)));
}

}  // namespace optimizer_rules
}  // namespace fp8rl::ops
