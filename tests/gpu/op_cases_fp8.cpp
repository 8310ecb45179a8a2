// Op cases: FP8 activation quantization (standalone and fused into its producer, codes
// bit-exact with the recipe), weight quantization, and linears on every GEMM path.
#include <cmath>
#include <cstring>
#include <functional>

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
using test::kCudaLoraGroup;

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

// The fused quantizer's plain output (for a LoRA adapter beside the FP8 linears): run again
// with `plain` (NaN-filled first, so a plain never written fails), its codes and scales must
// equal the run's without it, and plain the unfused op's output, both bit for bit.
void expect_plain_output(
    Harness& h, Outcome& o, const ops::QuantizedActivation& q, ActScaling act,
    const TensorView& unfused,
    const std::function<void(const ops::QuantizedActivation&, const TensorView&)>& run) {
  const TensorView plain = ops::scratch_alloc(h.gpu, unfused.shape, DType::bf16);
  ops::fill(h.gpu, plain, NAN);
  const ops::QuantizedActivation q2 = ops::alloc_quantized(h.gpu, act, q.rows, q.cols);
  run(q2, plain);
  o.checks.push_back(
      expect_le("plain != the unfused op (bit-exact)", bytes_differing(h, plain, unfused), 0));
  o.checks.push_back(expect_le("codes with plain != without (bit-exact)",
                               bytes_differing(h, q.codes, q2.codes), 0));
  o.checks.push_back(expect_le("scales with plain != without (bit-exact)",
                               bytes_differing(h, q.scales, q2.scales), 0));
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
  const TensorView normed = ops::scratch_alloc(h.gpu, {m, k}, DType::bf16);
  ops::rms_norm(h.gpu, x_d, w_d, 1e-6f, plus_one, normed);
  expect_plain_output(h, o, q, act, normed,
                      [&](const ops::QuantizedActivation& q2, const TensorView& plain) {
                        ops::rms_norm_quant(h.gpu, x_d, w_d, 1e-6f, plus_one, q2, plain);
                      });
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
  const TensorView normed = ops::scratch_alloc(h.gpu, {m, k}, DType::bf16);
  ops::rms_norm(h.gpu, x2, w_d, 1e-6f, plus_one, normed);
  expect_plain_output(
      h, o, q, act, normed, [&](const ops::QuantizedActivation& q3, const TensorView& plain) {
        const TensorView x3 = to_device(h, x, DType::bf16);
        ops::add_rms_norm_quant(h.gpu, x3, delta_d, w_d, 1e-6f, plus_one, q3, plain);
      });
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
  const TensorView product = ops::scratch_alloc(h.gpu, {m, k}, DType::bf16);
  if (silu)
    ops::silu_mul(h.gpu, g_d, u_d, product);
  else
    ops::gelu_tanh_mul(h.gpu, g_d, u_d, product);
  expect_plain_output(h, o, q, act, product,
                      [&](const ops::QuantizedActivation& q2, const TensorView& plain) {
                        if (silu)
                          ops::silu_mul_quant(h.gpu, g_d, u_d, q2, plain);
                        else
                          ops::gelu_tanh_mul_quant(h.gpu, g_d, u_d, q2, plain);
                      });
  // plain over gate itself (the inference forward's buffer reuse): the same values.
  const TensorView gate_copy = to_device(h, gate, DType::bf16);
  const ops::QuantizedActivation q3 = ops::alloc_quantized(h.gpu, act, m, k);
  if (silu)
    ops::silu_mul_quant(h.gpu, gate_copy, u_d, q3, gate_copy);
  else
    ops::gelu_tanh_mul_quant(h.gpu, gate_copy, u_d, q3, gate_copy);
  o.checks.push_back(expect_le("plain over gate != the unfused op (bit-exact)",
                               bytes_differing(h, gate_copy, product), 0));
  o.checks.push_back(expect_le("codes with plain over gate != without (bit-exact)",
                               bytes_differing(h, q.codes, q3.codes), 0));
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
    linear_pair(ctx, xq, w0->gpu, b0, w1->gpu, b1);
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
  linear_pair(h.gpu, xq, w0->gpu, pair0, w1->gpu, pair1);
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

// The weight-streaming kernel of few rows (CudaDeviceOptions::streaming_linears): the path
// taken (grouped for a pair) exactly up to kStreamingMaxRows, the outputs against the CPU linear,
// against a device with the kernel off (the control, which must run cuBLASLt), a row computed alone
// bit for bit equal to the same row among m (the sum order depends on neither the row count nor the
// other rows), and a graph replay equal to the eager call.
void streaming_case(Harness& h, Outcome& o, Fp8Scheme scheme, ActScaling act, int64_t m, int64_t n,
                    int64_t k, bool pair, bool bias) {
  auto w0 = make_linear(h, n, k, scheme, act, bias, 150);
  auto w1 = make_linear(h, n, k, scheme, act, false, 151);
  const Tensor x = host_values({m, k}, 152, 2.0f);
  Tensor ref0 = Tensor::empty({m, n}, DType::f32), ref1 = Tensor::empty({m, n}, DType::f32);
  ops::linear(h.cpu, x, w0->cpu, ref0);
  ops::linear(h.cpu, x, w1->cpu, ref1);
  const TensorView x_d = to_device(h, x, DType::bf16);
  const ops::QuantizedActivation xq = ops::alloc_quantized(h.gpu, act, m, k);
  ops::quantize(h.gpu, x_d, xq);
  const ops::QuantizedActivation x1 = ops::alloc_quantized(h.gpu, act, 1, k);
  ops::quantize(h.gpu, x_d.slice_rows(0, 1), x1);
  Guard g(h);
  const TensorView out0 = ops::scratch_alloc(h.gpu, {m, n}, DType::bf16);
  const TensorView out1 = ops::scratch_alloc(h.gpu, {m, n}, DType::bf16);
  const TensorView off0 = ops::scratch_alloc(h.gpu, {m, n}, DType::bf16);
  const TensorView off1 = ops::scratch_alloc(h.gpu, {m, n}, DType::bf16);
  const TensorView row0 = ops::scratch_alloc(h.gpu, {1, n}, DType::bf16);
  g.seal();
  auto call = [&](Context& ctx, const ops::QuantizedActivation& in, const TensorView& a,
                  const TensorView& b) {
    if (pair)
      linear_pair(ctx, in, w0->gpu, a, w1->gpu, b);
    else
      ops::linear(ctx, in, w0->gpu, a);
  };
  call(h.gpu, xq, out0, out1);
  const std::string path = h.dev->last_linear_path();
  h.dev->synchronize();
  CudaDeviceOptions off_opt;
  off_opt.streaming_linears = false;
  CudaDevice off_dev(off_opt);
  Context off = off_dev.context();
  call(off, xq, off0, off1);
  const std::string off_path = off_dev.last_linear_path();
  off_dev.synchronize();
  const bool expected = m <= 16;  // ops/cuda/kernels.h kStreamingMaxRows
  const bool taken =
      path.find(pair ? "weight streaming, grouped" : "weight streaming") != std::string::npos;
  o.checks.push_back({expected ? "streaming kernel taken" : "past its rows: streaming not taken",
                      taken == expected ? 0.0 : 1.0, 0.0, taken == expected});
  const bool off_other = off_path.find("streaming") == std::string::npos;
  o.checks.push_back({"option off: cuBLASLt", off_other ? 0.0 : 1.0, 0.0, off_other});
  o.checks.push_back(compare("out vs CPU", as_f32(h, out0), ref0, kCudaFp8Gemm));
  o.checks.push_back(compare("option off: out vs CPU", as_f32(h, off0), ref0, kCudaFp8Gemm));
  if (pair) {
    o.checks.push_back(compare("second out vs CPU", as_f32(h, out1), ref1, kCudaFp8Gemm));
    o.checks.push_back(compare("option off: second vs CPU", as_f32(h, off1), ref1, kCudaFp8Gemm));
  }
  if (act == ActScaling::token && expected) {  // per-tensor input scales couple the rows
    ops::linear(h.gpu, x1, w0->gpu, row0);
    o.checks.push_back(expect_le("row 0 alone != row 0 of M (bit-exact): bytes",
                                 bytes_differing(h, row0, out0.slice_rows(0, 1)), 0));
  }
  const Tensor eager = to_host(h, out0);
  h.dev->begin_capture();
  call(h.gpu, xq, out0, out1);
  CudaGraph graph = h.dev->end_capture();
  ops::fill(h.gpu, out0, NAN);
  graph.replay();
  const bool replay_same =
      std::memcmp(to_host(h, out0).view().data, eager.view().data, eager.nbytes()) == 0;
  o.checks.push_back({"graph replay == eager", replay_same ? 0.0 : 1.0, 0.0, replay_same});
  o.checks.push_back(g.verify({out0, out1, off0, off1, row0}));
  o.info = fmt::format("{}; off: {}", path, off_path);
}

// ops::linear_group with adapters against the CPU's group of the same (bf16-valued) adapters:
// the outputs within kCudaLoraGroup; the control, the same group without adapters, must miss
// the reference by more than that (so the adapters' term is really checked); the path that ran
// (at a streaming kernel's rows: the up products in its epilogue, and the down products in the
// same launch where the A matrices lie side by side without dropout, else, and on a device with
// streaming_lora_down off, before it); a graph replay equal to the eager call; the group of -x
// equal to -(the group of x) bit for bit (an odd function, so a down product read before this
// call's was written would show).
void linear_group_case(Harness& h, Outcome& o, Fp8Scheme scheme, int64_t m, std::vector<int64_t> ns,
                       int64_t k, int64_t r, bool adjacent, float p) {
  const ActScaling act = scheme == Fp8Scheme::off ? ActScaling::none : ActScaling::token;
  const size_t count = ns.size();
  std::vector<std::unique_ptr<DeviceLinear>> ws;
  for (size_t i = 0; i < count; ++i)
    ws.push_back(make_linear(h, ns[i], k, scheme, act, false, 160 + i));
  const Tensor x = host_values({m, k}, 170, 2.0f);
  const TensorView x_d = to_device(h, x, DType::bf16);
  const Tensor x_r = as_f32(h, x_d);  // the CPU reads the values the device holds
  // A matrices: one [count r, K] buffer sliced by rows (adjacent), or one buffer each.
  const Tensor a_all = host_values({int64_t(count) * r, k}, 171, 0.05f);
  const TensorView a_all_d = to_device(h, a_all, DType::bf16);
  std::vector<TensorView> a_d, b_d;
  std::vector<Tensor> a_h, b_h;
  for (size_t i = 0; i < count; ++i) {
    const int64_t r0 = int64_t(i) * r;
    if (adjacent) {
      a_d.push_back(a_all_d.slice_rows(r0, r0 + r));
    } else {
      Tensor ai = Tensor::empty({r, k}, DType::f32);
      std::memcpy(ai.ptr<float>(), a_all.ptr<float>() + r0 * k, size_t(r * k) * 4);
      a_d.push_back(to_device(h, ai, DType::bf16));
    }
    a_h.push_back(as_f32(h, a_d.back()));
    b_d.push_back(to_device(h, host_values({ns[i], r}, 180 + i, 0.05f), DType::bf16));
    b_h.push_back(as_f32(h, b_d.back()));
  }
  const float scale = 2.0f;
  std::vector<Tensor> ref;
  std::vector<ops::Projection> cpu_group, gpu_group, base_group;
  Guard g(h);
  std::vector<TensorView> outs, base_outs;
  for (size_t i = 0; i < count; ++i) {
    outs.push_back(ops::scratch_alloc(h.gpu, {m, ns[i]}, DType::bf16));
    base_outs.push_back(ops::scratch_alloc(h.gpu, {m, ns[i]}, DType::bf16));
  }
  g.seal();
  for (size_t i = 0; i < count; ++i) {
    ref.push_back(Tensor::empty({m, ns[i]}, DType::f32));
    const ops::LoraDropout d{p, 190 + i};
    cpu_group.push_back({&ws[i]->cpu, {a_h[i].view(), b_h[i].view(), scale}, ref[i].view(), d});
    gpu_group.push_back({&ws[i]->gpu, {a_d[i], b_d[i], scale}, outs[i], d});
    base_group.push_back({&ws[i]->gpu, {}, base_outs[i], {}});
  }
  ops::LinearInput cpu_in{x_r.view(), {}}, gpu_in{x_d, {}};
  if (act != ActScaling::none) {
    cpu_in.q = ops::alloc_quantized(h.cpu, act, m, k);
    ops::quantize(h.cpu, x_r.view(), cpu_in.q);
    gpu_in.q = ops::alloc_quantized(h.gpu, act, m, k);
    ops::quantize(h.gpu, x_d, gpu_in.q);
  }
  ops::linear_group(h.cpu, cpu_in, cpu_group);
  ops::linear_group(h.gpu, gpu_in, gpu_group);
  const std::string path = h.dev->last_linear_path();
  ops::linear_group(h.gpu, gpu_in, base_group);
  for (size_t i = 0; i < count; ++i) {
    o.checks.push_back(
        compare(fmt::format("out {} vs CPU", i), as_f32(h, outs[i]), ref[i], kCudaLoraGroup));
    const Check control = compare(fmt::format("control: out {} without adapter", i),
                                  as_f32(h, base_outs[i]), ref[i], kCudaLoraGroup);
    o.checks.push_back(expect_le(fmt::format("control: out {} without adapter matches", i),
                                 control.ok ? 1.0 : 0.0, 0.0));
  }
  const bool streaming = scheme != Fp8Scheme::off && m <= 16;
  if (streaming) {
    const bool one_launch = adjacent && p == 0.0f;
    const bool taken = path.find(one_launch ? "down and up products in the same launch"
                                            : "adapters in its epilogue") != std::string::npos;
    o.checks.push_back({one_launch ? "down and up products in the streaming launch"
                                   : "up products in the streaming epilogue",
                        taken ? 0.0 : 1.0, 0.0, taken});
    // The control: the down products as a GEMM before the launch, on a device without them.
    h.dev->synchronize();
    CudaDeviceOptions off_opt;
    off_opt.streaming_lora_down = false;
    CudaDevice off_dev(off_opt);
    Context off = off_dev.context();
    std::vector<ops::Projection> off_group = gpu_group;
    std::vector<TensorView> off_outs;
    for (size_t i = 0; i < count; ++i) {
      off_outs.push_back(ops::scratch_alloc(off, {m, ns[i]}, DType::bf16));
      off_group[i].out = off_outs[i];
    }
    ops::linear_group(off, gpu_in, off_group);
    const std::string off_path = off_dev.last_linear_path();
    off_dev.synchronize();
    const bool before = off_path.find("adapters in its epilogue") != std::string::npos;
    o.checks.push_back(
        {"option off: down products before the launch", before ? 0.0 : 1.0, 0.0, before});
    for (size_t i = 0; i < count; ++i)
      o.checks.push_back(compare(fmt::format("option off: out {} vs CPU", i),
                                 as_f32(h, off_outs[i]), ref[i], kCudaLoraGroup));
  }
  const Tensor eager = to_host(h, outs[0]);
  h.dev->begin_capture();
  ops::linear_group(h.gpu, gpu_in, gpu_group);
  CudaGraph graph = h.dev->end_capture();
  ops::fill(h.gpu, outs[0], NAN);
  graph.replay();
  const bool replay_same =
      std::memcmp(to_host(h, outs[0]).view().data, eager.view().data, eager.nbytes()) == 0;
  o.checks.push_back({"graph replay == eager", replay_same ? 0.0 : 1.0, 0.0, replay_same});
  if (streaming) {  // -x: every output negated exactly, LoRA's term included
    Tensor neg = Tensor::empty({m, k}, DType::f32);
    for (int64_t i = 0; i < m * k; ++i) neg.ptr<float>()[i] = -x_r.ptr<float>()[i];
    ops::LinearInput neg_in{to_device(h, neg, DType::bf16), {}};
    neg_in.q = ops::alloc_quantized(h.gpu, act, m, k);
    ops::quantize(h.gpu, neg_in.x, neg_in.q);
    std::vector<Tensor> pos;
    for (size_t i = 0; i < count; ++i) pos.push_back(to_host(h, outs[i]));
    ops::linear_group(h.gpu, neg_in, gpu_group);
    int64_t differing = 0;
    for (size_t i = 0; i < count; ++i) {
      const Tensor got = to_host(h, outs[i]);
      const auto* a = static_cast<const uint16_t*>(got.view().data);
      const auto* b = static_cast<const uint16_t*>(pos[i].view().data);
      for (int64_t j = 0; j < m * ns[i]; ++j) differing += a[j] != uint16_t(b[j] ^ 0x8000u);
    }
    o.checks.push_back(expect_le("group(-x) != -group(x): values", double(differing), 0.0));
  }
  std::vector<TensorView> all = outs;
  all.insert(all.end(), base_outs.begin(), base_outs.end());
  o.checks.push_back(g.verify(all));
  o.info = path;
}

}  // namespace fp8rl::gpu_test
