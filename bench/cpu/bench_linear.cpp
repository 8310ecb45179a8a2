// CPU linear layer throughput: the batch-invariant GEMM alone, and the whole FP8 linear
// (weight dequantization + activation fake-quantization + GEMM) per scheme.
//   build/bench/cpu/bench_cpu_linear [--benchmark_filter=...]
// Reports GFLOP/s (2*M*N*K per call); the roofline floor is the machine's FMA peak
// (cores x 2 FMA ports x 8 lanes x 2 FLOP x clock), printed as the "peak_gflops" counter
// from an fma-chain loop measured in the same run.
#include <benchmark/benchmark.h>

#include "core/parallel.h"
#include "core/rng.h"
#include "ops/cpu/gemm.h"
#include "ops/ops.h"
#include "quant/fp8.h"

using namespace fp8rl;

namespace {

Tensor random_tensor(Shape s, DType dt, uint64_t seed) {
  Tensor f = Tensor::empty(s, DType::f32);
  for (int64_t i = 0; i < s.numel(); ++i) f.ptr<float>()[i] = 0.05f * normal01(seed, uint64_t(i));
  if (dt == DType::f32) return f;
  Tensor t = Tensor::empty(s, dt);
  convert(f.ptr<float>(), DType::f32, t.view().data, dt, size_t(s.numel()));
  return t;
}

void BM_Gemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const Tensor x = random_tensor({m, k}, DType::f32, 1), w = random_tensor({n, k}, DType::f32, 2);
  Tensor out = Tensor::empty({m, n}, DType::f32);
  Arena arena(size_t(num_threads()) * 16 * size_t(k) * 4 + 4096);
  const auto rows = [&](int64_t n0, int64_t n1, float* dst) {
    std::copy_n(w.ptr<float>() + n0 * k, (n1 - n0) * k, dst);
  };
  for (auto _ : state) {
    ops::cpu::gemm_batch_invariant(arena, x.ptr<float>(), m, k, n, rows, out.ptr<float>());
    benchmark::DoNotOptimize(out.ptr<float>());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(double(2 * m * n * k) * double(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Gemm)
    ->Args({256, 2048, 768})
    ->Args({256, 768, 2048})
    ->Args({1, 2048, 768})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_Linear(benchmark::State& state) {
  const Fp8Scheme scheme = Fp8Scheme(state.range(0));
  const int64_t m = 256, n = 2048, k = 768;
  const Tensor x = random_tensor({m, k}, DType::f32, 3);
  const Tensor w16 = random_tensor({n, k}, DType::bf16, 4);
  LinearWeight w;
  Tensor q, s;
  if (scheme == Fp8Scheme::off) {
    w.weight = w16.view();
  } else {
    q = Tensor::empty({n, k}, DType::f8e4m3);
    s = Tensor::empty(weight_scale_shape(scheme, n, k), DType::f32);
    quantize_weight(w16, scheme, q, s);
    w.weight = q.view();
    w.scales = s.view();
    w.scheme = scheme;
    w.act = matching_act_scaling(scheme);
  }
  Arena arena(ops::linear_scratch_bytes(w, m) + 4096);
  Context ctx{Device::cpu, &arena};
  Tensor out = Tensor::empty({m, n}, DType::f32);
  for (auto _ : state) {
    ops::linear(ctx, x, w, out);
    benchmark::DoNotOptimize(out.ptr<float>());
  }
  state.SetLabel(std::string(scheme_name(scheme)));
  state.counters["GFLOP/s"] = benchmark::Counter(double(2 * m * n * k) * double(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Linear)->DenseRange(0, 3)->Unit(benchmark::kMillisecond)->UseRealTime();

// The floor: independent fma chains, 8 lanes x 8 accumulators, as fast as the core goes.
void BM_FmaPeak(benchmark::State& state) {
  float acc[64] = {};
  const float a = 1.0000001f, b = 1e-7f;
  for (auto _ : state) {
    for (int r = 0; r < 4096; ++r) {
#pragma omp simd
      for (int j = 0; j < 64; ++j) acc[j] = acc[j] * a + b;
    }
    benchmark::DoNotOptimize(acc);
  }
  state.counters["peak_gflops_1core"] =
      benchmark::Counter(2.0 * 64 * 4096 * double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FmaPeak)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
