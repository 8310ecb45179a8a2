// The paged KV cache on the CPU: store_kv scatters new keys/values into their slots, and
// paged_attention runs the row loops of attention() (attention_row.h) with rows found through
// each sequence's block table, so every row equals attention() over a contiguous copy of its
// sequence bit for bit. The metadata lives in host memory here, so it is validated in full.
#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/parallel.h"
#include "ops/cpu/attention_row.h"
#include "quant/fp8.h"

namespace fp8rl::ops::cpu {

namespace {
// Token t's Hkv rows of D values into slot `slot` of an FP8 pool: the recipe's per-row
// (token scaling) quantization of the [Hkv, D] matrix, one scale per head.
void store_fp8(const TensorView& x, int64_t t, int64_t slot, const TensorView& pool,
               const TensorView& scales) {
  const int64_t hkv = x.dim(1), d = x.dim(2);
  const TensorView rows(const_cast<float*>(x.ptr<const float>()) + t * x.strides[0], DType::f32,
                        {hkv, d});
  const TensorView codes(pool.ptr<uint8_t>() + slot * hkv * d, DType::f8e4m3, {hkv, d});
  const TensorView s(scales.ptr<float>() + slot * hkv, DType::f32, {hkv});
  quantize_activation(rows, ActScaling::token, codes, s);
}
}  // namespace

void store_kv(const TensorView& k, const TensorView& v, const TensorView& slot_mapping,
              const TensorView& k_pool, const TensorView& v_pool, const KvScales& scales) {
  const int64_t t_count = k.dim(0), row = k.dim(1) * k.dim(2);  // Hkv * D values per token
  const int64_t slots = k_pool.dim(0) * k_pool.dim(1);
  const int32_t* sm = slot_mapping.ptr<const int32_t>();
  for (int64_t t = 0; t < t_count; ++t)
    CHECK(sm[t] < slots, "store_kv: token {} maps to slot {} beyond the pool's {}", t, sm[t],
          slots);
  for (int64_t t = 0; t < t_count; ++t) {
    if (sm[t] < 0) continue;
    if (!scales.empty()) {
      store_fp8(k, t, sm[t], k_pool, scales.k);
      store_fp8(v, t, sm[t], v_pool, scales.v);
      continue;
    }
    std::memcpy(k_pool.ptr<float>() + sm[t] * row, k.ptr<const float>() + t * k.strides[0],
                size_t(row) * sizeof(float));
    std::memcpy(v_pool.ptr<float>() + sm[t] * row, v.ptr<const float>() + t * v.strides[0],
                size_t(row) * sizeof(float));
  }
}

void paged_attention(Arena& scratch, const TensorView& q, const TensorView& k_pool,
                     const TensorView& v_pool, const PagedBatch& b, const AttentionParams& p,
                     const TensorView& out, Rounding r, const TensorView& lse,
                     const KvScales& scales) {
  const int64_t t_count = q.dim(0), hq = q.dim(1), d = q.dim(2);
  const int64_t bs = k_pool.dim(1), hkv = k_pool.dim(2), group = hq / hkv;
  const int64_t seqs = b.num_seqs, width = b.block_tables.dim(1);
  const int32_t* cu = b.cu_q.ptr<const int32_t>();
  const int32_t* lens = b.context_lens.ptr<const int32_t>();
  CHECK(cu[0] >= 0 && cu[seqs] <= t_count, "paged_attention: cu_q [{}, {}] outside {} rows", cu[0],
        cu[seqs], t_count);
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t n = cu[s + 1] - cu[s];
    CHECK(n >= 0 && n <= b.max_query_len && lens[s] >= n && lens[s] <= b.max_context_len &&
              lens[s] <= width * bs,
          "paged_attention: sequence {} has {} new queries and {} tokens (bounds {} and {}, "
          "{} blocks of {})",
          s, n, lens[s], b.max_query_len, b.max_context_len, width, bs);
    const int32_t* table = b.block_tables.ptr<const int32_t>() + s * b.block_tables.strides[0];
    for (int64_t i = 0; i < (lens[s] + bs - 1) / bs; ++i)
      CHECK(table[i] >= 0 && table[i] < k_pool.dim(0),
            "paged_attention: sequence {} block {} is {}, outside the pool's {}", s, i, table[i],
            k_pool.dim(0));
  }
  ArenaScope scope(scratch);
  const int64_t cap = std::max<int64_t>(b.max_context_len, 1);
  TensorView scores = scratch.alloc({num_threads(), cap}, DType::f32);  // one row per thread
  TensorView deq;  // [threads, 2, D]: the key and value row being read from an FP8 pool
  if (!scales.empty()) deq = scratch.alloc({num_threads(), 2 * d}, DType::f32);
  const float* qp = q.ptr<const float>();
  float* op = out.ptr<float>();
  parallel_for(0, t_count * hq, [&](int64_t th) {
    const int64_t t = th / hq, h = th % hq;
    float* o = op + (t * hq + h) * d;
    float* row_lse = lse.empty() ? nullptr : lse.ptr<float>() + t * hq + h;
    if (t < cu[0] || t >= cu[seqs]) {  // padding
      std::fill(o, o + d, 0.0f);
      if (row_lse != nullptr) *row_lse = 0.0f;
      return;
    }
    const int64_t s = std::upper_bound(cu, cu + seqs + 1, int32_t(t)) - cu - 1;
    const int64_t pos = lens[s] - (cu[s + 1] - cu[s]) + (t - cu[s]);
    const int64_t lo = p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
    const int32_t* table = b.block_tables.ptr<const int32_t>() + s * b.block_tables.strides[0];
    float* sc = scores.ptr<float>() + int64_t(thread_index()) * cap;
    const auto run = [&](const auto& rows) {
      if (row_lse != nullptr)
        attend_exact(qp + (t * hq + h) * d, rows, h / group, d, lo, pos, p, sc, o, row_lse);
      else
        attend(r, qp + (t * hq + h) * d, rows, h / group, d, lo, pos, p, sc, o);
    };
    if (scales.empty()) {
      run(PagedRows{k_pool.ptr<const float>(), v_pool.ptr<const float>(), table, bs, hkv, d});
    } else {
      float* row = deq.ptr<float>() + int64_t(thread_index()) * 2 * d;
      run(Fp8PagedRows{k_pool.ptr<const uint8_t>(), v_pool.ptr<const uint8_t>(),
                       scales.k.ptr<const float>(), scales.v.ptr<const float>(), table, bs, hkv, d,
                       r == Rounding::bf16, row, row + d});
    }
  });
}

}  // namespace fp8rl::ops::cpu
