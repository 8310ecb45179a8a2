// Op cases: causal GQA attention (window, softcap, cache offsets, the fused amax) and CUDA
// graph replays of an attention block.
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

}  // namespace fp8rl::gpu_test
