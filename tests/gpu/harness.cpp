#include "harness.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "ops/gpu_support.h"
#include "ops/uniform_hash.h"

namespace fp8rl::gpu_test {

namespace {
constexpr int64_t kGuardBytes = 256;
}

Harness::Harness(bool perf_mode, bool wgmma, bool tiled_backward)
    : arena(size_t(1) << 28), perf(perf_mode), tiled_attention_backward(tiled_backward) {
  cpu = Context{Device::cpu, &arena};
  CudaDeviceOptions o;
  o.arena_bytes = size_t(perf_mode ? 6 : 1) << 30;
  o.wgmma_attention = wgmma;
  o.tiled_attention_backward = tiled_attention_backward;
  o.forced_capability = forced_capability_of(std::getenv("FP8RL_CUDA_CAPABILITY"));
  dev = std::make_unique<CudaDevice>(o);
  gpu = dev->context();
}

Tensor host_values(Shape s, uint64_t seed, float bound) {
  Tensor t = Tensor::empty(s, DType::f32);
  float* p = t.ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = bf16_to_f32(f32_to_bf16(uniform_hash(seed, uint64_t(i), bound)));
  return t;
}

TensorView to_device(Harness& h, const Tensor& host, DType dtype) {
  TensorView dev = ops::scratch_alloc(h.gpu, host.shape(), dtype);
  if (host.dtype() == dtype) {
    ops::copy(h.gpu, host.view(), dev);
  } else {
    Tensor conv = Tensor::empty(host.shape(), dtype);
    convert(host.view().data, host.dtype(), conv.view().data, dtype, size_t(host.numel()));
    ops::copy(h.gpu, conv.view(), dev);
  }
  return dev;
}

Tensor to_host(Harness& h, const TensorView& dev) {
  Tensor t = Tensor::empty(dev.shape, dev.dtype);
  ops::copy(h.gpu, dev, t.view());
  return t;
}

Tensor as_f32(Harness& h, const TensorView& t) {
  Tensor host = t.device == Device::cpu ? Tensor() : to_host(h, t);
  const TensorView& src = t.device == Device::cpu ? t : host.view();
  Tensor out = Tensor::empty(t.shape, DType::f32);
  convert(src.data, src.dtype, out.view().data, DType::f32, size_t(src.numel()));
  return out;
}

Guard::Guard(Harness& h) : h_(h) {
  pre_ = ops::scratch_alloc(h.gpu, {kGuardBytes}, DType::f8e4m3);
}

void Guard::seal() {
  post_ = ops::scratch_alloc(h_.gpu, {kGuardBytes}, DType::f8e4m3);
  const int64_t bytes =
      static_cast<char*>(post_.data) + kGuardBytes - static_cast<char*>(pre_.data);
  std::vector<uint8_t> poison(size_t(bytes), 0xFF);
  ops::copy(h_.gpu, TensorView(poison.data(), DType::f8e4m3, {bytes}),
            TensorView(pre_.data, DType::f8e4m3, {bytes}, Device::cuda));
}

Check Guard::verify(const std::vector<TensorView>& outputs) const {
  char* base = static_cast<char*>(pre_.data);
  const int64_t bytes = static_cast<char*>(post_.data) + kGuardBytes - base;
  std::vector<uint8_t> got(static_cast<size_t>(bytes));
  ops::copy(h_.gpu, TensorView(base, DType::f8e4m3, {bytes}, Device::cuda),
            TensorView(got.data(), DType::f8e4m3, {bytes}));
  std::vector<bool> inside(size_t(bytes), false);
  for (const TensorView& o : outputs) {
    const int64_t off = static_cast<char*>(o.data) - base;
    for (int64_t i = 0; i < int64_t(o.nbytes()); ++i)
      if (off + i >= 0 && off + i < bytes) inside[size_t(off + i)] = true;
  }
  int64_t stray = 0;
  for (int64_t i = 0; i < bytes; ++i) stray += !inside[size_t(i)] && got[size_t(i)] != 0xFF;
  return expect_le("guard bytes changed", double(stray), 0.0);
}

Check compare(const std::string& what, const Tensor& gpu, const Tensor& ref, double bound,
              double scale) {
  Check c;
  c.what = what;
  c.bound = bound;
  if (gpu.numel() != ref.numel()) {
    c.err = INFINITY;
    c.what += " (size mismatch)";
    return c;
  }
  double diff = 0, mx = 0;
  bool finite = true;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double a = gpu.ptr<float>()[i], r = ref.ptr<float>()[i];
    if (!std::isfinite(a)) finite = false;
    diff = std::max(diff, std::fabs(a - r));
    mx = std::max(mx, std::fabs(r));
  }
  const double s = scale > 0 ? scale : mx;
  c.err = finite ? (s > 0 ? diff / s : diff) : INFINITY;
  c.ok = c.err <= bound;
  return c;
}

Check expect_le(const std::string& what, double value, double bound) {
  Check c;
  c.what = what;
  c.err = value;
  c.bound = bound;
  c.ok = value <= bound;
  return c;
}

double time_op(Harness& h, const std::function<void()>& fn, int iters) {
  return time_op(h.gpu, fn, iters);
}

double time_op(Context& ctx, const std::function<void()>& fn, int iters) {
  fn();
  fn();
  ops::synchronize(ctx);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  ops::synchronize(ctx);
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count() / iters;
}

}  // namespace fp8rl::gpu_test
