// The registry of op cases: ragged token counts (1, 19, 257, 989), head dims 32..256,
// K not a multiple of 128 (block edge groups) or of 8/16 (scalar kernel paths, GEMM fallback),
// every FP8 scheme and activation scaling, in-place variants. Bounds: tests/tolerances.h.
#include <cmath>
#include <cstring>

#include "harness.h"
#include "model/rope.h"
#include "ops/uniform_hash.h"
#include "quant/fp8.h"
#include "tolerances.h"

namespace fp8rl::gpu_test {

using test::kBf16HalfUlp;
using test::kCudaAttention;
using test::kCudaBf16Op;
using test::kCudaFp8Gemm;

namespace {

std::string fmtname(const char* op, const std::string& params) {
  return std::string(op) + " " + params;
}

// Token ids from an integer hash of (seed, index).
std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + uint64_t(i) + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    v[size_t(i)] = int32_t((z ^ (z >> 31)) % uint64_t(vocab));
  }
  return v;
}

// ---- element-wise and row-wise ops -----------------------------------------------------

void embedding_case(Harness& h, Outcome& o, int64_t t, int64_t vocab, int64_t hd, float scale) {
  const Tensor table = host_values({vocab, hd}, 11);
  const std::vector<int32_t> ids = random_ids(t, vocab, 12);
  Tensor ref = Tensor::empty({t, hd}, DType::f32);
  ops::embedding(h.cpu, std::span<const int32_t>(ids), table, scale, ref);
  const TensorView table_d = to_device(h, table, DType::bf16);
  Tensor ids_h = Tensor::empty({t}, DType::i32);
  std::memcpy(ids_h.view().data, ids.data(), ids.size() * 4);
  const TensorView ids_d = to_device(h, ids_h, DType::i32);
  Guard g(h);
  const TensorView out = ops::scratch_alloc(h.gpu, {t, hd}, DType::bf16);
  g.seal();
  ops::embedding(h.gpu, ids_d, table_d, scale, out);
  o.checks.push_back(compare("out", as_f32(h, out), ref, kCudaBf16Op));
  o.checks.push_back(g.verify({out}));
}

void rms_norm_case(Harness& h, Outcome& o, int64_t rows, int64_t d, bool plus_one, bool in_place) {
  const Tensor x = host_values({rows, d}, 21, 3.0f);
  const Tensor w = host_values({d}, 22, 1.0f);
  Tensor ref = Tensor::empty({rows, d}, DType::f32);
  ops::rms_norm(h.cpu, x, w, 1e-6f, plus_one, ref);
  const TensorView w_d = to_device(h, w, DType::f32);
  Guard g(h);
  const TensorView xin = ops::scratch_alloc(h.gpu, {rows, d}, DType::bf16);
  const TensorView out = in_place ? xin : ops::scratch_alloc(h.gpu, {rows, d}, DType::bf16);
  g.seal();
  Tensor xb = Tensor::empty({rows, d}, DType::bf16);
  convert(x.view().data, DType::f32, xb.view().data, DType::bf16, size_t(x.numel()));
  ops::copy(h.gpu, xb.view(), xin);
  ops::rms_norm(h.gpu, xin, w_d, 1e-6f, plus_one, out);
  o.checks.push_back(compare("out", as_f32(h, out), ref, kCudaBf16Op));
  std::vector<TensorView> outs = {out};
  if (!in_place) outs.push_back(xin);
  o.checks.push_back(g.verify(outs));
}

void rope_case(Harness& h, Outcome& o, int64_t t, int64_t heads, int64_t d, int32_t base) {
  const Tensor x = host_values({t, heads, d}, 31, 2.0f);
  std::vector<int32_t> pos(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) pos[size_t(i)] = base + int32_t(i);
  RopeConfig rc;
  rc.theta = 1e6;
  std::vector<float> f = rope_inv_freq(rc, d);
  const TensorView freq(f.data(), DType::f32, {int64_t(f.size())});
  Tensor ref = Tensor::empty({t, heads, d}, DType::f32);
  std::memcpy(ref.view().data, x.view().data, x.nbytes());
  ops::rope(h.cpu, ref.view(), std::span<const int32_t>(pos), freq);
  Tensor pos_h = Tensor::empty({t}, DType::i32);
  std::memcpy(pos_h.view().data, pos.data(), pos.size() * 4);
  const TensorView pos_d = to_device(h, pos_h, DType::i32);
  Tensor freq_h = Tensor::empty({int64_t(f.size())}, DType::f32);
  std::memcpy(freq_h.view().data, f.data(), f.size() * 4);
  const TensorView freq_d = to_device(h, freq_h, DType::f32);
  Guard g(h);
  const TensorView xd = ops::scratch_alloc(h.gpu, {t, heads, d}, DType::bf16);
  g.seal();
  Tensor xb = Tensor::empty(x.shape(), DType::bf16);
  convert(x.view().data, DType::f32, xb.view().data, DType::bf16, size_t(x.numel()));
  ops::copy(h.gpu, xb.view(), xd);
  ops::rope(h.gpu, xd, pos_d, freq_d);
  o.checks.push_back(compare("out", as_f32(h, xd), ref, kCudaBf16Op));
  o.checks.push_back(g.verify({xd}));
}

void gated_case(Harness& h, Outcome& o, int64_t t, int64_t i, bool silu, bool in_place) {
  const Tensor gate = host_values({t, i}, 41, 4.0f), up = host_values({t, i}, 42, 2.0f);
  Tensor ref = Tensor::empty({t, i}, DType::f32);
  if (silu)
    ops::silu_mul(h.cpu, gate, up, ref);
  else
    ops::gelu_tanh_mul(h.cpu, gate, up, ref);
  const TensorView up_d = to_device(h, up, DType::bf16);
  Guard g(h);
  const TensorView gate_d = ops::scratch_alloc(h.gpu, {t, i}, DType::bf16);
  const TensorView out = in_place ? gate_d : ops::scratch_alloc(h.gpu, {t, i}, DType::bf16);
  g.seal();
  Tensor gb = Tensor::empty({t, i}, DType::bf16);
  convert(gate.view().data, DType::f32, gb.view().data, DType::bf16, size_t(gate.numel()));
  ops::copy(h.gpu, gb.view(), gate_d);
  if (silu)
    ops::silu_mul(h.gpu, gate_d, up_d, out);
  else
    ops::gelu_tanh_mul(h.gpu, gate_d, up_d, out);
  o.checks.push_back(compare("out", as_f32(h, out), ref, kCudaBf16Op));
  std::vector<TensorView> outs = {out};
  if (!in_place) outs.push_back(gate_d);
  o.checks.push_back(g.verify(outs));
}

void add_case(Harness& h, Outcome& o, int64_t t, int64_t d) {
  const Tensor a = host_values({t, d}, 51, 3.0f), b = host_values({t, d}, 52, 3.0f);
  Tensor ref = Tensor::empty({t, d}, DType::f32);
  ops::add(h.cpu, a, b, ref);
  const TensorView a_d = to_device(h, a, DType::bf16), b_d = to_device(h, b, DType::bf16);
  Guard g(h);
  const TensorView out = ops::scratch_alloc(h.gpu, {t, d}, DType::bf16);
  g.seal();
  ops::add(h.gpu, a_d, b_d, out);
  o.checks.push_back(compare("out", as_f32(h, out), ref, kCudaBf16Op));
  o.checks.push_back(g.verify({out}));
}

// ---- fused residual add + RMSNorm, fused q/k norm + RoPE --------------------------------

// host -> dev (bf16 or f32 by dev.dtype), dev contiguous and allocated by the caller.
void upload_into(Harness& h, const Tensor& host, const TensorView& dev) {
  Tensor conv = Tensor::empty(host.shape(), dev.dtype);
  convert(host.view().data, host.dtype(), conv.view().data, dev.dtype, size_t(host.numel()));
  ops::copy(h.gpu, conv.view(), dev);
}

// x + delta rounded to bf16 on the host: what the CUDA residual add stores, so the norm after
// it can be checked against the CPU norm of the same values.
Tensor bf16_sum(const Tensor& x, const Tensor& delta) {
  Tensor r = Tensor::empty(x.shape(), DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i)
    r.ptr<float>()[i] = bf16_to_f32(f32_to_bf16(x.ptr<float>()[i] + delta.ptr<float>()[i]));
  return r;
}

Tensor copy_of(const Tensor& t) {
  Tensor r = Tensor::empty(t.shape(), t.dtype());
  std::memcpy(r.view().data, t.view().data, t.nbytes());
  return r;
}

// Number of differing bytes of two device tensors of the same size.
double bytes_differing(Harness& h, const TensorView& a, const TensorView& b) {
  const Tensor ha = to_host(h, a), hb = to_host(h, b);
  const uint8_t* pa = ha.ptr<uint8_t>();
  const uint8_t* pb = hb.ptr<uint8_t>();
  int64_t n = 0;
  for (size_t i = 0; i < ha.nbytes(); ++i) n += pa[i] != pb[i];
  return double(n);
}

// x += delta; out = rms_norm(x). The residual must equal the CPU's sum rounded once (one bf16
// op); the normed output the CPU norm of that rounded sum; and both the unfused CUDA add +
// rms_norm bit for bit (same kernel plan, same summation order). alias: out is delta.
void add_rms_norm_case(Harness& h, Outcome& o, int64_t t, int64_t d, bool plus_one, bool alias) {
  const Tensor x = host_values({t, d}, 201, 3.0f), delta = host_values({t, d}, 202, 3.0f);
  const Tensor w = host_values({d}, 203, 1.0f);
  Tensor ref_x = copy_of(x), ref_out = Tensor::empty({t, d}, DType::f32);
  ops::add_rms_norm(h.cpu, ref_x, delta, w, 1e-6f, plus_one, ref_out);
  Tensor ref_norm = Tensor::empty({t, d}, DType::f32);
  ops::rms_norm(h.cpu, bf16_sum(x, delta), w, 1e-6f, plus_one, ref_norm);
  const TensorView w_d = to_device(h, w, DType::f32);
  Guard g(h);
  const TensorView x_d = ops::scratch_alloc(h.gpu, {t, d}, DType::bf16);
  const TensorView delta_d = ops::scratch_alloc(h.gpu, {t, d}, DType::bf16);
  const TensorView out = alias ? delta_d : ops::scratch_alloc(h.gpu, {t, d}, DType::bf16);
  g.seal();
  upload_into(h, x, x_d);
  upload_into(h, delta, delta_d);
  ops::add_rms_norm(h.gpu, x_d, delta_d, w_d, 1e-6f, plus_one, out);
  o.checks.push_back(compare("x (residual)", as_f32(h, x_d), ref_x, kCudaBf16Op));
  o.checks.push_back(
      compare("out vs CPU norm of the bf16 sum", as_f32(h, out), ref_norm, kCudaBf16Op));
  o.checks.push_back(g.verify({x_d, delta_d, out}));
  // The unfused CUDA ops on the same inputs.
  const TensorView x2 = to_device(h, x, DType::bf16), delta2 = to_device(h, delta, DType::bf16);
  const TensorView out2 = ops::scratch_alloc(h.gpu, {t, d}, DType::bf16);
  ops::add(h.gpu, x2, delta2, x2);
  ops::rms_norm(h.gpu, x2, w_d, 1e-6f, plus_one, out2);
  o.checks.push_back(expect_le("x bytes != add (bit-exact)", bytes_differing(h, x_d, x2), 0));
  o.checks.push_back(
      expect_le("out bytes != add + rms_norm (bit-exact)", bytes_differing(h, out, out2), 0));
}

// Where rms_norm_rope writes: in place, into a KV-cache-like buffer at a slot offset, or into
// rows with a token stride larger than heads * D (padded by 8 values: 16-byte aligned; by 3:
// the scalar kernel).
enum class RopeDest { in_place, cache, stride_pad8, stride_pad3 };
const char* rope_dest_name(RopeDest d) {
  switch (d) {
    case RopeDest::in_place:
      return "in_place";
    case RopeDest::cache:
      return "cache";
    case RopeDest::stride_pad8:
      return "stride+8";
    case RopeDest::stride_pad3:
      return "stride+3";
  }
  return "?";
}

void rms_norm_rope_case(Harness& h, Outcome& o, int64_t t, int64_t heads, int64_t d, bool norm,
                        bool plus_one, int32_t pos0, RopeDest dest) {
  const Tensor x = host_values({t, heads, d}, 211, 3.0f), w = host_values({d}, 212, 1.0f);
  std::vector<int32_t> pos(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) pos[size_t(i)] = pos0 + int32_t(i);
  RopeConfig rc;
  rc.theta = 1e6;
  std::vector<float> f = rope_inv_freq(rc, d);
  const TensorView freq(f.data(), DType::f32, {int64_t(f.size())});
  const TensorView pos_h(pos.data(), DType::i32, {t});
  Tensor ref = Tensor::empty({t, heads, d}, DType::f32);
  ops::rms_norm_rope(h.cpu, x, norm ? w.view() : TensorView(), 1e-6f, plus_one, pos_h, freq, ref);
  Tensor pos_t = Tensor::empty({t}, DType::i32), freq_t = Tensor::empty({d / 2}, DType::f32);
  std::memcpy(pos_t.view().data, pos.data(), pos.size() * 4);
  std::memcpy(freq_t.view().data, f.data(), f.size() * 4);
  const TensorView pos_d = to_device(h, pos_t, DType::i32),
                   freq_d = to_device(h, freq_t, DType::f32);
  const TensorView w_d = norm ? to_device(h, w, DType::f32) : TensorView();

  const int64_t first = 7, pad = dest == RopeDest::stride_pad8 ? 8 : 3;
  const bool in_place = dest == RopeDest::in_place;
  const TensorView x_in = in_place ? TensorView() : to_device(h, x, DType::bf16);
  Guard g(h);
  TensorView buf, out;  // buf: the whole destination allocation
  if (in_place) {
    buf = out = ops::scratch_alloc(h.gpu, {t, heads, d}, DType::bf16);
  } else if (dest == RopeDest::cache) {
    buf = ops::scratch_alloc(h.gpu, {first + t + 3, heads, d}, DType::bf16);
    out = buf.slice_rows(first, first + t);
  } else {
    buf = ops::scratch_alloc(h.gpu, {t, heads * d + pad}, DType::bf16);
    out = TensorView(buf.data, DType::bf16, {t, heads, d}, Device::cuda);
    out.strides[0] = heads * d + pad;
  }
  g.seal();
  if (in_place) upload_into(h, x, out);
  ops::rms_norm_rope(h.gpu, in_place ? out : x_in, w_d, 1e-6f, plus_one, pos_d, freq_d, out);

  // The written values, gathered through out's token stride; the pads must still be poison.
  const Tensor all = as_f32(h, buf);
  Tensor got = Tensor::empty({t, heads, d}, DType::f32);
  const float* a = all.ptr<float>() + (dest == RopeDest::cache ? first * heads * d : 0);
  int64_t pads_written = 0;
  for (int64_t i = 0; i < t; ++i) {
    std::memcpy(got.ptr<float>() + i * heads * d, a + i * out.strides[0], size_t(heads * d) * 4);
    for (int64_t j = heads * d; j < out.strides[0]; ++j)
      pads_written += !std::isnan(a[i * out.strides[0] + j]);
  }
  o.checks.push_back(compare("out", got, ref, norm ? test::kCudaNormRope : kCudaBf16Op));
  o.checks.push_back(expect_le("row padding written", double(pads_written), 0));
  o.checks.push_back(g.verify({dest == RopeDest::cache ? out : buf}));

  // rms_norm then rope on CUDA: the same bits where the vector kernel runs (D % 16 == 0, up to
  // 256, 16-byte aligned rows); the scalar kernel sums squares in another order.
  if (d % 16 == 0 && d <= 256 && dest != RopeDest::stride_pad3) {
    const TensorView u = to_device(h, x, DType::bf16);
    if (norm)
      ops::rms_norm(h.gpu, u.reshape({t * heads, d}), w_d, 1e-6f, plus_one,
                    u.reshape({t * heads, d}));
    ops::rope(h.gpu, u, pos_d, freq_d);
    const Tensor un = to_host(h, u), all_b = to_host(h, buf);
    const uint16_t* ob = all_b.ptr<uint16_t>() + (dest == RopeDest::cache ? first * heads * d : 0);
    int64_t diff = 0;
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < heads * d; ++j)
        diff += ob[i * out.strides[0] + j] != un.ptr<uint16_t>()[i * heads * d + j];
    o.checks.push_back(
        expect_le(norm ? "values != rms_norm + rope (bit-exact)" : "values != rope (bit-exact)",
                  double(diff), 0));
  }
}

void softcap_case(Harness& h, Outcome& o, int64_t t, int64_t v, DType dt) {
  const Tensor x = host_values({t, v}, 61, 100.0f);
  Tensor ref = Tensor::empty({t, v}, DType::f32);
  std::memcpy(ref.view().data, x.view().data, x.nbytes());
  ops::softcap(h.cpu, ref.view(), 30.0f);
  Guard g(h);
  const TensorView xd = ops::scratch_alloc(h.gpu, {t, v}, dt);
  g.seal();
  Tensor xc = Tensor::empty({t, v}, dt);
  convert(x.view().data, DType::f32, xc.view().data, dt, size_t(x.numel()));
  ops::copy(h.gpu, xc.view(), xd);
  ops::softcap(h.gpu, xd, 30.0f, dt == DType::f32 ? ops::Output::f32 : ops::Output::activation);
  o.checks.push_back(
      compare("out", as_f32(h, xd), ref, dt == DType::f32 ? 1e-6 : kCudaBf16Op));
  o.checks.push_back(g.verify({xd}));
}

void fill_case(Harness& h, Outcome& o, int64_t n) {
  Tensor ref = Tensor::empty({n}, DType::f32);
  ops::fill_uniform(h.cpu, ref.view(), 99, 0.5f);
  const TensorView d = ops::scratch_alloc(h.gpu, {n}, DType::f32);
  ops::fill_uniform(h.gpu, d, 99, 0.5f);
  o.checks.push_back(compare("fill_uniform f32 bit-exact", as_f32(h, d), ref, 0.0));
}

// ---- attention ---------------------------------------------------------------------------

void attention_case(Harness& h, Outcome& o, int64_t t, int64_t first, int64_t hq, int64_t hkv,
                    int64_t d, int64_t window, float softcap) {
  const int64_t cap = first + t + 5;  // 5 slots past the queries: NaN, never to be read
  const Tensor q = host_values({t, hq, d}, 71, 3.0f);
  Tensor k = host_values({cap, hkv, d}, 72, 3.0f), v = host_values({cap, hkv, d}, 73, 2.0f);
  for (int64_t i = (first + t) * hkv * d; i < cap * hkv * d; ++i)
    k.ptr<float>()[i] = v.ptr<float>()[i] = NAN;
  ops::AttentionParams p;
  p.scale = 1.0f / std::sqrt(float(d));
  p.softcap = softcap;
  p.window = window;
  Tensor ref = Tensor::empty({t, hq, d}, DType::f32);
  ops::attention(h.cpu, q, k, v, first, p, ref);
  const TensorView q_d = to_device(h, q, DType::bf16), k_d = to_device(h, k, DType::bf16),
                   v_d = to_device(h, v, DType::bf16);
  const TensorView amax = ops::scratch_alloc(h.gpu, {1}, DType::f32);
  Guard g(h);
  const TensorView out = ops::scratch_alloc(h.gpu, {t, hq, d}, DType::bf16);
  g.seal();
  ops::fill_zero(h.gpu, amax);
  ops::attention(h.gpu, q_d, k_d, v_d, first, p, out, amax);
  double vmax = 0;
  for (int64_t i = 0; i < (first + t) * hkv * d; ++i)
    vmax = std::max(vmax, double(std::fabs(v.ptr<float>()[i])));
  const Tensor got = as_f32(h, out);
  o.checks.push_back(compare("out / max|v|", got, ref, kCudaAttention, vmax));
  o.checks.push_back(g.verify({out}));
  // The fused amax is exactly max |out| of the bf16 output the kernel wrote.
  float want = 0;
  for (int64_t i = 0; i < got.numel(); ++i) want = std::max(want, std::fabs(got.ptr<float>()[i]));
  const float fused = to_host(h, amax).ptr<float>()[0];
  o.checks.push_back(
      {"fused amax == max|out|", double(std::fabs(fused - want)), 0.0, fused == want});
}

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

struct DeviceLinear {
  LinearWeight cpu, gpu;
  std::vector<DeviceBuffer> storage;
  Tensor w_codes, w_scales, w_values, bias;
};

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

// CUDA graphs: an attention block's ops (norm -> FP8, the q/k/v/o linears on the scheme's GEMM
// path, RoPE, attention with its fused amax, the residual add) recorded on the device's stream
// and replayed give the eager results bit for bit: no op allocates, touches host memory or
// synchronizes inside a launch, and cuBLASLt runs the algorithms it chose eagerly.
void graph_case(Harness& h, Outcome& o, Fp8Scheme scheme, ActScaling act) {
  const int64_t T = 37, H = 256, HQ = 4, HKV = 2, D = 64;
  auto wq = make_linear(h, HQ * D, H, scheme, act, false, 201);
  auto wk = make_linear(h, HKV * D, H, scheme, act, false, 202);
  auto wv = make_linear(h, HKV * D, H, scheme, act, false, 203);
  auto wo = make_linear(h, H, HQ * D, scheme, act, false, 204);
  const TensorView x = to_device(h, host_values({T, H}, 205, 2.0f), DType::bf16);
  const TensorView nw = to_device(h, host_values({H}, 206, 1.0f), DType::f32);
  Tensor pos_h = Tensor::empty({T}, DType::i32);
  for (int64_t i = 0; i < T; ++i) pos_h.ptr<int32_t>()[i] = int32_t(3 * i);
  const TensorView pos = to_device(h, pos_h, DType::i32);
  const TensorView freq = to_device(h, host_values({D / 2}, 207, 0.5f), DType::f32);
  auto act_bf16 = [&](Shape s) { return ops::scratch_alloc(h.gpu, s, DType::bf16); };
  const TensorView hn = act_bf16({T, H}), q = act_bf16({T, HQ, D}), k = act_bf16({T, HKV, D}),
                   v = act_bf16({T, HKV, D}), attn = act_bf16({T, HQ, D}), proj = act_bf16({T, H}),
                   out = act_bf16({T, H});
  const TensorView amax = ops::scratch_alloc(h.gpu, {1}, DType::f32);
  const bool fused = act == ActScaling::token || act == ActScaling::group;
  ops::QuantizedActivation xq;
  if (fused) xq = ops::alloc_quantized(h.gpu, act, T, H);
  ops::AttentionParams p;
  p.scale = 0.125f;
  auto block = [&] {
    auto project = [&](const LinearWeight& w, const TensorView& y) {
      if (fused)
        ops::linear(h.gpu, xq, w, y.reshape({T, y.numel() / T}));
      else
        ops::linear(h.gpu, hn, w, y.reshape({T, y.numel() / T}));
    };
    if (fused)
      ops::rms_norm_quant(h.gpu, x, nw, 1e-6f, false, xq);
    else
      ops::rms_norm(h.gpu, x, nw, 1e-6f, false, hn);
    project(wq->gpu, q);
    project(wk->gpu, k);
    project(wv->gpu, v);
    ops::rope(h.gpu, q, pos, freq);
    ops::rope(h.gpu, k, pos, freq);
    ops::fill_zero(h.gpu, amax);
    ops::attention(h.gpu, q, k, v, 0, p, attn, amax);
    const TensorView a2 = attn.reshape({T, HQ * D});
    if (act == ActScaling::tensor)
      ops::linear(h.gpu, a2, wo->gpu, proj, amax);
    else
      ops::linear(h.gpu, a2, wo->gpu, proj);
    ops::add(h.gpu, x, proj, out);
  };
  block();
  const Tensor eager = to_host(h, out);
  h.dev->begin_capture();
  block();
  CudaGraph graph = h.dev->end_capture();
  ops::fill(h.gpu, out, NAN);  // replay must rewrite every output element
  graph.replay();
  graph.replay();
  const Tensor replayed = to_host(h, out);
  double diff = 0;
  for (int64_t i = 0; i < T * H; ++i) {
    const float a = bf16_to_f32(eager.ptr<uint16_t>()[i]),
                b = bf16_to_f32(replayed.ptr<uint16_t>()[i]);
    diff = std::max(diff, a == b ? 0.0 : (std::isnan(b) ? INFINITY : double(std::fabs(a - b))));
  }
  o.info = fmt::format("{} graph nodes", graph.nodes());
  o.checks.push_back({"graph replay == eager", diff, 0.0, diff == 0.0 && graph.nodes() >= 9});
}

std::string shape(std::initializer_list<std::pair<const char*, int64_t>> kv) {
  std::string s;
  for (const auto& [k, v] : kv) s += fmt::format("{}{}={}", s.empty() ? "" : " ", k, v);
  return s;
}

const int64_t kTokens[] = {1, 19, 257, 989};

}  // namespace

std::vector<OpCase> correctness_cases() {
  std::vector<OpCase> c;
  auto add = [&](std::string name, std::function<void(Harness&, Outcome&)> fn, bool quick) {
    c.push_back({std::move(name), std::move(fn), quick});
  };
  add(
      "fill_uniform n=100003", [](Harness& h, Outcome& o) { fill_case(h, o, 100003); }, true);
  for (int64_t t : kTokens)
    for (int64_t hd : {192, 200}) {
      const float sc = hd == 192 ? std::sqrt(192.0f) : 1.0f;
      add(
          fmtname("embedding", shape({{"T", t}, {"H", hd}})),
          [=](Harness& h, Outcome& o) { embedding_case(h, o, t, 1000, hd, sc); }, t == 19);
    }
  for (int64_t t : kTokens)
    for (int64_t d : {64, 128, 200, 4096})
      for (bool plus_one : {false, true}) {
        const bool in_place = d == 128;
        add(
            fmtname("rms_norm",
                    shape({{"rows", t}, {"D", d}, {"plus_one", plus_one}, {"in_place", in_place}})),
            [=](Harness& h, Outcome& o) { rms_norm_case(h, o, t, d, plus_one, in_place); },
            t == 19 && !plus_one);
      }
  for (int64_t t : {1, 19, 257})
    for (int64_t d : {64, 128, 256})
      for (int32_t base : {0, 100000})
        add(
            fmtname("rope", shape({{"T", t}, {"heads", 4}, {"D", d}, {"pos0", base}})),
            [=](Harness& h, Outcome& o) { rope_case(h, o, t, 4, d, base); }, t == 19 && base == 0);
  for (int64_t t : {1, 19, 257})
    for (int64_t i : {320, 1000, 2880})
      for (bool silu : {true, false})
        add(
            fmtname(silu ? "silu_mul" : "gelu_tanh_mul",
                    shape({{"T", t}, {"I", i}, {"in_place", i == 320}})),
            [=](Harness& h, Outcome& o) { gated_case(h, o, t, i, silu, i == 320); },
            t == 19 && i == 1000);
  for (int64_t t : kTokens)
    add(
        fmtname("add", shape({{"T", t}, {"H", 1000}})),
        [=](Harness& h, Outcome& o) { add_case(h, o, t, 1000); }, t == 19);
  // Fused residual add + norm: hidden sizes with scalar tails (1001, 203), warp rows (200),
  // every block plan up to one segment of NCH 8 (12288) and a multi-segment row (20000).
  for (int64_t t : kTokens)
    for (int64_t d : {200, 1001, 4096})
      for (bool plus_one : {false, true}) {
        const bool alias = d == 4096;
        add(
            fmtname("add_rms_norm",
                    shape({{"T", t}, {"H", d}, {"plus_one", plus_one}, {"out_is_delta", alias}})),
            [=](Harness& h, Outcome& o) { add_rms_norm_case(h, o, t, d, plus_one, alias); },
            t == 19 && !plus_one);
      }
  for (int64_t d : {203, 12288, 20000})
    add(
        fmtname("add_rms_norm", shape({{"T", 19}, {"H", d}, {"plus_one", 0}, {"out_is_delta", 0}})),
        [=](Harness& h, Outcome& o) { add_rms_norm_case(h, o, 19, d, false, false); }, false);
  // Fused q/k norm + RoPE: head dims 64/128/256 (vector kernel), 48 (vector, a warp per head),
  // 72 (scalar kernel); with and without the norm; in place, into a cache slice, strided rows.
  struct R {
    int64_t heads, d;
    bool norm, plus_one;
    int32_t pos0;
    RopeDest dest;
  };
  const R ropes[] = {
      {4, 64, true, false, 0, RopeDest::in_place},
      {2, 128, true, false, 0, RopeDest::cache},
      {3, 256, true, true, 100000, RopeDest::cache},
      {8, 128, true, false, 100000, RopeDest::in_place},
      {4, 128, false, false, 0, RopeDest::cache},
      {2, 64, false, false, 100000, RopeDest::stride_pad8},
      {2, 128, true, false, 0, RopeDest::stride_pad8},
      {2, 128, true, true, 0, RopeDest::stride_pad3},
      {3, 48, true, false, 0, RopeDest::in_place},
      {2, 72, true, false, 100000, RopeDest::cache},
      {5, 72, false, false, 0, RopeDest::in_place},
      {40, 64, true, false, 0, RopeDest::cache},
  };
  for (int64_t t : kTokens)
    for (const R& r : ropes)
      add(
          fmtname("rms_norm_rope", shape({{"T", t},
                                          {"heads", r.heads},
                                          {"D", r.d},
                                          {"norm", r.norm},
                                          {"plus_one", r.plus_one},
                                          {"pos0", r.pos0}}) +
                                       " " + rope_dest_name(r.dest)),
          [=](Harness& h, Outcome& o) {
            rms_norm_rope_case(h, o, t, r.heads, r.d, r.norm, r.plus_one, r.pos0, r.dest);
          },
          t == 19 && r.d != 256);
  add("softcap bf16 T=19 V=1000", [](Harness& h, Outcome& o) { softcap_case(h, o, 19, 1000, DType::bf16); }, true);
  add("softcap f32 T=19 V=1000", [](Harness& h, Outcome& o) { softcap_case(h, o, 19, 1000, DType::f32); }, false);

  // Attention: (T, first slot, Hq, Hkv, D, window, softcap).
  struct A {
    int64_t t, first, hq, hkv, d, window;
    float softcap;
  };
  const A attn[] = {
      {1, 0, 4, 2, 64, 0, 0},       {19, 0, 8, 2, 128, 0, 0},   {257, 0, 4, 4, 128, 0, 0},
      {989, 0, 8, 2, 64, 0, 0},     {257, 0, 2, 1, 256, 0, 0},  {19, 238, 4, 2, 128, 0, 0},
      {1, 300, 8, 2, 128, 0, 0},    {257, 0, 6, 2, 32, 8, 0},   {989, 0, 4, 2, 128, 100, 0},
      {19, 200, 4, 2, 64, 50, 0},   {257, 0, 4, 2, 256, 0, 50}, {989, 0, 2, 2, 256, 0, 0},
      {1, 988, 4, 1, 256, 0, 0},    {989, 0, 4, 1, 32, 0, 30},  {257, 0, 4, 2, 128, 0, 50},
      {989, 37, 8, 1, 128, 300, 0}, {130, 0, 2, 2, 128, 0, 0}};
  for (const A& a : attn)
    add(
        fmtname("attention", shape({{"T", a.t},
                                    {"first", a.first},
                                    {"Hq", a.hq},
                                    {"Hkv", a.hkv},
                                    {"D", a.d},
                                    {"window", a.window},
                                    {"softcap", int64_t(a.softcap)}})),
        [=](Harness& h, Outcome& o) {
          attention_case(h, o, a.t, a.first, a.hq, a.hkv, a.d, a.window, a.softcap);
        },
        a.t == 19 || (a.t == 257 && a.d == 256));

  for (ActScaling act :
       {ActScaling::token, ActScaling::group, ActScaling::tensor, ActScaling::static_tensor})
    for (int64_t m : kTokens)
      for (int64_t k : {192, 200, 2880, 4096}) {
        const std::string an(act_scaling_name(act));
        add(
            fmtname("quantize", an + " " + shape({{"M", m}, {"K", k}})),
            [=](Harness& h, Outcome& o) { quantize_case(h, o, act, m, k, 5.0f); },
            m == 19 && k == 200);
      }
  for (ActScaling act : {ActScaling::token, ActScaling::group, ActScaling::tensor})
    for (int64_t m : kTokens)
      for (int64_t k : {192, 200, 4096}) {
        const std::string an(act_scaling_name(act));
        add(
            fmtname("rms_norm_quant", an + " " + shape({{"M", m}, {"K", k}})),
            [=](Harness& h, Outcome& o) { rms_norm_quant_case(h, o, act, m, k, k == 200); },
            m == 19 && k == 200);
        add(
            fmtname("add_rms_norm_quant", an + " " + shape({{"M", m}, {"K", k}})),
            [=](Harness& h, Outcome& o) { add_rms_norm_quant_case(h, o, act, m, k, k == 200); },
            m == 19 && k == 200);
        add(fmtname("silu_mul_quant", an + " " + shape({{"M", m}, {"K", k + 128}})),
            [=](Harness& h, Outcome& o) { gated_quant_case(h, o, act, m, k + 128, true); },
            m == 19 && k == 200);
      }
  // Row plans of the fused quantizers past the sizes above: NCH 8 (12288) and several
  // segments (20000, 20003 with a scalar tail).
  for (ActScaling act : {ActScaling::token, ActScaling::group})
    for (int64_t k : {12288, 20000, 20003}) {
      const std::string an(act_scaling_name(act));
      add(
          fmtname("add_rms_norm_quant", an + " " + shape({{"M", 19}, {"K", k}})),
          [=](Harness& h, Outcome& o) { add_rms_norm_quant_case(h, o, act, 19, k, false); }, false);
      add(
          fmtname("silu_mul_quant", an + " " + shape({{"M", 19}, {"K", k}})),
          [=](Harness& h, Outcome& o) { gated_quant_case(h, o, act, 19, k, true); }, false);
      add(
          fmtname("quantize", an + " " + shape({{"M", 19}, {"K", k}})),
          [=](Harness& h, Outcome& o) { quantize_case(h, o, act, 19, k, 5.0f); }, false);
    }
  add("gelu_tanh_mul_quant group M=257 K=2880",
      [](Harness& h, Outcome& o) { gated_quant_case(h, o, ActScaling::group, 257, 2880, false); },
      false);
  for (Fp8Scheme s : {Fp8Scheme::tensor, Fp8Scheme::row, Fp8Scheme::block})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{256, 192}, {300, 200}, {1024, 4096}})
      add(
          fmtname("quantize_weight",
                  std::string(scheme_name(s)) + " " + shape({{"N", n}, {"K", k}})),
          [=](Harness& h, Outcome& o) { quantize_weight_case(h, o, s, n, k); }, n == 300);

  // Linear: bf16, each FP8 scheme with its activation scaling, the mixed pairs cuBLASLt runs
  // through broadcast scales, the dequantized fallback (block x token, K % 16 != 0), biases,
  // fp32 output (lm_head), and pre-quantized inputs (the fused path of the forward).
  struct L {
    Fp8Scheme s;
    ActScaling act;
    int64_t n, k;
    bool bias;
    DType out;
    bool pre;
  };
  const DType bf = DType::bf16;
  std::vector<L> lin = {
      {Fp8Scheme::off, ActScaling::none, 256, 192, false, bf, false},
      {Fp8Scheme::off, ActScaling::none, 1024, 4096, true, bf, false},
      {Fp8Scheme::off, ActScaling::none, 1000, 256, false, DType::f32, false},
      {Fp8Scheme::tensor, ActScaling::tensor, 256, 192, false, bf, false},
      {Fp8Scheme::tensor, ActScaling::tensor, 2048, 1024, true, bf, false},
      {Fp8Scheme::tensor, ActScaling::static_tensor, 512, 256, false, bf, false},
      {Fp8Scheme::tensor, ActScaling::token, 512, 256, false, bf, false},
      {Fp8Scheme::row, ActScaling::token, 256, 192, false, bf, false},
      {Fp8Scheme::row, ActScaling::token, 1024, 2880, true, bf, false},
      {Fp8Scheme::row, ActScaling::token, 2048, 1024, false, bf, true},
      {Fp8Scheme::row, ActScaling::tensor, 512, 256, false, bf, false},
      {Fp8Scheme::block, ActScaling::group, 256, 192, false, bf, false},
      {Fp8Scheme::block, ActScaling::group, 1024, 2880, false, bf, false},
      {Fp8Scheme::block, ActScaling::group, 2048, 1024, true, bf, true},
      {Fp8Scheme::block, ActScaling::group, 320, 640, false, DType::f32, false},
      {Fp8Scheme::block, ActScaling::token, 512, 256, false, bf, false},
      {Fp8Scheme::row, ActScaling::token, 200, 200, false, bf, false},
      {Fp8Scheme::block, ActScaling::group, 304, 200, false, bf, false},
  };
  for (const L& l : lin)
    for (int64_t m : kTokens) {
      const std::string name =
          std::string(scheme_name(l.s)) + "/" + std::string(act_scaling_name(l.act)) + " " +
          shape({{"M", m}, {"N", l.n}, {"K", l.k}}) + (l.bias ? " bias" : "") +
          (l.out == DType::f32 ? " f32-out" : "") + (l.pre ? " prequantized" : "");
      add(
          fmtname("linear", name),
          [=](Harness& h, Outcome& o) {
            linear_case(h, o, m, l.n, l.k, l.s, l.act, l.bias, l.out, l.pre);
          },
          (m == 19 || m == 1) && l.n <= 512);
    }

  for (auto [s, a] : {std::pair{Fp8Scheme::off, ActScaling::none},
                      {Fp8Scheme::tensor, ActScaling::tensor},
                      {Fp8Scheme::row, ActScaling::token},
                      {Fp8Scheme::block, ActScaling::group}})
    add(
        fmt::format("graph attention block {}", scheme_name(s)),
        [=](Harness& h, Outcome& o) { graph_case(h, o, s, a); }, s == Fp8Scheme::row);
  return c;
}

// ---- perf mode: the CUDA op alone at prefill sizes (8192 tokens, Qwen3-8B widths) -------------

std::vector<OpCase> perf_cases() {
  std::vector<OpCase> c;
  constexpr int64_t T = 8192, H = 4096, I = 12288, HQ = 32, HKV = 8, D = 128;
  auto bf = [](Harness& h, Shape s, uint64_t seed, float bound) {
    const TensorView t = ops::scratch_alloc(h.gpu, s, DType::bf16);
    ops::fill_uniform(h.gpu, t, seed, bound);
    return t;
  };
  c.push_back({"rms_norm T=8192 H=4096", [=](Harness& h, Outcome& o) {
                 const TensorView x = bf(h, {T, H}, 1, 3), out = bf(h, {T, H}, 2, 1);
                 const TensorView w = ops::scratch_alloc(h.gpu, {H}, DType::f32);
                 ops::fill(h.gpu, w, 1.0f);
                 o.seconds = time_op(h, [&] { ops::rms_norm(h.gpu, x, w, 1e-6f, false, out); });
                 o.bytes = 2.0 * T * H * 2;
               }});
  for (ActScaling act : {ActScaling::token, ActScaling::group})
    c.push_back({"rms_norm_quant " + std::string(act_scaling_name(act)) + " T=8192 H=4096",
                 [=](Harness& h, Outcome& o) {
                   const TensorView x = bf(h, {T, H}, 1, 3);
                   const TensorView w = ops::scratch_alloc(h.gpu, {H}, DType::f32);
                   ops::fill(h.gpu, w, 1.0f);
                   const ops::QuantizedActivation q = ops::alloc_quantized(h.gpu, act, T, H);
                   o.seconds =
                       time_op(h, [&] { ops::rms_norm_quant(h.gpu, x, w, 1e-6f, false, q); });
                   o.bytes = double(T) * H * 3;
                 }});
  for (ActScaling act : {ActScaling::token, ActScaling::group})
    c.push_back({"add_rms_norm_quant " + std::string(act_scaling_name(act)) + " T=8192 H=4096",
                 [=](Harness& h, Outcome& o) {
                   const TensorView x = bf(h, {T, H}, 1, 3), dx = bf(h, {T, H}, 2, 0.01f);
                   const TensorView w = ops::scratch_alloc(h.gpu, {H}, DType::f32);
                   ops::fill(h.gpu, w, 1.0f);
                   const ops::QuantizedActivation q = ops::alloc_quantized(h.gpu, act, T, H);
                   o.seconds = time_op(
                       h, [&] { ops::add_rms_norm_quant(h.gpu, x, dx, w, 1e-6f, false, q); });
                   o.bytes = double(T) * H * 7;  // x, delta in; x, codes out
                 }});
  c.push_back({"add_rms_norm T=8192 H=4096", [=](Harness& h, Outcome& o) {
                 const TensorView x = bf(h, {T, H}, 1, 3), dx = bf(h, {T, H}, 2, 0.01f),
                                  out = bf(h, {T, H}, 3, 1);
                 const TensorView w = ops::scratch_alloc(h.gpu, {H}, DType::f32);
                 ops::fill(h.gpu, w, 1.0f);
                 o.seconds =
                     time_op(h, [&] { ops::add_rms_norm(h.gpu, x, dx, w, 1e-6f, false, out); });
                 o.bytes = double(T) * H * 8;
               }});
  for (int64_t heads : {HQ, HKV}) {
    const bool q = heads == HQ;
    c.push_back(
        {fmt::format("rms_norm_rope {} T=8192 heads={} D=128 {}", q ? "q" : "k", heads,
                     q ? "in place" : "into a cache"),
         [=](Harness& h, Outcome& o) {
           const TensorView x = bf(h, {T, heads, D}, 1, 1);
           const TensorView out = q ? x : bf(h, {T + 64, heads, D}, 2, 1).slice_rows(64, T + 64);
           Tensor p = Tensor::empty({T}, DType::i32);
           for (int64_t i = 0; i < T; ++i) p.ptr<int32_t>()[i] = int32_t(i);
           const TensorView pd = to_device(h, p, DType::i32);
           const TensorView f = ops::scratch_alloc(h.gpu, {D / 2}, DType::f32);
           const TensorView w = ops::scratch_alloc(h.gpu, {D}, DType::f32);
           ops::fill(h.gpu, f, 0.01f);
           ops::fill(h.gpu, w, 1.0f);
           o.seconds =
               time_op(h, [&] { ops::rms_norm_rope(h.gpu, x, w, 1e-6f, false, pd, f, out); });
           o.bytes = 2.0 * T * heads * D * 2;
         }});
  }
  c.push_back({"quantize group T=8192 K=4096", [=](Harness& h, Outcome& o) {
                 const TensorView x = bf(h, {T, H}, 1, 3);
                 const ops::QuantizedActivation q =
                     ops::alloc_quantized(h.gpu, ActScaling::group, T, H);
                 o.seconds = time_op(h, [&] { ops::quantize(h.gpu, x, q); });
                 o.bytes = double(T) * H * 3;
               }});
  c.push_back({"silu_mul T=8192 I=12288", [=](Harness& h, Outcome& o) {
                 const TensorView g = bf(h, {T, I}, 1, 3), u = bf(h, {T, I}, 2, 3),
                                  out = bf(h, {T, I}, 3, 1);
                 o.seconds = time_op(h, [&] { ops::silu_mul(h.gpu, g, u, out); });
                 o.bytes = 3.0 * T * I * 2;
               }});
  for (ActScaling act : {ActScaling::token, ActScaling::group})
    c.push_back({"silu_mul_quant " + std::string(act_scaling_name(act)) + " T=8192 I=12288",
                 [=](Harness& h, Outcome& o) {
                   const TensorView g = bf(h, {T, I}, 1, 3), u = bf(h, {T, I}, 2, 3);
                   const ops::QuantizedActivation q = ops::alloc_quantized(h.gpu, act, T, I);
                   o.seconds = time_op(h, [&] { ops::silu_mul_quant(h.gpu, g, u, q); });
                   o.bytes = double(T) * I * 5;
                 }});
  c.push_back({"rope q T=8192 heads=32 D=128", [=](Harness& h, Outcome& o) {
                 const TensorView x = bf(h, {T, HQ, D}, 1, 1);
                 Tensor p = Tensor::empty({T}, DType::i32);
                 for (int64_t i = 0; i < T; ++i) p.ptr<int32_t>()[i] = int32_t(i);
                 const TensorView pd = to_device(h, p, DType::i32);
                 const TensorView f = ops::scratch_alloc(h.gpu, {D / 2}, DType::f32);
                 ops::fill(h.gpu, f, 0.01f);
                 o.seconds = time_op(h, [&] { ops::rope(h.gpu, x, pd, f); });
                 o.bytes = 2.0 * T * HQ * D * 2;
               }});
  c.push_back({"add T=8192 H=4096", [=](Harness& h, Outcome& o) {
                 const TensorView a = bf(h, {T, H}, 1, 1), b = bf(h, {T, H}, 2, 1);
                 o.seconds = time_op(h, [&] { ops::add(h.gpu, a, b, a); });
                 o.bytes = 3.0 * T * H * 2;
               }});
  for (int64_t d : {64, 128, 256})
    c.push_back(
        {fmt::format("attention causal T=8192 Hq=32 Hkv=8 D={}", d), [=](Harness& h, Outcome& o) {
           const TensorView q = bf(h, {T, HQ, d}, 1, 1), k = bf(h, {T, HKV, d}, 2, 1),
                            v = bf(h, {T, HKV, d}, 3, 1), out = bf(h, {T, HQ, d}, 4, 1);
           ops::AttentionParams p;
           p.scale = 1.0f / std::sqrt(float(d));
           o.seconds = time_op(
               h, [&] { ops::attention(h.gpu, q, k, v, 0, p, out); }, 5);
           o.flops = 4.0 * double(d) * HQ * double(T) * double(T + 1) / 2;
         }});
  c.push_back({"attention window=4096 T=8192 Hq=32 Hkv=8 D=128", [=](Harness& h, Outcome& o) {
                 const TensorView q = bf(h, {T, HQ, D}, 1, 1), k = bf(h, {T, HKV, D}, 2, 1),
                                  v = bf(h, {T, HKV, D}, 3, 1), out = bf(h, {T, HQ, D}, 4, 1);
                 ops::AttentionParams p;
                 p.scale = 1.0f / std::sqrt(float(D));
                 p.window = 4096;
                 o.seconds = time_op(
                     h, [&] { ops::attention(h.gpu, q, k, v, 0, p, out); }, 5);
                 double keys = 0;
                 for (int64_t t = 0; t < T; ++t) keys += double(std::min<int64_t>(t + 1, 4096));
                 o.flops = 4.0 * D * HQ * keys;
               }});
  for (Fp8Scheme s : {Fp8Scheme::off, Fp8Scheme::tensor, Fp8Scheme::row, Fp8Scheme::block})
    for (auto [n, k] :
         {std::pair<int64_t, int64_t>{4096, 4096}, {1024, 4096}, {12288, 4096}, {4096, 12288}})
      c.push_back({fmt::format("linear {} M=8192 N={} K={}", scheme_name(s), n, k),
                   [=](Harness& h, Outcome& o) {
                     const ActScaling act = matching_act_scaling(s);
                     LinearWeight w;
                     std::vector<DeviceBuffer> store;
                     store.emplace_back(h.gpu, size_t(n * k) * 2);
                     const TensorView wb = store.back().view({n, k}, DType::bf16);
                     ops::fill_uniform(h.gpu, wb, 5, 0.02f);
                     if (s == Fp8Scheme::off) {
                       w.weight = wb;
                     } else {
                       store.emplace_back(h.gpu, size_t(n * k));
                       w.weight = store.back().view({n, k}, DType::f8e4m3);
                       const Shape ss = weight_scale_shape(s, n, k);
                       store.emplace_back(h.gpu, size_t(ss.numel()) * 4);
                       w.scales = store.back().view(ss, DType::f32);
                       w.scheme = s;
                       w.act = act;
                       ops::quantize_weight(h.gpu, wb, s, w.weight, w.scales);
                     }
                     ops::prepare_linear(h.gpu, w, store);
                     const TensorView x = bf(h, {T, k}, 6, 2), y = bf(h, {T, n}, 7, 1);
                     o.seconds = time_op(h, [&] { ops::linear(h.gpu, x, w, y); });
                     o.flops = 2.0 * T * n * k;
                     const std::string path = h.dev->last_linear_path();
                     const double gemm = h.dev->time_gemm(w, T, 10) * 1e-3;
                     o.info = fmt::format(
                         "[{}] GEMM alone {:.1f} TFLOP/s; linear incl. "
                         "quantization at {:.0f}% of it",
                         path, o.flops / gemm * 1e-12, 100.0 * gemm / o.seconds);
                   }});
  return c;
}

}  // namespace fp8rl::gpu_test
