// Perf mode of the op harness: each CUDA op alone at prefill sizes (8192 tokens, Qwen3-8B
// widths), reporting GB/s or TFLOP/s.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "harness.h"
#include "op_cases.h"
#include "ops/backward.h"
#include "ops/exactness.h"
#include "ops/optimizer.h"
#include "ops/uniform_hash.h"
#include "quant/fp8.h"

namespace fp8rl::gpu_test {

namespace {

// Seconds per call of `call` (its launches only): captured kCalls times in one CUDA graph on
// `dev`, replayed kReplays times after one warm-up replay.
template <typename Call>
double graph_seconds_per_call(CudaDevice* dev, const Call& call) {
  constexpr int kCalls = 20, kReplays = 5;
  dev->begin_capture();
  for (int i = 0; i < kCalls; ++i) call();
  CudaGraph graph = dev->end_capture();
  graph.replay();
  dev->synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kReplays; ++i) graph.replay();
  dev->synchronize();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count() / (kCalls * kReplays);
}

// A random [n, k] linear quantized with scheme s (bf16 when off), its buffers in `store`.
LinearWeight random_linear(Harness& h, Fp8Scheme s, int64_t n, int64_t k,
                           std::vector<DeviceBuffer>& store) {
  LinearWeight w;
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
    w.act = matching_act_scaling(s);
    ops::quantize_weight(h.gpu, wb, s, w.weight, w.scales);
  }
  ops::prepare_linear(h.gpu, w, store);
  return w;
}

}  // namespace

namespace {

// One MoE layer's experts, every projection [E, N, K] filled expert by expert (bf16, then
// quantized with s), routed uniformly at random (k distinct experts a token).
void moe_experts_perf(Harness& h, Outcome& o, Fp8Scheme s, int64_t t) {
  constexpr int64_t E = 128, K = 8, H = 2048, I = 768;
  std::vector<DeviceBuffer> store;
  auto experts = [&](int64_t n, int64_t k, uint64_t seed) {
    ExpertLinear w;
    const DType dt = s == Fp8Scheme::off ? DType::bf16 : DType::f8e4m3;
    store.emplace_back(h.gpu, size_t(E * n * k) * dtype_size(dt));
    w.weight = store.back().view({E, n, k}, dt);
    if (s == Fp8Scheme::off) {
      ops::fill_uniform(h.gpu, w.weight, seed, 0.02f);
      return w;
    }
    const Shape per = weight_scale_shape(s, n, k);
    store.emplace_back(h.gpu, size_t(E * per.numel()) * 4);
    w.scales = store.back().view({E * per.numel()}, DType::f32);
    w.scheme = s;
    w.act = matching_act_scaling(s);
    const TensorView wb = ops::scratch_alloc(h.gpu, {n, k}, DType::bf16);
    for (int64_t x = 0; x < E; ++x) {
      const LinearWeight one = w.expert(x);
      ops::fill_uniform(h.gpu, wb, seed + uint64_t(x), 0.02f);
      ops::quantize_weight(h.gpu, wb, s, one.weight, one.scales);
    }
    return w;
  };
  MoeWeights w;
  w.gate = experts(I, H, 10);
  w.up = experts(I, H, 1000);
  w.down = experts(H, I, 2000);
  Tensor ids = Tensor::empty({t, K}, DType::i32), wt = Tensor::empty({t, K}, DType::f32);
  std::vector<bool> hit(E, false);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0, n = 0; n < K; ++j) {
      const int32_t x =
          int32_t(uint32_t((uniform_hash(3 + i, uint64_t(j), 1.0f) + 1.0f) * 64.0f) % E);
      int32_t* row = ids.ptr<int32_t>() + i * K;
      if (std::find(row, row + n, x) != row + n) continue;
      row[n] = x;
      wt.ptr<float>()[i * K + n] = 1.0f / K;
      hit[size_t(x)] = true;
      ++n;
    }
  const TensorView x = ops::scratch_alloc(h.gpu, {t, H}, DType::bf16);
  ops::fill_uniform(h.gpu, x, 4, 1.0f);
  const TensorView ids_d = to_device(h, ids, DType::i32), wt_d = to_device(h, wt, DType::f32);
  const TensorView out = ops::scratch_alloc(h.gpu, {t, H}, DType::bf16);
  o.seconds = time_op(
      h, [&] { ops::moe_experts(h.gpu, x, w, ops::GatedActivation::silu, wt_d, ids_d, out); });
  const double experts_hit = double(std::count(hit.begin(), hit.end(), true));
  const double elem = s == Fp8Scheme::off ? 2.0 : 1.0;
  o.bytes = experts_hit * 3.0 * double(I * H) * elem + double(t * H) * 4;
  o.flops = 2.0 * double(t * K) * 3.0 * double(H * I);
  o.info = fmt::format("{} experts hit", experts_hit);
}

}  // namespace

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
  // Paged attention: a causal prefill as one sequence (the contiguous case's work, keys through
  // the block table), and decode steps of `seqs` sequences of `ctx` tokens each (bytes: the K/V
  // they read). Blocks in reverse order, so no sequence's blocks are contiguous.
  auto paged_batch = [](Harness& h, int64_t seqs, int64_t q_len, int64_t ctx) {
    constexpr int64_t kBlock = 16;
    const int64_t width = (ctx + kBlock - 1) / kBlock;
    Tensor cu = Tensor::empty({seqs + 1}, DType::i32), lens = Tensor::empty({seqs}, DType::i32),
           tables = Tensor::empty({seqs, width}, DType::i32);
    for (int64_t s = 0; s <= seqs; ++s) cu.ptr<int32_t>()[s] = int32_t(s * q_len);
    for (int64_t s = 0; s < seqs; ++s) lens.ptr<int32_t>()[s] = int32_t(ctx);
    for (int64_t i = 0; i < seqs * width; ++i)
      tables.ptr<int32_t>()[i] = int32_t(seqs * width - 1 - i);
    ops::PagedBatch b;
    b.cu_q = to_device(h, cu, DType::i32);
    b.context_lens = to_device(h, lens, DType::i32);
    b.block_tables = to_device(h, tables, DType::i32);
    b.num_seqs = seqs;
    b.max_query_len = q_len;
    b.max_context_len = ctx;
    return b;
  };
  c.push_back({"paged_attention prefill T=8192 Hq=32 Hkv=8 D=128", [=](Harness& h, Outcome& o) {
                 const ops::PagedBatch b = paged_batch(h, 1, T, T);
                 const TensorView q = bf(h, {T, HQ, D}, 1, 1), out = bf(h, {T, HQ, D}, 4, 1),
                                  kp = bf(h, {T / 16, 16, HKV, D}, 2, 1),
                                  vp = bf(h, {T / 16, 16, HKV, D}, 3, 1);
                 ops::AttentionParams p;
                 p.scale = 1.0f / std::sqrt(float(D));
                 o.seconds = time_op(
                     h, [&] { ops::paged_attention(h.gpu, q, kp, vp, b, p, out); }, 5);
                 o.flops = 4.0 * double(D) * HQ * double(T) * double(T + 1) / 2;
               }});
  // Decode steps without shared prefixes, over a bf16 pool and an FP8 one (codes and a scale a
  // key row: the bytes of the K/V read; bench grpo's 1 x 8 and 16 x 8 shapes at their mean
  // context among them).
  for (auto [seqs, ctx] :
       {std::pair<int64_t, int64_t>{64, 2048}, {256, 1024}, {8, 16384}, {8, 384}, {128, 640}})
    for (bool fp8_kv : {false, true})
      c.push_back(
          {fmt::format("paged_attention decode{} S={} ctx={} Hq=32 Hkv=8 D=128",
                       fp8_kv ? " fp8_kv" : "", seqs, ctx),
           [=](Harness& h, Outcome& o) {
             const ops::PagedBatch b = paged_batch(h, seqs, 1, ctx);
             const int64_t blocks = seqs * ((ctx + 15) / 16);
             const TensorView q = bf(h, {seqs, HQ, D}, 1, 1), out = bf(h, {seqs, HQ, D}, 4, 1);
             TensorView kp, vp;
             ops::KvScales sc;
             if (fp8_kv) {
               Tensor codes = Tensor::empty({blocks, 16, HKV, D}, DType::f8e4m3),
                      scales = Tensor::empty({blocks, 16, HKV}, DType::f32);
               std::memset(codes.view().data, 0x38, codes.nbytes());  // e4m3 1.0
               std::fill(scales.ptr<float>(), scales.ptr<float>() + scales.numel(), 0.01f);
               kp = to_device(h, codes, DType::f8e4m3);
               vp = to_device(h, codes, DType::f8e4m3);
               sc = {to_device(h, scales, DType::f32), to_device(h, scales, DType::f32)};
             } else {
               kp = bf(h, {blocks, 16, HKV, D}, 2, 1);
               vp = bf(h, {blocks, 16, HKV, D}, 3, 1);
             }
             ops::AttentionParams p;
             p.scale = 1.0f / std::sqrt(float(D));
             o.seconds =
                 time_op(h, [&] { ops::paged_attention(h.gpu, q, kp, vp, b, p, out, {}, sc); });
             o.bytes = 2.0 * double(seqs) * double(ctx) * HKV * (fp8_kv ? D + 4 : D * 2);
           }});
  // Decode steps of 256 sequences, 32 prompts x 8 samples (the GRPO shape) of ctx tokens:
  // each prompt's first ctx - own tokens in blocks its samples share, own of their own (128;
  // and bench generate's shape, a 128-token prompt, at 32, 128, 256 and 512 new tokens;
  // prompts of 256 and 512 tokens, where the shared-prefix path pays off); with
  // the shared-prefix path (prefix blocks read once per group; the prefix kernel on mma.sync,
  // or on the CUDA cores on a second device) and without (read by every sample; the decode
  // kernel on the tensor cores, or on the CUDA cores on a second device; *-item-blocks: the
  // tensor-core kernels with a block per item instead of blocks of several). Bytes: the
  // K/V the path must read, so GB/s compare with the plain decode above; the time is what to
  // compare between the variants.
  for (auto [ctx, kOwn] : {std::pair<int64_t, int64_t>{1024, 128},
                           {4096, 128},
                           {160, 32},
                           {256, 128},
                           {384, 256},
                           {640, 512},
                           {512, 256},
                           {768, 256}})
    for (const char* variant :
         {"mma", "cuda-cores", "off", "off-cuda-cores", "mma-item-blocks", "off-item-blocks"})
      c.push_back(
          {fmt::format("paged_attention decode shared_prefix={} S=256 (32x8) ctx={} own={} "
                       "Hq=32 Hkv=8 D=128",
                       variant, ctx, kOwn),
           [=](Harness& h, Outcome& o) {
             const std::string v = variant;
             const bool use_shared = v == "mma" || v == "cuda-cores" || v == "mma-item-blocks";
             constexpr int64_t kGroups = 32, kMembers = 8, kSeqs = kGroups * kMembers;
             const int64_t width = ctx / 16, prefix = ctx - kOwn, shared_blocks = prefix / 16;
             const int64_t blocks = kGroups * shared_blocks + kSeqs * (kOwn / 16);
             Tensor cu = Tensor::empty({kSeqs + 1}, DType::i32),
                    lens = Tensor::empty({kSeqs}, DType::i32),
                    tables = Tensor::empty({kSeqs, width}, DType::i32);
             Tensor pcu = Tensor::empty({kSeqs / 2 + 1}, DType::i32),
                    pmem = Tensor::empty({kSeqs}, DType::i32),
                    plen = Tensor::zeros({kSeqs / 2}, DType::i32),
                    pof = Tensor::empty({kSeqs}, DType::i32);
             int32_t next = 0;
             for (int64_t s = 0; s <= kSeqs; ++s) cu.ptr<int32_t>()[s] = int32_t(s);
             for (int64_t g = 0; g <= kSeqs / 2; ++g)
               pcu.ptr<int32_t>()[g] = int32_t(std::min(g, kGroups) * kMembers);
             for (int64_t g = 0; g < kGroups; ++g) {
               plen.ptr<int32_t>()[g] = int32_t(prefix);
               const int32_t first = next;
               next += int32_t(shared_blocks);
               for (int64_t m = 0; m < kMembers; ++m) {
                 const int64_t s = g * kMembers + m;
                 lens.ptr<int32_t>()[s] = int32_t(ctx);
                 pmem.ptr<int32_t>()[s] = int32_t(s);
                 pof.ptr<int32_t>()[s] = int32_t(prefix);
                 int32_t* row = tables.ptr<int32_t>() + s * width;
                 for (int64_t b = 0; b < width; ++b)
                   row[b] = b < shared_blocks ? first + int32_t(b) : next++;
               }
             }
             ops::PagedBatch b;
             b.cu_q = to_device(h, cu, DType::i32);
             b.context_lens = to_device(h, lens, DType::i32);
             b.block_tables = to_device(h, tables, DType::i32);
             b.num_seqs = kSeqs;
             b.max_query_len = 1;
             b.max_context_len = ctx;
             if (use_shared) {
               b.prefix_cu_members = to_device(h, pcu, DType::i32);
               b.prefix_members = to_device(h, pmem, DType::i32);
               b.prefix_lens = to_device(h, plen, DType::i32);
               b.prefix_len_of_seq = to_device(h, pof, DType::i32);
             }
             const TensorView q = bf(h, {kSeqs, HQ, D}, 1, 1), out = bf(h, {kSeqs, HQ, D}, 4, 1),
                              kp = bf(h, {blocks, 16, HKV, D}, 2, 1),
                              vp = bf(h, {blocks, 16, HKV, D}, 3, 1);
             ops::AttentionParams p;
             p.scale = 1.0f / std::sqrt(float(D));
             std::unique_ptr<CudaDevice> second;  // the variants' own device options
             Context ctx_run = h.gpu;
             if (v != "mma" && v != "off") {
               CudaDeviceOptions opt;
               const bool on_cores = v == "cuda-cores" || v == "off-cuda-cores";
               opt.shared_prefix_mma = !on_cores;
               opt.decode_mma = !on_cores;
               if (!on_cores) opt.persistent_decode_sms = 0;  // *-item-blocks
               opt.arena_bytes = size_t(1) << 30;  // the partials of ctx 4096 need ~70 MB
               second = std::make_unique<CudaDevice>(opt);
               ctx_run = second->context();
             }
             o.seconds =
                 time_op(ctx_run, [&] { ops::paged_attention(ctx_run, q, kp, vp, b, p, out); });
             const double keys =
                 use_shared ? double(kGroups * prefix + kSeqs * kOwn) : double(kSeqs * ctx);
             o.bytes = 2.0 * keys * HKV * D * 2;
             o.info = fmt::format("K/V read {:.1f} MB", o.bytes / 1e6);
           }});
  // The attention backward at `fp8rl bench train`'s shape (8 sequences of 1024 tokens, full
  // prefills, Qwen3-8B heads), on the harness's device (the tiled kernels unless
  // --reference-attention-backward) and on a second device opened with the reference kernels,
  // so one run times both. FLOP/s counts FlashAttention-2's 5 matmuls per visible pair
  // (S, dP, dV, dK, dQ: 10 D flops), not the 7 the split dk/dv and dq kernels run.
  for (bool reference : {false, true})
    c.push_back(
        {fmt::format("paged_attention_backward{} S=8 T=1024 Hq=32 Hkv=8 D=128",
                     reference ? " reference-kernels" : ""),
         [=](Harness& h, Outcome& o) {
           constexpr int64_t kSeqs = 8, kLen = 1024, kT = kSeqs * kLen;
           const ops::PagedBatch b = paged_batch(h, kSeqs, kLen, kLen);
           const TensorView q = bf(h, {kT, HQ, D}, 1, 1), out = bf(h, {kT, HQ, D}, 4, 1),
                            kp = bf(h, {kT / 16, 16, HKV, D}, 2, 1),
                            vp = bf(h, {kT / 16, 16, HKV, D}, 3, 1);
           const TensorView lse = ops::scratch_alloc(h.gpu, {kT, HQ}, DType::f32),
                            dout = ops::scratch_alloc(h.gpu, {kT, HQ, D}, DType::f32),
                            dq = ops::scratch_alloc(h.gpu, {kT, HQ, D}, DType::f32),
                            dk = ops::scratch_alloc(h.gpu, {kT, HKV, D}, DType::f32),
                            dv = ops::scratch_alloc(h.gpu, {kT, HKV, D}, DType::f32);
           ops::fill_uniform(h.gpu, dout, 5, 1.0f);
           ops::AttentionParams p;
           p.scale = 1.0f / std::sqrt(float(D));
           ops::paged_attention_lse(h.gpu, q, kp, vp, b, p, out, lse);  // real probabilities
           ops::synchronize(h.gpu);
           std::unique_ptr<CudaDevice> ref;
           Context ctx = h.gpu;
           if (reference) {
             CudaDeviceOptions opt;
             opt.tiled_attention_backward = false;
             ref = std::make_unique<CudaDevice>(opt);
             ctx = ref->context();
           }
           o.seconds = time_op(
               ctx,
               [&] {
                 ops::paged_attention_backward(ctx, q, kp, vp, b, p, out, lse, dout, dq, dk, dv);
               },
               reference ? 3 : 10);
           o.flops = 10.0 * double(D) * HQ * kSeqs * double(kLen) * double(kLen + 1) / 2;
           o.info = reference || !h.tiled_attention_backward ? "[reference kernels]"
                                                             : "[tiled mma.sync]";
         }});
  // Prefill / training (M = 8192 tokens) and a decode step of 256 sequences (M = 256).
  for (int64_t m : {int64_t(8192), int64_t(256)})
    for (Fp8Scheme s : {Fp8Scheme::off, Fp8Scheme::tensor, Fp8Scheme::row, Fp8Scheme::block})
      for (auto [n, k] :
           {std::pair<int64_t, int64_t>{4096, 4096}, {1024, 4096}, {12288, 4096}, {4096, 12288}})
        c.push_back({fmt::format("linear {} M={} N={} K={}", scheme_name(s), m, n, k),
                     [=](Harness& h, Outcome& o) {
                       const int64_t T = m;
                       std::vector<DeviceBuffer> store;
                       const LinearWeight w = random_linear(h, s, n, k, store);
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
  // Decode-step FP8-row GEMMs at Qwen3-8B's projections (q/k/v stacked, o, gate and up as a
  // pair, down), M rows quantized once (256: bench generate's step; 8-64: GRPO groups),
  // replayed from a CUDA graph of 20 calls as the engine's decode steps are; each on the
  // weight-streaming kernel where it applies (M <= 16) and on cuBLASLt alone
  // (CudaDeviceOptions::streaming_linears off), whose ratio is the kernel's gain.
  struct DecodeGemm {
    int64_t m, n, k;
    bool pair;
    bool bf16 = false;  // bf16 weights (the baseline FP8 is measured against)
  };
  std::vector<DecodeGemm> decode_gemms = {{256, 6144, 4096, false},
                                          {256, 4096, 4096, false},
                                          {256, 12288, 4096, true},
                                          {256, 4096, 12288, false}};
  for (int64_t m : {int64_t(8), int64_t(16), int64_t(64)})
    for (DecodeGemm d : {DecodeGemm{m, 6144, 4096, false}, DecodeGemm{m, 4096, 4096, false},
                         DecodeGemm{m, 12288, 4096, true}, DecodeGemm{m, 4096, 12288, false}})
      decode_gemms.push_back(d);
  for (DecodeGemm d :
       {DecodeGemm{8, 6144, 4096, false, true}, DecodeGemm{8, 4096, 4096, false, true},
        DecodeGemm{8, 12288, 4096, true, true}, DecodeGemm{8, 4096, 12288, false, true}})
    decode_gemms.push_back(d);
  for (DecodeGemm s : decode_gemms)
    for (bool streaming : {true, false}) {
      const bool streams = s.m <= 16 && !s.bf16;  // ops/cuda/kernels.h kStreamingMaxRows
      if (streaming && !streams) continue;
      c.push_back({fmt::format("decode_gemm {} M={} N={}{} K={}{}", s.bf16 ? "bf16" : "row", s.m,
                               s.n, s.pair ? " x2" : "", s.k,
                               !streams    ? ""
                               : streaming ? " streaming"
                                           : " cublaslt"),
                   [=](Harness& h, Outcome& o) {
                     const int64_t M = s.m;
                     std::vector<DeviceBuffer> store;
                     const Fp8Scheme scheme = s.bf16 ? Fp8Scheme::off : Fp8Scheme::row;
                     const LinearWeight w0 = random_linear(h, scheme, s.n, s.k, store);
                     const LinearWeight w1 =
                         s.pair ? random_linear(h, scheme, s.n, s.k, store) : w0;
                     const TensorView x = bf(h, {M, s.k}, 6, 2);
                     const ops::QuantizedActivation xq =
                         ops::alloc_quantized(h.gpu, ActScaling::token, M, s.k);
                     ops::quantize(h.gpu, x, xq);
                     const TensorView y0 = bf(h, {M, s.n}, 7, 1), y1 = bf(h, {M, s.n}, 8, 1);
                     std::unique_ptr<CudaDevice> own;
                     CudaDevice* dev = h.dev.get();
                     if (!streaming) {
                       CudaDeviceOptions opt;
                       opt.streaming_linears = false;
                       own = std::make_unique<CudaDevice>(opt);
                       dev = own.get();
                     }
                     Context ctx = streaming ? h.gpu : dev->context();
                     auto call = [&] {
                       if (s.bf16) {
                         const ops::Projection group[] = {{&w0, {}, y0, {}}, {&w1, {}, y1, {}}};
                         ops::linear_group(ctx, ops::LinearInput{x, {}},
                                           std::span<const ops::Projection>(group, s.pair ? 2 : 1));
                       } else if (s.pair) {
                         linear_pair(ctx, xq, w0, y0, w1, y1);
                       } else {
                         ops::linear(ctx, xq, w0, y0);
                       }
                     };
                     call();
                     dev->synchronize();
                     o.info = dev->last_linear_path();
                     o.seconds = graph_seconds_per_call(dev, call);
                     const double gemms = s.pair ? 2 : 1,
                                  bytes = gemms * s.n * s.k * (s.bf16 ? 2 : 1);
                     o.flops = gemms * 2.0 * M * s.n * s.k;
                     o.info += fmt::format("; weights {:.1f} MB at {:.2f} TB/s", bytes / 1e6,
                                           bytes / o.seconds * 1e-12);
                   }});
    }
  // A decode step's projection groups of Qwen3-8B at a GRPO group's 8 rows and at bench
  // generate's 256 with LoRA r = 32 on every projection (the A matrices side by side, as
  // LoraAdapter lays them out) against the same group without the adapter, with the down
  // products as a GEMM before the streaming launch (streaming_lora_down off; 8 rows), and the
  // adapters' down product alone (the stacked A as a bf16 linear): what an adapter costs each
  // group, replayed from a CUDA graph.
  struct LoraGroup {
    const char* name;
    std::vector<int64_t> ns;
    int64_t k;
  };
  for (const int64_t M : {8, 256})
    for (const LoraGroup& g :
         {LoraGroup{"qkv", {4096, 1024, 1024}, 4096}, LoraGroup{"o", {4096}, 4096},
          LoraGroup{"gate_up", {12288, 12288}, 4096}, LoraGroup{"down", {4096}, 12288}})
      for (const char* variant : {"base", "lora", "lora_down_apart", "down_product"}) {
        if (M != 8 && std::string(variant) == "lora_down_apart") continue;  // streaming only
        c.push_back(
            {fmt::format("decode_lora row M={} {} r=32 {}", M, g.name, variant),
             [=](Harness& h, Outcome& o) {
               constexpr int64_t R = 32;
               const std::string v = variant;
               const int64_t count = int64_t(g.ns.size());
               std::vector<DeviceBuffer> store;
               std::vector<LinearWeight> ws;
               for (int64_t n : g.ns) ws.push_back(random_linear(h, Fp8Scheme::row, n, g.k, store));
               const TensorView x = bf(h, {M, g.k}, 6, 2);
               const ops::QuantizedActivation xq =
                   ops::alloc_quantized(h.gpu, ActScaling::token, M, g.k);
               ops::quantize(h.gpu, x, xq);
               const TensorView a_all = bf(h, {R * count, g.k}, 9, 0.02f);
               std::vector<ops::Projection> group;
               std::unique_ptr<CudaDevice> own;
               CudaDevice* dev = h.dev.get();
               if (v == "lora_down_apart") {
                 CudaDeviceOptions opt;
                 opt.streaming_lora_down = false;
                 own = std::make_unique<CudaDevice>(opt);
                 dev = own.get();
               }
               Context ctx = own ? dev->context() : h.gpu;
               for (int64_t i = 0; i < count; ++i) {
                 LoraWeights l;
                 if (v == "lora" || v == "lora_down_apart") {
                   l.a = a_all.slice_rows(R * i, R * (i + 1));
                   l.b = bf(h, {g.ns[size_t(i)], R}, 10 + uint64_t(i), 0.02f);
                   l.scale = 2.0f;
                 }
                 group.push_back({&ws[size_t(i)], l, bf(h, {M, g.ns[size_t(i)]}, 20, 1), {}});
               }
               LinearWeight a;
               a.weight = a_all;
               const TensorView xa = bf(h, {M, R * count}, 30, 1);
               auto call = [&] {
                 if (v == "down_product")
                   ops::linear(ctx, x, a, xa);
                 else
                   ops::linear_group(ctx, ops::LinearInput{x, xq}, group);
               };
               call();
               dev->synchronize();
               o.info = dev->last_linear_path();
               o.seconds = graph_seconds_per_call(dev, call);
               double bytes = double(R * count * g.k) * 2;
               if (v != "down_product")
                 for (int64_t n : g.ns) bytes += double(n) * double(g.k);
               o.info += fmt::format("; {:.1f} us, weights {:.1f} MB at {:.2f} TB/s",
                                     o.seconds * 1e6, bytes / 1e6, bytes / o.seconds * 1e-12);
             }});
      }
  // Batch invariance (what on_policy_exact needs of the GEMMs): the first m rows of
  // a linear over 8,192 rows (a training pass) against the same m rows alone (a decode step
  // of m sequences), bytes compared. A measurement, not a check: it reports the equal rows.
  // "pinned": the device's batch-invariant mode (ops/exactness.h, on_policy_exact), with
  // LoRA's r = 32 shapes too; its time against the unpinned line is the mode's GEMM cost.
  for (bool pinned : {false, true})
    for (Fp8Scheme s : {Fp8Scheme::off, Fp8Scheme::row})
      for (auto [n, k] : {std::pair<int64_t, int64_t>{6144, 4096},
                          {4096, 4096},
                          {4096, 12288},
                          {151936, 4096},
                          {32, 4096},
                          {4096, 32}})
        for (int64_t m : {int64_t(1), int64_t(8), int64_t(256)}) {
          if (n == 151936 && s != Fp8Scheme::off) continue;  // the lm_head stays bf16
          if ((n == 32 || k == 32) && (s != Fp8Scheme::off || !pinned)) continue;  // LoRA: bf16
          c.push_back(
              {fmt::format("linear_batch_invariance{} {} M={} of 8192 N={} K={}",
                           pinned ? " pinned" : "", scheme_name(s), m, n, k),
               [=](Harness& h, Outcome& o) {
                 std::optional<ops::BatchInvariantScope> scope;
                 if (pinned) scope.emplace(h.gpu);
                 std::vector<DeviceBuffer> store;
                 const LinearWeight w = random_linear(h, s, n, k, store);
                 const TensorView x = bf(h, {T, k}, 6, 2), y = bf(h, {T, n}, 7, 1),
                                  ym = bf(h, {m, n}, 8, 1);
                 ops::linear(h.gpu, x, w, y);
                 o.seconds = time_op(h, [&] { ops::linear(h.gpu, x.slice_rows(0, m), w, ym); });
                 o.flops = 2.0 * m * n * k;
                 const Tensor big = to_host(h, y.slice_rows(0, m)), small = to_host(h, ym);
                 int64_t equal = 0;
                 const size_t row = size_t(n) * 2;
                 for (int64_t r = 0; r < m; ++r)
                   equal +=
                       std::memcmp(static_cast<const char*>(big.view().data) + r * row,
                                   static_cast<const char*>(small.view().data) + r * row, row) == 0;
                 o.info = fmt::format("[{}] rows equal to the 8192-row GEMM's: {}/{}",
                                      h.dev->last_linear_path(), equal, m);
               }});
        }
  // The sampler at a decode step of 256 sequences over Qwen's vocabulary.
  for (auto [k, filtered] : {std::pair{0, false}, {0, true}, {20, true}})
    c.push_back(
        {fmt::format("sample R=256 V=151936 K={}{}", k, filtered ? " top-k top-p" : ""),
         [=](Harness& h, Outcome& o) { sample_perf_case(h, o, 256, 151936, k, filtered); }});
  // The optimizer over the LoRA masters of Qwen3-8B at r = 32 on all seven projections:
  // 36 layers x 32 x (2 x 8192 + 2 x 5120 + 3 x 16384) values.
  constexpr int64_t P = 36 * 32 * 75776;
  auto f32 = [](Harness& h, uint64_t seed, float bound) {
    const TensorView t = ops::scratch_alloc(h.gpu, {P}, DType::f32);
    ops::fill_uniform(h.gpu, t, seed, bound);
    return t;
  };
  c.push_back({"adamw_step P=87.3M", [=](Harness& h, Outcome& o) {
                 const TensorView p = f32(h, 1, 0.1f), g = f32(h, 2, 1e-3f), m = f32(h, 3, 1e-4f);
                 const TensorView v = ops::scratch_alloc(h.gpu, {P}, DType::f32);
                 const TensorView copy = ops::scratch_alloc(h.gpu, {P}, DType::bf16);
                 ops::fill(h.gpu, v, 1e-6f);
                 ops::AdamWStep s;
                 s.lr = 1e-9;  // the values barely move over the timed calls
                 s.beta1 = 0.9, s.beta2 = 0.999, s.eps = 1e-8;
                 s.one_minus_beta1 = 0.1, s.one_minus_beta2 = 0.001;
                 s.bias_correction1 = 0.1, s.bias_correction2 = 0.001;
                 o.seconds = time_op(h, [&] { ops::adamw_step(h.gpu, s, p, g, 0.5f, m, v, copy); });
                 o.bytes = double(P) * (4 * 4 + 3 * 4 + 2);  // p, g, m, v in; p, m, v, copy out
               }});
  c.push_back({"l2_norm P=87.3M", [=](Harness& h, Outcome& o) {
                 const TensorView g = f32(h, 2, 1e-3f);
                 o.seconds = time_op(h, [&] { ops::l2_norm(h.gpu, g); });
                 o.bytes = double(P) * 4;
               }});
  // A Qwen3-30B-A3B MoE layer's experts (E = 128, top-8, H = 2048, I = 768) at decode, small
  // and prefill steps; GB/s counts the weights of the experts the routing hits.
  for (Fp8Scheme s : {Fp8Scheme::row, Fp8Scheme::block, Fp8Scheme::off})
    for (int64_t t : {8, 64, 4096})
      c.push_back({fmt::format("moe_experts {} T={} E=128 k=8 H=2048 I=768", scheme_name(s), t),
                   [=](Harness& h, Outcome& o) { moe_experts_perf(h, o, s, t); }});
  return c;
}

}  // namespace fp8rl::gpu_test
