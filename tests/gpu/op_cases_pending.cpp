// Op cases: pending linears (ops::linear_pending) and the ops that read their raw output
// (apply_pending, rope_store_kv).
#include <cstring>

#include "harness.h"
#include "model/rope.h"
#include "op_cases.h"
#include "ops/columns.h"
#include "tolerances.h"

namespace fp8rl::gpu_test {

using test::kCudaPendingGemm;

namespace {

// raw [m, n] f16 on the device -> its values by the CPU reference, rounded to bf16 as CUDA's.
Tensor cpu_values(Harness& h, const TensorView& raw, const ops::PendingScales& p) {
  const int64_t m = raw.dim(0), n = raw.dim(1);
  const Tensor raw_h = to_host(h, raw), row = as_f32(h, p.row), col = as_f32(h, p.col);
  const ops::PendingScales ph{row.view(), col.view().reshape({n}), p.inv_alpha};
  Tensor v = Tensor::empty({m, n}, DType::f32);
  ops::apply_pending(h.cpu, raw_h, ph, v);
  for (int64_t i = 0; i < m * n; ++i) v.ptr<float>()[i] = round_to_bf16(v.ptr<float>()[i]);
  return v;
}

double elements_differing(const Tensor& a, const Tensor& b) {
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) n += a.ptr<float>()[i] != b.ptr<float>()[i];
  return double(n);
}

}  // namespace

// A stacked q/k/v weight [(hq + 2 hkv) d, k] (FP8-row, token-scaled input of m rows). Checks:
// the pending path is taken; its values (apply_pending) against the CPU linear (control: alpha
// left in fails); CUDA's apply_pending against the CPU's bit for bit; rope_store_kv reading the
// raw parts against the op on their values, bit for bit.
void pending_case(Harness& h, Outcome& o, int64_t m, int64_t hq, int64_t hkv, int64_t d,
                  int64_t k) {
  constexpr int64_t kBlock = 16;
  const int64_t n = (hq + 2 * hkv) * d, blocks = (m + kBlock - 1) / kBlock + 1;
  auto qkv = make_linear(h, n, k, Fp8Scheme::row, ActScaling::token, false, 401);
  const Tensor x = host_values({m, k}, 403, 2.0f);
  Tensor ref = Tensor::empty({m, n}, DType::f32);
  ops::linear(h.cpu, x, qkv->cpu, ref);
  const TensorView x_d = to_device(h, x, DType::bf16);
  const ops::QuantizedActivation xq = ops::alloc_quantized(h.gpu, ActScaling::token, m, k);
  ops::quantize(h.gpu, x_d, xq);
  Tensor pos = Tensor::empty({m}, DType::i32), map = Tensor::empty({m}, DType::i32);
  for (int64_t i = 0; i < m; ++i) {
    pos.ptr<int32_t>()[i] = int32_t(7 + 2 * i);
    map.ptr<int32_t>()[i] = int32_t(blocks * kBlock - 1 - i);
  }
  RopeConfig rc;
  rc.theta = 1e6;
  const std::vector<float> f = rope_inv_freq(rc, d);
  Tensor freq = Tensor::empty({d / 2}, DType::f32);
  std::memcpy(freq.view().data, f.data(), f.size() * 4);
  ops::QkRope qk;
  qk.q_norm = to_device(h, host_values({d}, 404, 1.0f), DType::f32);
  qk.k_norm = to_device(h, host_values({d}, 405, 1.0f), DType::f32);
  qk.eps = 1e-6f;
  qk.positions = to_device(h, pos, DType::i32);
  qk.inv_freq = to_device(h, freq, DType::f32);
  const TensorView map_d = to_device(h, map, DType::i32);

  Guard g(h);
  const TensorView raw = ops::scratch_alloc(h.gpu, {m, n}, DType::f16);
  const TensorView vals = ops::scratch_alloc(h.gpu, {m, n}, DType::bf16);
  TensorView pools[4], q_out[2];
  for (TensorView& p : pools) p = ops::scratch_alloc(h.gpu, {blocks, kBlock, hkv, d}, DType::bf16);
  for (TensorView& q : q_out) q = ops::scratch_alloc(h.gpu, {m, hq, d}, DType::bf16);
  g.seal();
  for (const TensorView& p : pools) ops::fill_zero(h.gpu, p);
  ops::PendingScales p;
  const bool pending = ops::linear_pending(h.gpu, xq, qkv->gpu, raw, p);
  const std::string path = h.dev->last_linear_path();
  o.checks.push_back({"pending path taken", pending ? 0.0 : 1.0, 0.0, pending});
  if (!pending) return;
  ops::apply_pending(h.gpu, raw, p, vals);
  o.checks.push_back(compare("values vs CPU linear", as_f32(h, vals), ref, kCudaPendingGemm));
  const Tensor vals_h = as_f32(h, vals);
  o.checks.push_back(expect_le("apply_pending != CPU's (bit-exact): elements",
                               elements_differing(vals_h, cpu_values(h, raw, p)), 0));
  ops::PendingScales alpha_in = p;  // control: the raw sums still scaled by alpha
  alpha_in.inv_alpha = 1.0f;
  ops::apply_pending(h.gpu, raw, alpha_in, vals);
  const Check control = compare("control", as_f32(h, vals), ref, kCudaPendingGemm);
  o.checks.push_back(
      expect_le("control: values with alpha left in pass vs CPU", control.ok ? 1.0 : 0.0, 0));
  ops::apply_pending(h.gpu, raw, p, vals);

  // rope_store_kv reading the raw parts against the op on their values.
  auto heads = [&](const TensorView& y) {
    return std::array<TensorView, 3>{ops::column_heads(y, 0, hq, d),
                                     ops::column_heads(y, hq * d, hkv, d),
                                     ops::column_heads(y, (hq + hkv) * d, hkv, d)};
  };
  const auto r = heads(raw), v = heads(vals);
  // The pending call must run the fused kernel alone: the reference's two steps (apply_pending,
  // then the op) would make the comparison below one of a composition with itself.
  h.dev->reset_profile();
  h.dev->set_profiling(true);
  ops::rope_store_kv(h.gpu, r[0], r[1], r[2], qk, map_d, pools[0], pools[1], {}, q_out[0], &p);
  const std::vector<OpTime> ops_run = h.dev->profile();
  h.dev->set_profiling(false);
  const bool fused_alone = ops_run.size() == 1 && ops_run[0].name == "rope_store_kv";
  o.checks.push_back(
      expect_le("pending rope_store_kv ran other ops than its kernel", fused_alone ? 0.0 : 1.0, 0));
  ops::rope_store_kv(h.gpu, v[0], v[1], v[2], qk, map_d, pools[2], pools[3], {}, q_out[1]);
  o.checks.push_back(expect_le("rope_store_kv pending q_out != values' (bit-exact): bytes",
                               bytes_differing(h, q_out[0], q_out[1]), 0));
  o.checks.push_back(expect_le(
      "rope_store_kv pending pools != values' (bit-exact): bytes",
      bytes_differing(h, pools[0], pools[2]) + bytes_differing(h, pools[1], pools[3]), 0));
  // Control: the kernel reading the raw parts with alpha left in differs from the values'.
  ops::rope_store_kv(h.gpu, r[0], r[1], r[2], qk, map_d, pools[0], pools[1], {}, q_out[0],
                     &alpha_in);
  o.checks.push_back(expect_le("control: pending rope_store_kv with alpha left in equals",
                               bytes_differing(h, pools[1], pools[3]) > 0 ? 0.0 : 1.0, 0));

  o.checks.push_back(
      g.verify({raw, vals, pools[0], pools[1], pools[2], pools[3], q_out[0], q_out[1]}));
  o.info = path;
}

}  // namespace fp8rl::gpu_test
