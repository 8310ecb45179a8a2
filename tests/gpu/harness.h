// The op harness (in the spirit of llama.cpp's test-backend-ops): each case runs one op on the
// CPU reference and on CUDA with the same bf16-representable inputs and compares, with the
// bound of tests/tolerances.h for that op; GPU outputs sit between poisoned guard bytes so
// unwritten elements (NaN) and stray writes fail. A perf mode times the CUDA op alone.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "ops/device.h"
#include "ops/ops.h"

namespace fp8rl::gpu_test {

struct Harness {
  // wgmma = false keeps attention on the mma.sync kernel even where the wgmma one runs;
  // tiled_attention_backward = false runs the attention backward's reference kernels.
  explicit Harness(bool perf, bool wgmma = true, bool tiled_attention_backward = true);
  Arena arena;  // CPU scratch
  Context cpu;
  std::unique_ptr<CudaDevice> dev;
  Context gpu;
  bool perf = false;
  bool exhaustive = false;               // cases that sample a large space cover all of it
  bool tiled_attention_backward = true;  // CudaDeviceOptions::tiled_attention_backward
};

// One comparison of a case: err against bound (NaN err fails).
struct Check {
  std::string what;
  double err = 0, bound = 0;
  bool ok = false;
};

struct Outcome {
  std::vector<Check> checks;
  double seconds = 0;  // perf: per call
  double bytes = 0;    // perf: bytes the op must move (GB/s)
  double flops = 0;    // perf: floating-point operations (TFLOP/s)
  std::string info;    // e.g. the GEMM path taken
};

struct OpCase {
  std::string name;
  std::function<void(Harness&, Outcome&)> run;
  bool quick = false;  // part of the --quick subset (compute-sanitizer runs)
};

std::vector<OpCase> correctness_cases();
std::vector<OpCase> perf_cases();

// ---- helpers (harness.cpp)

// Host f32 values uniform in [-bound, bound], each exactly a bf16 (so the CPU and the GPU see
// the same inputs).
Tensor host_values(Shape s, uint64_t seed, float bound = 1.0f);
// A device tensor of `dtype` (bf16 or f32 from f32 values; other dtypes byte-copied) in the
// device arena holding `host`.
TensorView to_device(Harness& h, const Tensor& host, DType dtype);
// Device tensor -> host tensor of the same dtype.
Tensor to_host(Harness& h, const TensorView& dev);
// Device or host bf16/f32 tensor -> host f32.
Tensor as_f32(Harness& h, const TensorView& t);

// Guard bytes around the device allocations made between construction and seal(): everything
// in between is poisoned with 0xFF (NaN in bf16, f32 and e4m3); verify() checks that no byte
// outside the given outputs changed.
class Guard {
 public:
  explicit Guard(Harness& h);
  void seal();
  Check verify(const std::vector<TensorView>& outputs) const;

 private:
  Harness& h_;
  TensorView pre_, post_;
};

// max |gpu - ref| / scale (scale 0: max |ref|); NaN or Inf in gpu fails.
Check compare(const std::string& what, const Tensor& gpu, const Tensor& ref, double bound,
              double scale = 0);
// A pass/fail check with err = value.
Check expect_le(const std::string& what, double value, double bound);

// Seconds per call of fn on the device (synchronized, after two warm-up calls).
double time_op(Harness& h, const std::function<void()>& fn, int iters = 10);
// The same for ops on another device context (e.g. a CudaDevice opened with other options).
double time_op(Context& ctx, const std::function<void()>& fn, int iters = 10);

}  // namespace fp8rl::gpu_test
