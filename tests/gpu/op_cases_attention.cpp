// Op cases: causal GQA attention (window, softcap, cache offsets, the fused amax) and CUDA
// graph replays of an attention block.
#include <algorithm>
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

// ---- paged attention ---------------------------------------------------------------------

// A ragged batch over a paged cache (blocks of 16 in shuffled order, the pool's unused slots
// NaN), run through store_kv and paged_attention on both devices, with two padding rows after
// the last sequence. Checks: store_kv fills the pools bit for bit as the CPU does; the output
// against the exact CPU paged attention (kCudaAttention for the prefill kernels, whose P is
// rounded to bf16; kCudaPagedDecode for the decode kernel, taken when every sequence has at
// most one new query, on the tensor cores and, on a second device, on the CUDA cores); the prefill
// kernels give each sequence's rows of attention() over a contiguous cache on the GPU bit for bit
// (the same key tiles in the same order); padding rows are zeros; the fused amax; a CUDA graph
// replay equals the eager run; and, as the negative control, a wrong block table entry breaks the
// bound. fp8_kv: FP8 pools (e4m3 codes, a scale per slot and kv head). store_kv's codes and scales
// equal the CPU's bit for bit; the reference is the exact CPU paged attention over an f32 pool
// of bf16(code * scale), the values the kernels read, so the same bounds hold; a wrong V scale
// breaks them (negative control). The contiguous-attention check is skipped: that runs the
// wgmma kernel at D = 128, while FP8 pools run the mma.sync kernel.

PagedPools make_paged_pools(Harness& h, const Tensor& k_all, const Tensor& v_all,
                            const Tensor& mapping, int64_t blocks, int64_t hkv, int64_t d,
                            bool fp8_kv) {
  constexpr int64_t kBlock = 16;
  PagedPools pools;
  Tensor &kp = pools.kp, &vp = pools.vp, &kc = pools.kc, &vc = pools.vc, &ks = pools.ks,
         &vs = pools.vs;
  TensorView &kp_d = pools.kp_d, &vp_d = pools.vp_d;
  ops::KvScales& sc_d = pools.sc_d;
  kp = Tensor::empty({blocks, kBlock, hkv, d}, DType::f32);
  vp = Tensor::empty({blocks, kBlock, hkv, d}, DType::f32);
  std::fill(kp.ptr<float>(), kp.ptr<float>() + kp.numel(), NAN);
  std::fill(vp.ptr<float>(), vp.ptr<float>() + vp.numel(), NAN);
  if (!fp8_kv) {
    kp_d = to_device(h, kp, DType::bf16), vp_d = to_device(h, vp, DType::bf16);
    ops::store_kv(h.cpu, k_all, v_all, mapping, kp, vp);
  } else {
    kc = Tensor::empty({blocks, kBlock, hkv, d}, DType::f8e4m3);
    vc = Tensor::empty({blocks, kBlock, hkv, d}, DType::f8e4m3);
    ks = Tensor::empty({blocks, kBlock, hkv}, DType::f32);
    vs = Tensor::empty({blocks, kBlock, hkv}, DType::f32);
    std::memset(kc.view().data, 0x7f, kc.nbytes());  // e4m3 NaN
    std::memset(vc.view().data, 0x7f, vc.nbytes());
    std::fill(ks.ptr<float>(), ks.ptr<float>() + ks.numel(), NAN);
    std::fill(vs.ptr<float>(), vs.ptr<float>() + vs.numel(), NAN);
    kp_d = to_device(h, kc, DType::f8e4m3), vp_d = to_device(h, vc, DType::f8e4m3);
    sc_d = {to_device(h, ks, DType::f32), to_device(h, vs, DType::f32)};
    // The CPU quantizes the same bf16 values the GPU stores.
    Tensor kb = Tensor::empty(k_all.shape(), DType::f32),
           vb = Tensor::empty(v_all.shape(), DType::f32);
    for (int64_t i = 0; i < kb.numel(); ++i) {
      kb.ptr<float>()[i] = round_to_bf16(k_all.ptr<float>()[i]);
      vb.ptr<float>()[i] = round_to_bf16(v_all.ptr<float>()[i]);
    }
    ops::store_kv(h.cpu, kb, vb, mapping, kc, vc, {ks.view(), vs.view()});
    for (int64_t r = 0; r < ks.numel(); ++r)
      for (int64_t i = 0; i < d; ++i) {
        kp.ptr<float>()[r * d + i] =
            round_to_bf16(e4m3_to_f32(kc.ptr<uint8_t>()[r * d + i]) * ks.ptr<float>()[r]);
        vp.ptr<float>()[r * d + i] =
            round_to_bf16(e4m3_to_f32(vc.ptr<uint8_t>()[r * d + i]) * vs.ptr<float>()[r]);
      }
  }
  return pools;
}

void persistent_decode_checks(Harness& h, Outcome& o,
                              const std::function<void(Context, const TensorView&)>& run,
                              const TensorView& want) {
  const Tensor want_bits = to_host(h, want);
  const auto [items, default_blocks] = h.dev->last_decode_grid();
  o.checks.push_back({"the default ran the tensor-core decode kernel, at most a block an item",
                      double(default_blocks), double(items),
                      items > 0 && default_blocks > 0 && default_blocks <= items});
  for (int sms : {1, 0}) {
    CudaDeviceOptions opt;
    opt.persistent_decode_sms = sms;
    CudaDevice dev(opt);
    const TensorView got = ops::scratch_alloc(h.gpu, want.shape, want.dtype);
    ops::fill(h.gpu, got, NAN);
    ops::synchronize(h.gpu);
    Context ctx = dev.context();
    run(ctx, got);
    ops::synchronize(ctx);
    // The grids differ from the default's, or the bit equality below would say nothing: a
    // 1-SM grid (3 blocks at a time) gives every block several items, the other one each.
    const auto [got_items, blocks] = dev.last_decode_grid();
    const bool grid_ok = got_items == items && (sms == 1 ? blocks < items : blocks == items);
    o.checks.push_back(
        {sms == 1 ? "1-SM grid: fewer blocks than items" : "block-per-item grid: a block an item",
         double(blocks), double(items), grid_ok});
    const Tensor got_bits = to_host(h, got);
    const bool same =
        std::memcmp(want_bits.view().data, got_bits.view().data, want_bits.nbytes()) == 0;
    o.checks.push_back({sms == 1 ? "decode grid for 1 SM (many items a block) == default"
                                 : "decode grid of a block per item == default",
                        same ? 0.0 : 1.0, 0.0, same});
  }
}

void paged_attention_case(Harness& h, Outcome& o, const std::vector<PagedSeq>& seqs, int64_t hq,
                          int64_t hkv, int64_t d, int64_t window, float softcap, bool fp8_kv) {
  constexpr int64_t kBlock = 16, kPadding = 2;
  const int64_t n_seqs = int64_t(seqs.size());
  int64_t width = 1, blocks = 3, rows = 0, max_q = 0, max_c = 1, tokens = 0;
  for (const PagedSeq& s : seqs) {
    width = std::max(width, ceil_div(s.context, kBlock));
    blocks += ceil_div(s.context, kBlock);
    rows += s.queries;
    tokens += s.context;
    max_q = std::max(max_q, s.queries);
    max_c = std::max(max_c, s.context);
  }
  // Blocks in a fixed shuffled order (an integer hash sorts them).
  std::vector<int32_t> perm(static_cast<size_t>(blocks));
  for (int64_t i = 0; i < blocks; ++i) perm[size_t(i)] = int32_t(i);
  std::sort(perm.begin(), perm.end(), [](int32_t a, int32_t b) {
    return uniform_hash(91, uint64_t(a), 1.0f) < uniform_hash(91, uint64_t(b), 1.0f);
  });
  Tensor tables = Tensor::zeros({n_seqs, width}, DType::i32),
         cu = Tensor::empty({n_seqs + 1}, DType::i32), lens = Tensor::empty({n_seqs}, DType::i32);
  // Every cached token (all positions of all sequences) and its slot, plus two padding tokens.
  Tensor mapping = Tensor::empty({tokens + 2}, DType::i32);
  const Tensor k_all = host_values({tokens + 2, hkv, d}, 81, 3.0f),
               v_all = host_values({tokens + 2, hkv, d}, 82, 2.0f);
  const Tensor q = host_values({rows + kPadding, hq, d}, 83, 3.0f);
  size_t next = 0;
  int64_t tok = 0;
  cu.ptr<int32_t>()[0] = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    int32_t* table = tables.ptr<int32_t>() + s * width;
    for (int64_t b = 0; b < ceil_div(seqs[size_t(s)].context, kBlock); ++b) table[b] = perm[next++];
    for (int64_t j = 0; j < seqs[size_t(s)].context; ++j)
      mapping.ptr<int32_t>()[tok++] = table[j / kBlock] * int32_t(kBlock) + int32_t(j % kBlock);
    cu.ptr<int32_t>()[s + 1] = cu.ptr<int32_t>()[s] + int32_t(seqs[size_t(s)].queries);
    lens.ptr<int32_t>()[s] = int32_t(seqs[size_t(s)].context);
  }
  mapping.ptr<int32_t>()[tokens] = mapping.ptr<int32_t>()[tokens + 1] = -1;

  // The CPU pools and reference.
  PagedPools pools = make_paged_pools(h, k_all, v_all, mapping, blocks, hkv, d, fp8_kv);
  Tensor &kp = pools.kp, &vp = pools.vp, &kc = pools.kc, &vc = pools.vc, &ks = pools.ks,
         &vs = pools.vs;
  const TensorView kp_d = pools.kp_d, vp_d = pools.vp_d;
  const ops::KvScales sc_d = pools.sc_d;
  ops::PagedBatch cpu_batch;
  cpu_batch.cu_q = cu;
  cpu_batch.context_lens = lens;
  cpu_batch.block_tables = tables;
  cpu_batch.num_seqs = n_seqs;
  cpu_batch.max_query_len = max_q;
  cpu_batch.max_context_len = max_c;
  ops::AttentionParams p;
  p.scale = 1.0f / std::sqrt(float(d));
  p.softcap = softcap;
  p.window = window;
  Tensor ref = Tensor::empty({rows + kPadding, hq, d}, DType::f32);
  ops::paged_attention(h.cpu, q, kp, vp, cpu_batch, p, ref);

  // The GPU.
  const TensorView q_d = to_device(h, q, DType::bf16), k_d = to_device(h, k_all, DType::bf16),
                   v_d = to_device(h, v_all, DType::bf16),
                   map_d = to_device(h, mapping, DType::i32);
  ops::PagedBatch batch = cpu_batch;
  batch.cu_q = to_device(h, cu, DType::i32);
  batch.context_lens = to_device(h, lens, DType::i32);
  batch.block_tables = to_device(h, tables, DType::i32);
  const TensorView amax = ops::scratch_alloc(h.gpu, {1}, DType::f32);
  Guard g(h);
  const TensorView out = ops::scratch_alloc(h.gpu, {rows + kPadding, hq, d}, DType::bf16);
  // A second call's output and its quantization for an FP8-row o_proj (out_q), poisoned.
  const TensorView out2 = ops::scratch_alloc(h.gpu, {rows + kPadding, hq, d}, DType::bf16);
  const ops::QuantizedActivation out_q =
      ops::alloc_quantized(h.gpu, ActScaling::token, rows + kPadding, hq * d);
  g.seal();
  ops::store_kv(h.gpu, k_d, v_d, map_d, kp_d, vp_d, sc_d);
  ops::fill_zero(h.gpu, amax);
  ops::paged_attention(h.gpu, q_d, kp_d, vp_d, batch, p, out, amax, sc_d);
  ops::paged_attention(h.gpu, q_d, kp_d, vp_d, batch, p, out2, {}, sc_d, &out_q);
  o.checks.push_back(g.verify({out, out2, out_q.codes, out_q.scales}));
  // With out_q: out_q is quantize(out) bit for bit, padding rows included (as zero rows), and
  // out2 equals out, its poisoned padding rows zeroed by the quantizing kernel (an adapter of
  // o_proj reads them).
  {
    const ops::QuantizedActivation want =
        ops::alloc_quantized(h.gpu, ActScaling::token, rows + kPadding, hq * d);
    ops::quantize(h.gpu, out.reshape({rows + kPadding, hq * d}), want);
    o.checks.push_back(expect_le(
        "out_q == quantize(out): bytes differing",
        bytes_differing(h, out_q.codes, want.codes) + bytes_differing(h, out_q.scales, want.scales),
        0));
    o.checks.push_back(expect_le("with out_q: out2 == out (padding rows zeros): bytes differing",
                                 bytes_differing(h, out, out2), 0));
  }

  auto bf16_bits = [](const Tensor& f) {
    Tensor b = Tensor::empty(f.shape(), DType::bf16);
    convert(f.view().data, DType::f32, b.view().data, DType::bf16, size_t(f.numel()));
    return b;
  };
  auto same_bytes = [](const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.view().data, b.view().data, a.nbytes()) == 0;
  };
  const bool pools_equal =
      fp8_kv ? same_bytes(to_host(h, kp_d), kc) && same_bytes(to_host(h, vp_d), vc) &&
                   same_bytes(to_host(h, sc_d.k), ks) && same_bytes(to_host(h, sc_d.v), vs)
             : same_bytes(to_host(h, kp_d), bf16_bits(kp)) &&
                   same_bytes(to_host(h, vp_d), bf16_bits(vp));
  o.checks.push_back({fp8_kv ? "store_kv codes and scales == cpu" : "store_kv pools == cpu",
                      pools_equal ? 0.0 : 1.0, 0.0, pools_equal});

  double vmax = 0;
  for (int64_t i = 0; i < tokens * hkv * d; ++i)
    vmax = std::max(vmax, double(std::fabs(v_all.ptr<float>()[i])));
  if (fp8_kv)  // the values read: saturation keeps |code * scale| <= amax, rounding may add
    for (int64_t i = 0; i < vp.numel(); ++i)
      if (!std::isnan(vp.ptr<float>()[i]))
        vmax = std::max(vmax, double(std::fabs(vp.ptr<float>()[i])));
  const bool decode = max_q == 1 && (hq / hkv) <= 16;
  const double bound = decode ? test::kCudaPagedDecode : kCudaAttention;
  const Tensor got = as_f32(h, out);
  o.info = std::string(decode ? "decode kernel" : "prefill kernel") + (fp8_kv ? ", FP8 KV" : "");
  o.checks.push_back(compare("out / max|v|", got, ref, bound, vmax));
  // The decode kernel's CUDA-core form (decode_mma off; the default above takes the
  // tensor-core kernel up to D = 128), on a second device of the same GPU, to the same bound.
  if (decode) {
    CudaDeviceOptions core_opt;
    core_opt.decode_mma = false;
    CudaDevice core_dev(core_opt);
    const TensorView core_out = ops::scratch_alloc(h.gpu, {rows + kPadding, hq, d}, DType::bf16);
    Context core = core_dev.context();
    ops::paged_attention(core, q_d, kp_d, vp_d, batch, p, core_out, {}, sc_d);
    ops::synchronize(core);
    o.checks.push_back(
        compare("CUDA-core decode kernel: out / max|v|", as_f32(h, core_out), ref, bound, vmax));
    if (d <= 128)  // the tensor-core kernel's head dims
      persistent_decode_checks(
          h, o,
          [&](Context c, const TensorView& y) {
            ops::paged_attention(c, q_d, kp_d, vp_d, batch, p, y, {}, sc_d);
          },
          out);
  }
  bool padding_zero = true;
  for (int64_t i = rows * hq * d; i < got.numel(); ++i) padding_zero &= got.ptr<float>()[i] == 0.0f;
  o.checks.push_back({"padding rows == 0", padding_zero ? 0.0 : 1.0, 0.0, padding_zero});
  float want = 0;
  for (int64_t i = 0; i < got.numel(); ++i) want = std::max(want, std::fabs(got.ptr<float>()[i]));
  const float fused = to_host(h, amax).ptr<float>()[0];
  o.checks.push_back(
      {"fused amax == max|out|", double(std::fabs(fused - want)), 0.0, fused == want});

  // The prefill kernels: each sequence's rows are attention()'s over a contiguous cache.
  if (!decode && !fp8_kv) {
    const Tensor got_bits = to_host(h, out);
    bool same = true;
    int64_t first_tok = 0;
    for (int64_t s = 0; s < n_seqs; ++s) {
      const PagedSeq& sq = seqs[size_t(s)];
      const int64_t r0 = cu.ptr<int32_t>()[s];
      if (sq.queries > 0) {
        const TensorView kc = k_d.slice_rows(first_tok, first_tok + sq.context),
                         vc = v_d.slice_rows(first_tok, first_tok + sq.context);
        const TensorView part = ops::scratch_alloc(h.gpu, {sq.queries, hq, d}, DType::bf16);
        ops::attention(h.gpu, q_d.slice_rows(r0, r0 + sq.queries), kc, vc, sq.context - sq.queries,
                       p, part);
        const Tensor want_bits = to_host(h, part);
        same &= std::memcmp(want_bits.view().data,
                            static_cast<const uint16_t*>(got_bits.view().data) + r0 * hq * d,
                            want_bits.nbytes()) == 0;
      }
      first_tok += sq.context;
    }
    o.checks.push_back({"rows == contiguous attention()", same ? 0.0 : 1.0, 0.0, same});
  }

  // CUDA graphs: both ops captured (the decode kernel's split-K scratch included) and replayed
  // rewrite the output bit for bit.
  {
    const Tensor eager = to_host(h, out);
    h.dev->begin_capture();
    ops::store_kv(h.gpu, k_d, v_d, map_d, kp_d, vp_d, sc_d);
    ops::paged_attention(h.gpu, q_d, kp_d, vp_d, batch, p, out, {}, sc_d);
    CudaGraph graph = h.dev->end_capture();
    ops::fill(h.gpu, out, NAN);
    graph.replay();
    const Tensor replayed = to_host(h, out);
    const bool same = std::memcmp(eager.view().data, replayed.view().data, eager.nbytes()) == 0;
    o.checks.push_back({"graph replay == eager", same ? 0.0 : 1.0, 0.0, same});
  }

  // Negative control: swap two blocks of the longest sequence's table.
  const int64_t longest =
      std::max_element(seqs.begin(), seqs.end(),
                       [](const PagedSeq& a, const PagedSeq& b) { return a.context < b.context; }) -
      seqs.begin();
  if (seqs[size_t(longest)].context > kBlock && seqs[size_t(longest)].queries > 0) {
    Tensor bad = Tensor::empty(tables.shape(), DType::i32);
    std::memcpy(bad.view().data, tables.view().data, tables.nbytes());
    int32_t* row = bad.ptr<int32_t>() + longest * width;
    const int64_t last = ceil_div(seqs[size_t(longest)].context, kBlock) - 1;
    std::swap(row[last], row[last - 1]);  // both hold visible keys of the last query
    const TensorView good_tables = batch.block_tables;
    batch.block_tables = to_device(h, bad, DType::i32);
    ops::paged_attention(h.gpu, q_d, kp_d, vp_d, batch, p, out, {}, sc_d);
    const Check c = compare("", as_f32(h, out), ref, bound, vmax);
    o.checks.push_back({"wrong block table exceeds the bound", c.err, bound, !c.ok});
    batch.block_tables = good_tables;
  }
  // Negative control of the scales: V read with 1.5x its scales.
  if (fp8_kv) {
    Tensor wrong = Tensor::empty(vs.shape(), DType::f32);
    for (int64_t i = 0; i < vs.numel(); ++i) wrong.ptr<float>()[i] = 1.5f * vs.ptr<float>()[i];
    const ops::KvScales bad_scales{sc_d.k, to_device(h, wrong, DType::f32)};
    ops::paged_attention(h.gpu, q_d, kp_d, vp_d, batch, p, out, {}, bad_scales);
    const Check c = compare("", as_f32(h, out), ref, bound, vmax);
    o.checks.push_back({"wrong V scales exceed the bound", c.err, bound, !c.ok});
  }
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
