// Op cases: FP8 activation quantization (standalone and fused into its producer, codes
// bit-exact with the recipe), weight quantization, and linears on every GEMM path.
#include <cmath>
#include <cstring>

#include "harness.h"
#include "model/rope.h"
#include "op_cases.h"
#include "ops/uniform_hash.h"
#include "quant/fp8.h"
#include "tolerances.h"

namespace fp8rl::gpu_test {

using test::kBf16HalfUlp;
using test::kCudaAttention;
using test::kCudaBf16Op;
using test::kCudaFp8Gemm;

// ---- FP8 activations ---------------------------------------------------------------------

// GPU quantized activation -> codes [rows, cols] and scales in the CPU's row-major layout.
struct HostQuant {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  std::vector<uint8_t> pad_codes;  // codes of the pad rows
  std::vector<float> pad_scales;   // scales of the pad rows
};

HostQuant download_quant(Harness& h, const ops::QuantizedActivation& q) {
  HostQuant r;
  const Tensor codes = to_host(h, q.codes), scales = to_host(h, q.scales);
  const uint8_t* c = codes.ptr<uint8_t>();
  r.codes.assign(c, c + q.rows * q.cols);
  r.pad_codes.assign(c + q.rows * q.cols, c + q.padded_rows * q.cols);
  const float* s = scales.ptr<float>();
  if (q.act == ActScaling::group) {
    const int64_t g = (q.cols + 127) / 128;
    r.scales.resize(size_t(q.rows * g));
    for (int64_t m = 0; m < q.rows; ++m)
      for (int64_t b = 0; b < g; ++b) r.scales[size_t(m * g + b)] = s[b * q.padded_rows + m];
    for (int64_t m = q.rows; m < q.padded_rows; ++m)
      for (int64_t b = 0; b < g; ++b) r.pad_scales.push_back(s[b * q.padded_rows + m]);
  } else {
    r.scales.assign(s, s + scales.numel());
  }
  return r;
}

float scale_of(ActScaling act, const std::vector<float>& s, int64_t m, int64_t k, int64_t cols) {
  if (act == ActScaling::token) return s[size_t(m)];
  if (act == ActScaling::group) return s[size_t(m * ((cols + 127) / 128) + k / 128)];
  return s[0];
}

// Bit-exact comparison of GPU and CPU quantization of the same values, plus the pad rows.
void expect_bit_exact(Outcome& o, const HostQuant& g, const ops::QuantizedActivation& ref) {
  int64_t code_diff = 0, scale_diff = 0;
  const uint8_t* rc = ref.codes.ptr<uint8_t>();
  for (size_t i = 0; i < g.codes.size(); ++i) code_diff += g.codes[i] != rc[i];
  const float* rs = ref.scales.ptr<float>();
  for (size_t i = 0; i < g.scales.size(); ++i)
    scale_diff += std::memcmp(&g.scales[i], &rs[i], 4) != 0;
  o.checks.push_back(expect_le("codes differing (bit-exact)", double(code_diff), 0));
  o.checks.push_back(expect_le("scales differing (bit-exact)", double(scale_diff), 0));
  int64_t bad_pad = 0;
  for (uint8_t c : g.pad_codes) bad_pad += c != 0;
  for (float s : g.pad_scales) bad_pad += s != 1.0f;
  o.checks.push_back(expect_le("pad rows not (code 0, scale 1)", double(bad_pad), 0));
}

// Fused ops: codes may differ by one e4m3 step for a few values near a rounding midpoint.
void expect_close_quant(Outcome& o, const HostQuant& g, const ops::QuantizedActivation& ref,
                        double flip_bound, double scale_rel) {
  const uint8_t* rc = ref.codes.ptr<uint8_t>();
  const float* rs = ref.scales.ptr<float>();
  double worst_scale = 0, worst_value = 0;
  for (size_t i = 0; i < g.scales.size(); ++i)
    worst_scale = std::max(worst_scale, std::fabs(double(g.scales[i]) - rs[i]) / rs[i]);
  int64_t flips = 0;
  std::vector<float> rsv(rs, rs + g.scales.size());
  for (int64_t m = 0; m < ref.rows; ++m)
    for (int64_t k = 0; k < ref.cols; ++k) {
      const size_t i = size_t(m * ref.cols + k);
      const float sg = scale_of(ref.act, g.scales, m, k, ref.cols);
      const float sr = scale_of(ref.act, rsv, m, k, ref.cols);
      const double a = double(e4m3_to_f32(g.codes[i])) * sg, b = double(e4m3_to_f32(rc[i])) * sr;
      if (!std::isfinite(a)) {
        worst_value = INFINITY;
        continue;
      }
      flips += g.codes[i] != rc[i];
      // One e4m3 step: 2^-3 of the value (normals) or sr * 2^-9 (subnormals).
      const double allowed =
          std::max(std::fabs(a), std::fabs(b)) / 8 + sr / 512.0 + std::fabs(b) * scale_rel;
      worst_value = std::max(worst_value, std::fabs(a - b) / allowed);
    }
  o.checks.push_back(expect_le("scale rel diff", worst_scale, scale_rel));
  o.checks.push_back(
      expect_le("codes differing (fraction)", double(flips) / double(g.codes.size()), flip_bound));
  o.checks.push_back(expect_le("value diff / one e4m3 step", worst_value, 1.0));
  int64_t bad_pad = 0;
  for (uint8_t c : g.pad_codes) bad_pad += c != 0;
  for (float s : g.pad_scales) bad_pad += s != 1.0f;
  o.checks.push_back(expect_le("pad rows not (code 0, scale 1)", double(bad_pad), 0));
}

// Values whose quotient by the row's scale lands on or within a few fp32 ulps of every e4m3
// rounding midpoint (and of subnormal ones, and of the saturation boundary), for scales with
// long significands: the inputs where the device's division (a reciprocal multiply with an
// fma correction, common.cuh fp8_quotient) would part from the recipe's IEEE division if the
// correction fell short. Codes must match bit for bit.
void quantize_midpoints_case(Harness& h, Outcome& o, ActScaling act) {
  std::vector<float> mids;  // e4m3 rounding midpoints in (0, 448), and 464
  for (int e = -9; e <= 8; ++e)
    for (int mnt = 0; mnt < 8; ++mnt) {
      const float mid = std::ldexp(1.0f + (2.0f * float(mnt) + 1.0f) / 16.0f, e);
      if (mid < 440.0f) mids.push_back(mid);
    }
  for (int k = 0; k < 8; ++k) mids.push_back(std::ldexp(float(2 * k + 1), -10));  // subnormal
  const int64_t cols = int64_t(mids.size()) * 8 + 1, rows = 37;
  Tensor x = Tensor::empty({rows, cols}, DType::f32);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x.ptr<float>() + r * cols;
    const float amax = 448.0f * (1.0f + 0.01371f * float(r + 1));
    const float s = amax / 448.0f;  // the recipe's scale for this row
    row[0] = amax;
    int64_t j = 1;
    for (float mid : mids)
      for (int nudge = -4; nudge < 4; ++nudge) {
        float v = mid * s;
        for (int i = 0; i < std::abs(nudge); ++i)
          v = std::nextafter(v, nudge < 0 ? 0.0f : INFINITY);
        row[j] = j % 2 ? v : -v;
        ++j;
      }
  }
  const ops::QuantizedActivation ref = ops::alloc_quantized(h.cpu, act, rows, cols);
  ops::quantize(h.cpu, x, ref);
  const TensorView x_d = to_device(h, x, DType::f32);
  const ops::QuantizedActivation q = ops::alloc_quantized(h.gpu, act, rows, cols);
  ops::quantize(h.gpu, x_d, q);
  expect_bit_exact(o, download_quant(h, q), ref);
}

// The quantizers' division against IEEE division on the device, quotient bits equal, for
// every dividend significand and the divisor significands where a one-step correction has the
// least margin (next to 2: the reciprocal's rounding error relative to the divisor is largest)
// and next to 1, and 4096 spread over the rest: 2^36 pairs. With --exhaustive every divisor:
// all 2^46 pairs, the proof that the shortcut is the recipe (a minute on an H200).
void fp8_quotient_case(Harness& h, Outcome& o) {
  constexpr uint32_t kSignificands = 1u << 23;
  struct Range {
    uint32_t first, count, step;
  };
  std::vector<Range> ranges = {{0, 2048, 1}, {kSignificands - 2048, 2048, 1}, {1021, 4096, 2039}};
  if (h.exhaustive) ranges = {{0, kSignificands, 1}};
  uint64_t mismatches = 0, pairs = 0;
  uint32_t bad[2] = {0, 0};
  for (const Range& r : ranges) {
    uint32_t b[2] = {0, 0};
    const uint64_t n = h.dev->check_fp8_quotient(r.first, r.count, r.step, b);
    if (n != 0) bad[0] = b[0], bad[1] = b[1];
    mismatches += n;
    pairs += uint64_t(r.count) * kSignificands;
  }
  float a = 0, d = 0;
  std::memcpy(&a, &bad[0], 4);
  std::memcpy(&d, &bad[1], 4);
  o.info = fmt::format("{} pairs{}", pairs,
                       mismatches ? fmt::format(", e.g. {:a} / {:a}", double(a), double(d)) : "");
  o.checks.push_back(expect_le("quotients differing from IEEE division", double(mismatches), 0));
}

void quantize_case(Harness& h, Outcome& o, ActScaling act, int64_t m, int64_t k, float bound) {
  Tensor x = host_values({m, k}, 81, bound);
  if (m > 2)  // a zero row (scale 1) and a zero group
    for (int64_t j = 0; j < k; ++j) x.ptr<float>()[k + j] = 0.0f;
  float static_scale = 0;
  if (act == ActScaling::static_tensor) static_scale = bound / 300.0f;  // saturates some values
  const ops::QuantizedActivation ref = ops::alloc_quantized(h.cpu, act, m, k);
  ops::quantize(h.cpu, x, ref, static_scale);
  const TensorView x_d = to_device(h, x, DType::bf16);
  Guard g(h);
  const ops::QuantizedActivation q = ops::alloc_quantized(h.gpu, act, m, k);
  g.seal();
  ops::quantize(h.gpu, x_d, q, static_scale);
  expect_bit_exact(o, download_quant(h, q), ref);
  o.checks.push_back(g.verify({q.codes, q.scales}));
}

void rms_norm_quant_case(Harness& h, Outcome& o, ActScaling act, int64_t m, int64_t k,
                         bool plus_one) {
  const Tensor x = host_values({m, k}, 91, 3.0f), w = host_values({k}, 92, 1.0f);
  const ops::QuantizedActivation ref = ops::alloc_quantized(h.cpu, act, m, k);
  ops::rms_norm_quant(h.cpu, x, w, 1e-6f, plus_one, ref);
  const TensorView x_d = to_device(h, x, DType::bf16), w_d = to_device(h, w, DType::f32);
  Guard g(h);
  const ops::QuantizedActivation q = ops::alloc_quantized(h.gpu, act, m, k);
  g.seal();
  ops::rms_norm_quant(h.gpu, x_d, w_d, 1e-6f, plus_one, q);
  const bool tensor = act == ActScaling::tensor;
  expect_close_quant(o, download_quant(h, q), ref,
                     tensor ? test::kFp8TensorFusedFlips : test::kFp8FusedFlips,
                     tensor ? test::kFp8TensorScaleRel : test::fused_scale_bound(k));
  o.checks.push_back(g.verify({q.codes, q.scales}));
}

// x += delta; q = quantize(rms_norm(x)). The residual is one bf16 op; the codes are checked as
// rms_norm_quant's against the CPU quantization of the norm of the bf16-rounded sum (the
// values the GPU normalizes), and must equal the unfused CUDA add + rms_norm_quant bit for bit.
void add_rms_norm_quant_case(Harness& h, Outcome& o, ActScaling act, int64_t m, int64_t k,
                             bool plus_one) {
  const Tensor x = host_values({m, k}, 221, 3.0f), delta = host_values({m, k}, 222, 3.0f);
  const Tensor w = host_values({k}, 223, 1.0f);
  Tensor ref_x = copy_of(x);
  const ops::QuantizedActivation ref_fused = ops::alloc_quantized(h.cpu, act, m, k);
  ops::add_rms_norm_quant(h.cpu, ref_x, delta, w, 1e-6f, plus_one, ref_fused);
  const ops::QuantizedActivation ref = ops::alloc_quantized(h.cpu, act, m, k);
  ops::rms_norm_quant(h.cpu, bf16_sum(x, delta), w, 1e-6f, plus_one, ref);
  const TensorView w_d = to_device(h, w, DType::f32), delta_d = to_device(h, delta, DType::bf16);
  Guard g(h);
  const TensorView x_d = ops::scratch_alloc(h.gpu, {m, k}, DType::bf16);
  const ops::QuantizedActivation q = ops::alloc_quantized(h.gpu, act, m, k);
  g.seal();
  upload_into(h, x, x_d);
  ops::add_rms_norm_quant(h.gpu, x_d, delta_d, w_d, 1e-6f, plus_one, q);
  o.checks.push_back(compare("x (residual)", as_f32(h, x_d), ref_x, kCudaBf16Op));
  const bool tensor = act == ActScaling::tensor;
  expect_close_quant(o, download_quant(h, q), ref,
                     tensor ? test::kFp8TensorFusedFlips : test::kFp8FusedFlips,
                     tensor ? test::kFp8TensorScaleRel : test::fused_scale_bound(k));
  o.checks.push_back(g.verify({x_d, q.codes, q.scales}));
  const TensorView x2 = to_device(h, x, DType::bf16);
  const ops::QuantizedActivation q2 = ops::alloc_quantized(h.gpu, act, m, k);
  ops::add(h.gpu, x2, delta_d, x2);
  ops::rms_norm_quant(h.gpu, x2, w_d, 1e-6f, plus_one, q2);
  o.checks.push_back(expect_le("codes != add + rms_norm_quant (bit-exact)",
                               bytes_differing(h, q.codes, q2.codes), 0));
  o.checks.push_back(expect_le("scales != add + rms_norm_quant (bit-exact)",
                               bytes_differing(h, q.scales, q2.scales), 0));
}

void gated_quant_case(Harness& h, Outcome& o, ActScaling act, int64_t m, int64_t k, bool silu) {
  const Tensor gate = host_values({m, k}, 93, 4.0f), up = host_values({m, k}, 94, 2.0f);
  const ops::QuantizedActivation ref = ops::alloc_quantized(h.cpu, act, m, k);
  if (silu)
    ops::silu_mul_quant(h.cpu, gate, up, ref);
  else
    ops::gelu_tanh_mul_quant(h.cpu, gate, up, ref);
  const TensorView g_d = to_device(h, gate, DType::bf16), u_d = to_device(h, up, DType::bf16);
  Guard g(h);
  const ops::QuantizedActivation q = ops::alloc_quantized(h.gpu, act, m, k);
  g.seal();
  if (silu)
    ops::silu_mul_quant(h.gpu, g_d, u_d, q);
  else
    ops::gelu_tanh_mul_quant(h.gpu, g_d, u_d, q);
  const bool tensor = act == ActScaling::tensor;
  expect_close_quant(o, download_quant(h, q), ref,
                     tensor ? test::kFp8TensorFusedFlips : test::kFp8FusedFlips,
                     tensor ? test::kFp8TensorScaleRel : test::fused_scale_bound(1));
  o.checks.push_back(g.verify({q.codes, q.scales}));
}

void quantize_weight_case(Harness& h, Outcome& o, Fp8Scheme s, int64_t n, int64_t k) {
  const Tensor w = host_values({n, k}, 101, 0.3f);
  Tensor q = Tensor::empty({n, k}, DType::f8e4m3);
  Tensor sc = Tensor::empty(weight_scale_shape(s, n, k), DType::f32);
  quantize_weight(w, s, q, sc);
  const TensorView w_d = to_device(h, w, DType::bf16);
  const TensorView q_d = ops::scratch_alloc(h.gpu, {n, k}, DType::f8e4m3);
  const TensorView s_d = ops::scratch_alloc(h.gpu, sc.shape(), DType::f32);
  ops::quantize_weight(h.gpu, w_d, s, q_d, s_d);
  const Tensor qg = to_host(h, q_d), sg = to_host(h, s_d);
  o.checks.push_back(expect_le("codes differing (bit-exact)",
                               double(std::memcmp(qg.view().data, q.view().data, q.nbytes()) != 0),
                               0));
  o.checks.push_back(
      expect_le("scales differing (bit-exact)",
                double(std::memcmp(sg.view().data, sc.view().data, sc.nbytes()) != 0), 0));
}

// ---- linear layers -------------------------------------------------------------------------

// A random weight, quantized on the CPU with `scheme` (off: bf16 values), copied to the device.
std::unique_ptr<DeviceLinear> make_linear(Harness& h, int64_t n, int64_t k, Fp8Scheme scheme,
                                          ActScaling act, bool bias, uint64_t seed) {
  auto l = std::make_unique<DeviceLinear>();
  l->w_values = host_values({n, k}, seed, 1.0f / std::sqrt(float(k)) * 1.7f);
  if (scheme == Fp8Scheme::off) {
    l->cpu.weight = l->w_values.view();
  } else {
    l->w_codes = Tensor::empty({n, k}, DType::f8e4m3);
    l->w_scales = Tensor::empty(weight_scale_shape(scheme, n, k), DType::f32);
    quantize_weight(l->w_values, scheme, l->w_codes, l->w_scales);
    l->cpu.weight = l->w_codes.view();
    l->cpu.scales = l->w_scales.view();
    l->cpu.scheme = scheme;
    l->cpu.act = act;
    if (act == ActScaling::static_tensor) l->cpu.input_scale = 0.01f;
  }
  if (bias) {
    l->bias = host_values({n}, seed + 1, 0.5f);
    l->cpu.bias = l->bias.view();
  }
  l->gpu = l->cpu;
  auto upload = [&](const TensorView& host, DType dt) {
    if (host.empty()) return host;
    l->storage.emplace_back(h.gpu, size_t(host.numel()) * dtype_size(dt));
    TensorView d = l->storage.back().view(host.shape, dt);
    Tensor conv = Tensor::empty(host.shape, dt);
    convert(host.data, host.dtype, conv.view().data, dt, size_t(host.numel()));
    ops::copy(h.gpu, conv.view(), d);
    return d;
  };
  l->gpu.weight = upload(l->cpu.weight, scheme == Fp8Scheme::off ? DType::bf16 : DType::f8e4m3);
  l->gpu.scales = upload(l->cpu.scales, DType::f32);
  l->gpu.bias = upload(l->cpu.bias, DType::f32);
  ops::prepare_linear(h.gpu, l->gpu, l->storage);
  return l;
}

// Which bound a weight/activation pair gets on this device: the dequantized bf16 fallback is
// looser than a native FP8 GEMM.
bool native_fp8(Harness& h, Fp8Scheme s, ActScaling act, int64_t n, int64_t k) {
  if (s == Fp8Scheme::off || act == ActScaling::none) return false;
  if (n % 16 != 0 || k % 16 != 0) return false;
  if (h.dev->gemm_path(s).find("fallback") != std::string::npos) return false;
  const bool per_tensor = act == ActScaling::tensor || act == ActScaling::static_tensor;
  if (s == Fp8Scheme::tensor) return per_tensor || act == ActScaling::token;
  if (s == Fp8Scheme::row) return per_tensor || act == ActScaling::token;
  return act == ActScaling::group;
}

void linear_case(Harness& h, Outcome& o, int64_t m, int64_t n, int64_t k, Fp8Scheme scheme,
                 ActScaling act, bool bias, DType out_dtype, bool prequantized) {
  auto l = make_linear(h, n, k, scheme, act, bias, 111);
  const Tensor x = host_values({m, k}, 112, 2.0f);
  Tensor ref = Tensor::empty({m, n}, DType::f32);
  ops::linear(h.cpu, x, l->cpu, ref);
  const TensorView x_d = to_device(h, x, DType::bf16);
  ops::QuantizedActivation xq;
  if (prequantized) {
    xq = ops::alloc_quantized(h.gpu, act, m, k);
    ops::quantize(h.gpu, x_d, xq);
  }
  Guard g(h);
  const TensorView out = ops::scratch_alloc(h.gpu, {m, n}, out_dtype);
  g.seal();
  const ops::Output kind = out_dtype == DType::f32 ? ops::Output::f32 : ops::Output::activation;
  if (prequantized)
    ops::linear(h.gpu, xq, l->gpu, out, kind);
  else
    ops::linear(h.gpu, x_d, l->gpu, out, kind);
  double bound;
  if (scheme == Fp8Scheme::off)
    bound = out_dtype == DType::f32 ? test::cuda_f32_gemm_bound(k) : kCudaBf16Op;
  else
    bound = native_fp8(h, scheme, act, n, k) ? kCudaFp8Gemm : test::kCudaDequantGemm;
  o.info = h.dev->last_linear_path();
  o.checks.push_back(compare("out", as_f32(h, out), ref, bound));
  o.checks.push_back(g.verify({out}));
}

// Decode-sized FP8-row GEMMs on two streams (CudaDeviceOptions::concurrent_linears): a lone
// GEMM as two K halves summed in fp32 (linear) and two GEMMs side by side (linear_pair, gate
// and up), eager and replayed from a CUDA graph, against the CPU and against a device with the
// option off, which runs one whole GEMM at a time. The path names show which ran: with the
// option off (the control) neither concurrent path may be taken.
void concurrent_linear_case(Harness& h, Outcome& o, int64_t m, bool bias) {
  // K long enough for the halves (ops/cuda/linear.cpp kHalvesMinK); the pair takes no bias.
  const int64_t k = 8192, n0 = 1024, n1 = 1536;
  auto wh = make_linear(h, n0, k, Fp8Scheme::row, ActScaling::token, bias, 120);
  auto w0 = make_linear(h, n0, k, Fp8Scheme::row, ActScaling::token, false, 121);
  auto w1 = make_linear(h, n1, k, Fp8Scheme::row, ActScaling::token, false, 123);
  const Tensor x = host_values({m, k}, 122, 2.0f);
  Tensor refh = Tensor::empty({m, n0}, DType::f32), ref0 = Tensor::empty({m, n0}, DType::f32),
         ref1 = Tensor::empty({m, n1}, DType::f32);
  ops::linear(h.cpu, x, wh->cpu, refh);
  ops::linear(h.cpu, x, w0->cpu, ref0);
  ops::linear(h.cpu, x, w1->cpu, ref1);
  const TensorView x_d = to_device(h, x, DType::bf16);
  const ops::QuantizedActivation xq = ops::alloc_quantized(h.gpu, ActScaling::token, m, k);
  ops::quantize(h.gpu, x_d, xq);
  Guard g(h);
  const TensorView halves = ops::scratch_alloc(h.gpu, {m, n0}, DType::bf16);
  const TensorView pair0 = ops::scratch_alloc(h.gpu, {m, n0}, DType::bf16);
  const TensorView pair1 = ops::scratch_alloc(h.gpu, {m, n1}, DType::bf16);
  const TensorView whole = ops::scratch_alloc(h.gpu, {m, n0}, DType::bf16);
  const TensorView seq0 = ops::scratch_alloc(h.gpu, {m, n0}, DType::bf16);
  const TensorView seq1 = ops::scratch_alloc(h.gpu, {m, n1}, DType::bf16);
  g.seal();
  auto run = [&](Context& ctx, const TensorView& a, const TensorView& b0, const TensorView& b1,
                 std::string& path_a, std::string& path_b, CudaDevice& dev) {
    ops::linear(ctx, x_d, wh->gpu, a);
    path_a = dev.last_linear_path();
    ops::linear_pair(ctx, xq, w0->gpu, b0, w1->gpu, b1);
    path_b = dev.last_linear_path();
  };
  std::string halves_path, pair_path, whole_path, seq_path;
  run(h.gpu, halves, pair0, pair1, halves_path, pair_path, *h.dev);
  h.dev->synchronize();  // the second device's stream reads x_d and xq
  CudaDeviceOptions off_opt;
  off_opt.concurrent_linears = false;
  CudaDevice off_dev(off_opt);
  Context off = off_dev.context();
  run(off, whole, seq0, seq1, whole_path, seq_path, off_dev);
  off_dev.synchronize();

  auto has = [](const std::string& s, const char* what) {
    return s.find(what) != std::string::npos;
  };
  o.checks.push_back({"K halves taken", has(halves_path, "K halves") ? 0.0 : 1.0, 0.0,
                      has(halves_path, "K halves")});
  o.checks.push_back({"pair taken", has(pair_path, "pair on two streams") ? 0.0 : 1.0, 0.0,
                      has(pair_path, "pair on two streams")});
  const bool off_single = !has(whole_path, "two streams") && !has(seq_path, "two streams");
  o.checks.push_back({"option off: one GEMM at a time", off_single ? 0.0 : 1.0, 0.0, off_single});
  o.checks.push_back(compare("K halves vs CPU", as_f32(h, halves), refh, kCudaFp8Gemm));
  o.checks.push_back(compare("pair first vs CPU", as_f32(h, pair0), ref0, kCudaFp8Gemm));
  o.checks.push_back(compare("pair second vs CPU", as_f32(h, pair1), ref1, kCudaFp8Gemm));
  o.checks.push_back(compare("one GEMM vs CPU", as_f32(h, whole), refh, kCudaFp8Gemm));
  // The pair runs the plans of the sequential calls, so its bits are theirs; the K halves
  // differ from one GEMM only in the order of the fp32 sum (one bf16 rounding apart at most).
  auto bits_equal = [&](const TensorView& a, const TensorView& b) {
    const Tensor ha = to_host(h, a), hb = to_host(h, b);
    return std::memcmp(ha.view().data, hb.view().data, ha.nbytes()) == 0;
  };
  const bool pair_same = bits_equal(pair0, seq0) && bits_equal(pair1, seq1);
  o.checks.push_back({"pair == sequential bit for bit", pair_same ? 0.0 : 1.0, 0.0, pair_same});
  o.checks.push_back(
      compare("K halves vs one GEMM", as_f32(h, halves), as_f32(h, whole), 2 * kBf16HalfUlp));

  // Captured: the fork and join become graph edges; a replay rewrites every output.
  const Tensor eager_halves = to_host(h, halves), eager0 = to_host(h, pair0),
               eager1 = to_host(h, pair1);
  h.dev->begin_capture();
  ops::linear(h.gpu, x_d, wh->gpu, halves);
  ops::linear_pair(h.gpu, xq, w0->gpu, pair0, w1->gpu, pair1);
  CudaGraph graph = h.dev->end_capture();
  for (const TensorView& t : {halves, pair0, pair1}) ops::fill(h.gpu, t, NAN);
  graph.replay();
  const bool replay_same =
      std::memcmp(to_host(h, halves).view().data, eager_halves.view().data,
                  eager_halves.nbytes()) == 0 &&
      std::memcmp(to_host(h, pair0).view().data, eager0.view().data, eager0.nbytes()) == 0 &&
      std::memcmp(to_host(h, pair1).view().data, eager1.view().data, eager1.nbytes()) == 0;
  o.checks.push_back({"graph replay == eager", replay_same ? 0.0 : 1.0, 0.0, replay_same});
  o.checks.push_back(g.verify({halves, pair0, pair1, whole, seq0, seq1}));
  o.info = fmt::format("{}; {}; off: {}; {} graph nodes", halves_path, pair_path, whole_path,
                       graph.nodes());
}

// A projection left as its two K-half sums (ops::linear_split) and the residual add that reads
// them (ops::SplitSum): on the default device the halves must be taken (path name) with `out`
// untouched, and their rounded sum must be the linear's value (CPU, kCudaFp8Gemm); a device with
// concurrent_linears off must not split (the control) and write `out`. add_rms_norm and
// add_rms_norm_quant of the SplitSum: the residual, the normed output and its codes against the
// CPU's of the bf16-rounded sums (as in add_rms_norm_case), and bit for bit against the same
// kernels reading the delta in bf16. (The CPU's SplitSum ops: test_cpu_ops.)
void split_sum_case(Harness& h, Outcome& o, int64_t m, int64_t n, int64_t k, bool bias) {
  auto l = make_linear(h, n, k, Fp8Scheme::row, ActScaling::token, bias, 140);
  const Tensor x = host_values({m, k}, 141, 2.0f);
  Tensor ref = Tensor::empty({m, n}, DType::f32);
  ops::linear(h.cpu, x, l->cpu, ref);
  const TensorView x_d = to_device(h, x, DType::bf16);
  const ops::QuantizedActivation xq = ops::alloc_quantized(h.gpu, ActScaling::token, m, k);
  ops::quantize(h.gpu, x_d, xq);
  Guard g(h);
  const TensorView parts = ops::scratch_alloc(h.gpu, {2, m, n}, DType::f32);
  const TensorView out = ops::scratch_alloc(h.gpu, {m, n}, DType::bf16);
  const TensorView out_off = ops::scratch_alloc(h.gpu, {m, n}, DType::bf16);
  g.seal();
  ops::fill(h.gpu, out, NAN);
  const Tensor out_before = to_host(h, out);
  const bool split = ops::linear_split(h.gpu, xq, l->gpu, out, parts);
  const std::string path = h.dev->last_linear_path();
  h.dev->synchronize();
  CudaDeviceOptions off_opt;
  off_opt.concurrent_linears = false;
  CudaDevice off_dev(off_opt);
  Context off = off_dev.context();
  const bool split_off = ops::linear_split(off, xq, l->gpu, out_off, parts);
  off_dev.synchronize();
  o.checks.push_back({"split taken", split ? 0.0 : 1.0, 0.0, split});
  o.checks.push_back({"option off: not split", split_off ? 1.0 : 0.0, 0.0, !split_off});
  const Tensor out_after = to_host(h, out);
  const bool untouched =
      std::memcmp(out_before.view().data, out_after.view().data, out_before.nbytes()) == 0;
  o.checks.push_back({"out untouched when split", untouched ? 0.0 : 1.0, 0.0, untouched});
  o.checks.push_back(compare("option off: out vs CPU", as_f32(h, out_off), ref, kCudaFp8Gemm));

  // The SplitSum's value, summed and rounded here as the kernels do.
  const Tensor hp = to_host(h, parts);
  Tensor sum = Tensor::empty({m, n}, DType::f32);
  for (int64_t i = 0; i < m * n; ++i)
    sum.ptr<float>()[i] = round_to_bf16(hp.ptr<float>()[i] + hp.ptr<float>()[m * n + i] +
                                        (bias ? l->bias.ptr<float>()[i % n] : 0.0f));
  o.checks.push_back(compare("rounded sum of the halves vs CPU linear", sum, ref, kCudaFp8Gemm));

  // The residual add reading the halves (x [m, n], norm weight [n]).
  const Tensor xr = host_values({m, n}, 142, 3.0f), w = host_values({n}, 143, 1.0f);
  const TensorView w_d = to_device(h, w, DType::f32);
  const ops::SplitSum ss_gpu{parts, bias ? l->gpu.bias : TensorView()};
  const Tensor xr_sum = bf16_sum(xr, sum);  // the residual the GPU normalizes
  Tensor ref_norm = Tensor::empty({m, n}, DType::f32);
  ops::rms_norm(h.cpu, xr_sum, w, 1e-6f, false, ref_norm);
  const TensorView xr_d = to_device(h, xr, DType::bf16);
  const TensorView normed = ops::scratch_alloc(h.gpu, {m, n}, DType::bf16);
  ops::add_rms_norm(h.gpu, xr_d, ss_gpu, w_d, 1e-6f, false, normed);
  o.checks.push_back(
      compare("add_rms_norm x vs CPU bf16 sum", as_f32(h, xr_d), xr_sum, kCudaBf16Op));
  o.checks.push_back(compare("add_rms_norm out vs CPU norm of the bf16 sum", as_f32(h, normed),
                             ref_norm, kCudaBf16Op));
  const TensorView sum_d = to_device(h, sum, DType::bf16);
  const TensorView xr2 = to_device(h, xr, DType::bf16);
  const TensorView normed2 = ops::scratch_alloc(h.gpu, {m, n}, DType::bf16);
  ops::add_rms_norm(h.gpu, xr2, sum_d, w_d, 1e-6f, false, normed2);
  o.checks.push_back(
      expect_le("add_rms_norm x != bf16 delta's (bit-exact)", bytes_differing(h, xr_d, xr2), 0));
  o.checks.push_back(expect_le("add_rms_norm out != bf16 delta's (bit-exact)",
                               bytes_differing(h, normed, normed2), 0));
  const TensorView xr3 = to_device(h, xr, DType::bf16), xr4 = to_device(h, xr, DType::bf16);
  const ops::QuantizedActivation q3 = ops::alloc_quantized(h.gpu, ActScaling::token, m, n);
  const ops::QuantizedActivation q4 = ops::alloc_quantized(h.gpu, ActScaling::token, m, n);
  ops::add_rms_norm_quant(h.gpu, xr3, ss_gpu, w_d, 1e-6f, false, q3);
  ops::add_rms_norm_quant(h.gpu, xr4, sum_d, w_d, 1e-6f, false, q4);
  const ops::QuantizedActivation ref_q = ops::alloc_quantized(h.cpu, ActScaling::token, m, n);
  ops::rms_norm_quant(h.cpu, xr_sum, w, 1e-6f, false, ref_q);
  expect_close_quant(o, download_quant(h, q3), ref_q, test::kFp8FusedFlips,
                     test::fused_scale_bound(n));
  o.checks.push_back(expect_le("add_rms_norm_quant codes != bf16 delta's (bit-exact)",
                               bytes_differing(h, q3.codes, q4.codes), 0));
  o.checks.push_back(expect_le("add_rms_norm_quant scales != bf16 delta's (bit-exact)",
                               bytes_differing(h, q3.scales, q4.scales), 0));
  o.checks.push_back(g.verify({parts, out, out_off}));
  o.info = path;
}

}  // namespace fp8rl::gpu_test
