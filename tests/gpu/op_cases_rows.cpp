// Op cases: element-wise and row-wise ops, the fused residual add + RMSNorm and q/k RMSNorm
// + RoPE (each also against its unfused composition on the GPU, bit for bit).
#include <cmath>
#include <cstring>

#include "harness.h"
#include "model/rope.h"
#include "op_cases.h"
#include "ops/columns.h"
#include "ops/uniform_hash.h"
#include "quant/fp8.h"
#include "tolerances.h"

namespace fp8rl::gpu_test {

using test::kBf16HalfUlp;
using test::kCudaAttention;
using test::kCudaBf16Op;
using test::kCudaFp8Gemm;

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

// The f32 add of gradients: one fma per element on both sides, so equal bit for bit.
void add_f32_case(Harness& h, Outcome& o, int64_t t, int64_t d) {
  const Tensor a = host_values({t, d}, 53, 3.0f), b = host_values({t, d}, 54, 3.0f);
  Tensor ref = Tensor::empty({t, d}, DType::f32);
  ops::add(h.cpu, a, b, ref, 0.37f);
  const TensorView a_d = to_device(h, a, DType::f32), b_d = to_device(h, b, DType::f32);
  Guard g(h);
  const TensorView out = ops::scratch_alloc(h.gpu, {t, d}, DType::f32);
  g.seal();
  ops::add(h.gpu, a_d, b_d, out, 0.37f);
  o.checks.push_back(compare("out", as_f32(h, out), ref, 0.0));
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
  o.checks.push_back(compare("out", as_f32(h, xd), ref, dt == DType::f32 ? 1e-6 : kCudaBf16Op));
  o.checks.push_back(g.verify({xd}));
}

void fill_case(Harness& h, Outcome& o, int64_t n) {
  Tensor ref = Tensor::empty({n}, DType::f32);
  ops::fill_uniform(h.cpu, ref.view(), 99, 0.5f);
  const TensorView d = ops::scratch_alloc(h.gpu, {n}, DType::f32);
  ops::fill_uniform(h.gpu, d, 99, 0.5f);
  o.checks.push_back(compare("fill_uniform f32 bit-exact", as_f32(h, d), ref, 0.0));
}

// ops::copy_elements (the engine's input ids of a step planned ahead) against the CPU on the
// same moves, out-of-range moves skipped on the device; then ops::copy_to_host_async into
// page-locked memory, read after a StreamMark recorded behind it was waited for, and the mark
// pair's device time. Control: the destination before the moves differs from the result.
void copy_elements_case(Harness& h, Outcome& o, int64_t m) {
  const int64_t n_src = 2 * m + 3, n_dst = 3 * m + 5;
  Tensor src = Tensor::empty({n_src}, DType::i32), dst = Tensor::empty({n_dst}, DType::i32);
  Tensor moves = Tensor::empty({m, 2}, DType::i32);
  for (int64_t i = 0; i < n_src; ++i) src.ptr<int32_t>()[i] = int32_t(1000 + 7 * i);
  for (int64_t i = 0; i < n_dst; ++i) dst.ptr<int32_t>()[i] = int32_t(-1 - i);
  for (int64_t i = 0; i < m; ++i) {  // distinct destinations, sources in any order
    moves.ptr<int32_t>()[2 * i] = int32_t((3 * i + 1) % n_dst);
    moves.ptr<int32_t>()[2 * i + 1] = int32_t((5 * i + 2) % n_src);
  }
  const Tensor before = to_host(h, to_device(h, dst, DType::i32));
  const TensorView src_d = to_device(h, src, DType::i32), dst_d = to_device(h, dst, DType::i32);
  const TensorView moves_d = to_device(h, moves, DType::i32);
  ops::copy_elements(h.cpu, src.view(), moves.view(), dst.view());
  ops::copy_elements(h.gpu, src_d, moves_d, dst_d);
  const Tensor got = to_host(h, dst_d);
  int64_t differ = 0, moved = 0;
  for (int64_t i = 0; i < n_dst; ++i) {
    differ += got.ptr<int32_t>()[i] != dst.ptr<int32_t>()[i];
    moved += before.ptr<int32_t>()[i] != dst.ptr<int32_t>()[i];
  }
  o.checks.push_back(expect_le("elements differing from the CPU", double(differ), 0));
  o.checks.push_back(
      expect_le("control: elements the moves left unchanged (of m)", double(m - moved), 0));
  // Moves outside either tensor are skipped: the destination keeps its values.
  Tensor bad = Tensor::empty({2, 2}, DType::i32);
  const int32_t b[] = {int32_t(n_dst), 0, 0, int32_t(n_src)};
  std::memcpy(bad.ptr<int32_t>(), b, sizeof b);
  ops::copy_elements(h.gpu, src_d, to_device(h, bad, DType::i32), dst_d);
  const Tensor after_bad = to_host(h, dst_d);
  o.checks.push_back(expect_le(
      "out-of-range moves changed elements",
      double(std::memcmp(after_bad.ptr<int32_t>(), got.ptr<int32_t>(), size_t(n_dst) * 4) != 0),
      0));

  DeviceBuffer pinned = DeviceBuffer::pinned_host(h.gpu, size_t(n_dst) * 4);
  const TensorView back = pinned.view({n_dst}, DType::i32);
  std::memset(back.data, 0, size_t(n_dst) * 4);
  ops::StreamMark begin(h.gpu), end(h.gpu);
  begin.record();
  ops::copy_to_host_async(h.gpu, dst_d, back);
  end.record();
  end.wait();
  o.checks.push_back(
      expect_le("async copy to the host differs",
                double(std::memcmp(back.data, got.ptr<int32_t>(), size_t(n_dst) * 4) != 0), 0));
  const double t = end.seconds_since(begin);
  o.checks.push_back(expect_le("mark pair time outside [0, 1 s]", t >= 0 && t < 1 ? 0 : 1, 0));
}

// ops::rope_store_kv with q, k and v the column parts of one [T, (Hq + 2 Hkv) D] matrix (the
// stacked q/k/v GEMM's output), the slots in reverse order and every third token padding (slot
// -1). Checks: q_out and the stored keys and values against the CPU (the three ops); q_out,
// pools and scales bit for bit against rms_norm_rope, rms_norm_rope, store_kv on CUDA; slots
// of no token left untouched; control: keys stored without their rotation differ from the pools.
void rope_store_kv_case(Harness& h, Outcome& o, int64_t t, int64_t hq, int64_t hkv, int64_t d,
                        bool norm, bool fp8_kv, bool in_place) {
  constexpr int64_t kBlock = 16;
  constexpr float kEps = 1e-6f;
  const int64_t n = (hq + 2 * hkv) * d, blocks = (t + kBlock - 1) / kBlock + 1,
                slots = blocks * kBlock;
  const Tensor y = host_values({t, n}, 311, 3.0f);
  const Tensor qn = host_values({d}, 312, 1.0f), kn = host_values({d}, 313, 1.0f);
  Tensor pos = Tensor::empty({t}, DType::i32), map = Tensor::empty({t}, DType::i32);
  int64_t stored = 0;
  for (int64_t i = 0; i < t; ++i) {
    pos.ptr<int32_t>()[i] = int32_t(5 + 3 * i);
    map.ptr<int32_t>()[i] = i % 3 == 2 ? -1 : int32_t(slots - 1 - i);
    stored += i % 3 != 2;
  }
  RopeConfig rc;
  rc.theta = 1e6;
  const std::vector<float> f = rope_inv_freq(rc, d);
  Tensor freq = Tensor::empty({d / 2}, DType::f32);
  std::memcpy(freq.view().data, f.data(), f.size() * 4);

  // The CPU: bf16 pools only (an FP8 pool quantizes its fp32 rotation there, bf16 on CUDA).
  Tensor q_ref = Tensor::empty({t, hq, d}, DType::f32);
  Tensor kp_ref = Tensor::empty({blocks, kBlock, hkv, d}, DType::f32),
         vp_ref = Tensor::empty({blocks, kBlock, hkv, d}, DType::f32);
  ops::QkRope qk_h;
  if (norm) qk_h.q_norm = qn, qk_h.k_norm = kn;
  qk_h.eps = kEps;
  qk_h.positions = pos;
  qk_h.inv_freq = freq;
  if (!fp8_kv)
    ops::rope_store_kv(h.cpu, ops::column_heads(y, 0, hq, d), ops::column_heads(y, hq * d, hkv, d),
                       ops::column_heads(y, (hq + hkv) * d, hkv, d), qk_h, map, kp_ref, vp_ref, {},
                       q_ref);

  const TensorView y_d = to_device(h, y, DType::bf16);
  ops::QkRope qk_d = qk_h;
  if (norm) qk_d.q_norm = to_device(h, qn, DType::f32), qk_d.k_norm = to_device(h, kn, DType::f32);
  qk_d.positions = to_device(h, pos, DType::i32);
  qk_d.inv_freq = to_device(h, freq, DType::f32);
  const TensorView map_d = to_device(h, map, DType::i32);
  const TensorView yq = ops::column_heads(y_d, 0, hq, d),
                   yk = ops::column_heads(y_d, hq * d, hkv, d),
                   yv = ops::column_heads(y_d, (hq + hkv) * d, hkv, d);
  const DType pool_dt = fp8_kv ? DType::f8e4m3 : DType::bf16;
  struct Pools {
    TensorView k, v;
    ops::KvScales sc;
  };
  Guard g(h);
  auto pools = [&] {
    Pools p{ops::scratch_alloc(h.gpu, {blocks, kBlock, hkv, d}, pool_dt),
            ops::scratch_alloc(h.gpu, {blocks, kBlock, hkv, d}, pool_dt),
            {}};
    if (fp8_kv)
      p.sc = {ops::scratch_alloc(h.gpu, {blocks, kBlock, hkv}, DType::f32),
              ops::scratch_alloc(h.gpu, {blocks, kBlock, hkv}, DType::f32)};
    return p;
  };
  const Pools fused = pools(), three = pools(), control = pools();
  const TensorView q_out = in_place ? yq : ops::scratch_alloc(h.gpu, {t, hq, d}, DType::bf16);
  const TensorView q3 = ops::scratch_alloc(h.gpu, {t, hq, d}, DType::bf16),
                   k3 = ops::scratch_alloc(h.gpu, {t, hkv, d}, DType::bf16);
  g.seal();
  // The three ops first: in place, the fused op overwrites q.
  ops::rms_norm_rope(h.gpu, yq, qk_d.q_norm, kEps, false, qk_d.positions, qk_d.inv_freq, q3);
  ops::rms_norm_rope(h.gpu, yk, qk_d.k_norm, kEps, false, qk_d.positions, qk_d.inv_freq, k3);
  ops::store_kv(h.gpu, k3, yv, map_d, three.k, three.v, three.sc);
  ops::store_kv(h.gpu, yk, yv, map_d, control.k, control.v, control.sc);
  ops::rope_store_kv(h.gpu, yq, yk, yv, qk_d, map_d, fused.k, fused.v, fused.sc, q_out);
  std::vector<TensorView> outputs{in_place ? y_d : q_out, q3, k3};
  for (const Pools* p : {&fused, &three, &control}) {
    outputs.insert(outputs.end(), {p->k, p->v});
    if (fp8_kv) outputs.insert(outputs.end(), {p->sc.k, p->sc.v});
  }
  o.checks.push_back(g.verify(outputs));

  // q_out gathered through its token stride.
  const Tensor q_all = to_host(h, in_place ? y_d : q_out);
  Tensor q_got = Tensor::empty({t, hq, d}, DType::bf16);
  for (int64_t i = 0; i < t; ++i)
    std::memcpy(q_got.ptr<uint16_t>() + i * hq * d, q_all.ptr<uint16_t>() + i * q_out.strides[0],
                size_t(hq * d) * 2);
  const Tensor q3_h = to_host(h, q3);
  o.checks.push_back(expect_le(
      "q_out != rms_norm_rope (bit-exact): bytes",
      std::memcmp(q_got.view().data, q3_h.view().data, q3_h.nbytes()) == 0 ? 0.0 : 1.0, 0));
  double pool_diff = bytes_differing(h, fused.k, three.k) + bytes_differing(h, fused.v, three.v);
  if (fp8_kv)
    pool_diff +=
        bytes_differing(h, fused.sc.k, three.sc.k) + bytes_differing(h, fused.sc.v, three.sc.v);
  o.checks.push_back(expect_le(fp8_kv
                                   ? "codes, scales != rms_norm_rope + store_kv (bit-exact): bytes"
                                   : "pools != rms_norm_rope + store_kv (bit-exact): bytes",
                               pool_diff, 0));
  const double control_diff = bytes_differing(h, fused.k, control.k);
  o.checks.push_back({"control: keys stored unrotated differ from the pools (bytes)", control_diff,
                      1.0, control_diff >= 1.0});
  // Slots written: exactly those of the non-padding tokens.
  const Tensor kh = to_host(h, fused.k);
  const size_t row = size_t(hkv * d) * dtype_size(pool_dt);
  int64_t written = 0;
  for (int64_t sl = 0; sl < slots; ++sl) {
    const uint8_t* b = kh.ptr<uint8_t>() + size_t(sl) * row;
    written += !std::all_of(b, b + row, [](uint8_t x) { return x == 0xFF; });
  }
  o.checks.push_back(
      expect_le("slots written != non-padding tokens", std::fabs(double(written - stored)), 0));

  if (!fp8_kv) {
    Tensor qf = Tensor::empty({t, hq, d}, DType::f32);
    convert(q_got.view().data, DType::bf16, qf.view().data, DType::f32, size_t(qf.numel()));
    o.checks.push_back(compare("q_out", qf, q_ref, norm ? test::kCudaNormRope : kCudaBf16Op));
    // The stored rows, token by token.
    const Tensor kf = as_f32(h, fused.k), vf = as_f32(h, fused.v);
    Tensor kg = Tensor::empty({stored, hkv, d}, DType::f32),
           kr = Tensor::empty({stored, hkv, d}, DType::f32);
    Tensor vg = Tensor::empty({stored, hkv, d}, DType::f32),
           vr = Tensor::empty({stored, hkv, d}, DType::f32);
    int64_t r = 0;
    for (int64_t i = 0; i < t; ++i) {
      const int32_t sl = map.ptr<int32_t>()[i];
      if (sl < 0) continue;
      const size_t at = size_t(sl * hkv * d) * 4, to = size_t(r++ * hkv * d) * 4,
                   nb = size_t(hkv * d) * 4;
      std::memcpy(reinterpret_cast<char*>(kg.view().data) + to,
                  reinterpret_cast<const char*>(kf.view().data) + at, nb);
      std::memcpy(reinterpret_cast<char*>(kr.view().data) + to,
                  reinterpret_cast<const char*>(kp_ref.view().data) + at, nb);
      std::memcpy(reinterpret_cast<char*>(vg.view().data) + to,
                  reinterpret_cast<const char*>(vf.view().data) + at, nb);
      std::memcpy(reinterpret_cast<char*>(vr.view().data) + to,
                  reinterpret_cast<const char*>(vp_ref.view().data) + at, nb);
    }
    o.checks.push_back(compare("stored keys", kg, kr, norm ? test::kCudaNormRope : kCudaBf16Op));
    o.checks.push_back(compare("stored values (copies)", vg, vr, 0));
  }
}

}  // namespace fp8rl::gpu_test
