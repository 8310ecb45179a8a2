// Tensor views -> kernel launches for the CUDA ops, device memory and the device description.
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gradient_add.h"

#include <algorithm>

#include "ops/cuda/backend.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/view_pointers.h"

namespace fp8rl::cuda {

namespace {

QuantOut quant_out(const ops::QuantizedActivation& q) {
  QuantOut o;
  o.codes = static_cast<uint8_t*>(q.codes.data);
  o.scales = static_cast<float*>(q.scales.data);
  o.padded_rows = q.padded_rows;
  o.group = q.act == ActScaling::group;
  return o;
}

// A zeroed fp32 accumulator for a tensor-wide amax, from the arena (the caller's scope).
float* zeroed_amax(Backend& b) {
  TensorView a = b.arena().alloc({1}, DType::f32);
  CUDA_CHECK(cudaMemsetAsync(a.data, 0, sizeof(float), b.stream()));
  return static_cast<float*>(a.data);
}

}  // namespace

// ---- devices and memory

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver / no device: not an error for the caller
    return 0;
  }
  return n;
}

std::string gemm_path(Backend& b, Fp8Scheme scheme) {
  const Capabilities& c = b.caps();
  switch (scheme) {
    case Fp8Scheme::off:
      return "cuBLASLt bf16 x bf16, fp32 accumulation";
    case Fp8Scheme::tensor:
      return c.fp8_tensor ? "cuBLASLt e4m3, SCALAR_32F scales"
                          : "fallback: dequantize to bf16, cuBLASLt bf16";
    case Fp8Scheme::row:
      return c.fp8_outer ? "cuBLASLt e4m3, OUTER_VEC_32F scales (per-row weights, per-token acts)"
                         : "fallback: dequantize to bf16, cuBLASLt bf16";
    case Fp8Scheme::block:
      return c.fp8_block
                 ? "cuBLASLt e4m3, BLK128x128_32F weights x VEC128_32F activations (tokens padded "
                   "to a multiple of 4)"
                 : "fallback: dequantize to bf16, cuBLASLt bf16";
  }
  return "?";
}

std::string describe(int ordinal) {
  CudaDeviceOptions o;
  o.ordinal = ordinal;
  o.arena_bytes = 0;
  Backend b(o);
  const Capabilities& c = b.caps();
  std::string s = fmt::format(
      "device {}: {}, compute capability {}.{}, {} multiprocessors, {:.1f} GiB\n"
      "cuBLASLt {}\n",
      c.ordinal, c.name, c.major, c.minor, c.multiprocessors, double(c.memory) / (1u << 30),
      c.cublaslt_version);
  for (Fp8Scheme sc : {Fp8Scheme::off, Fp8Scheme::tensor, Fp8Scheme::row, Fp8Scheme::block})
    s += fmt::format("--fp8 {:<7}{}\n", scheme_name(sc), gemm_path(b, sc));
  s += fmt::format("activations bf16 (fp32 math), attention: {}",
                   c.attention_wgmma ? "wgmma (Hopper warpgroup MMA) for head_dim 128, mma.sync "
                                       "FlashAttention-2 style for other head dims"
                                     : "mma.sync FlashAttention-2 style");
  s += fmt::format("\ndevice memory: {}",
                   c.device_region ? "one region (addresses reserved once, memory mapped as used)"
                                   : "one cudaMalloc per buffer (no virtual memory management)");
  return s;
}

void* device_malloc(Backend& b, size_t bytes) {
  return b.malloc(bytes);
}
void device_free(Backend& b, void* p, size_t bytes) {
  b.free(p, bytes);
}
void* host_malloc_pinned(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMallocHost(&p, bytes));
  return p;
}
void host_free_pinned(void* p) {
  cudaFreeHost(p);  // in a destructor: an error here has nowhere to go
}
TensorView arena_alloc(Backend& b, Shape shape, DType dtype) {
  return b.arena().alloc(shape, dtype);
}
const void* arena_base(Backend& b) {
  return b.arena().base();
}
size_t arena_mark(Backend& b) {
  return b.arena().mark();
}
void arena_rewind(Backend& b, size_t mark) {
  b.arena().rewind(mark);
}
void arena_reserve(Backend& b, size_t bytes) {
  b.reserve_arena(bytes);
}
size_t device_free_bytes(Backend& b) {
  // The backend's device is current on this thread.
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return std::min(free_b, b.budget_left());
}
size_t arena_high_water(Backend& b) {
  return b.arena().high_water();
}

void copy(Backend& b, const TensorView& src, const TensorView& dst) {
  if (src.nbytes() == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDefault, b.stream()));
  if (dst.device == Device::cpu) CUDA_CHECK(cudaStreamSynchronize(b.stream()));
}

void copy_to_host_async(Backend& b, const TensorView& src, const TensorView& dst) {
  if (src.nbytes() == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToHost, b.stream()));
}

void copy_elements(Backend& b, const TensorView& src, const TensorView& moves,
                   const TensorView& dst) {
  launch_copy_elements(static_cast<const int32_t*>(src.data), src.numel(),
                       static_cast<const int32_t*>(moves.data), moves.dim(0),
                       static_cast<int32_t*>(dst.data), dst.numel(), b.stream());
}

void* event_create() {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

void event_destroy(void* e) {
  cudaEventDestroy(static_cast<cudaEvent_t>(e));  // in destructors: no throw
}

void event_record(Backend& b, void* e) {
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(e), b.stream()));
}

void event_wait(void* e) {
  CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e)));
}

double event_seconds(void* begin, void* end) {
  float ms = 0.0f;
  CUDA_CHECK(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(begin), static_cast<cudaEvent_t>(end)));
  return double(ms) / 1000.0;
}

void fill_zero(Backend& b, const TensorView& dst) {
  if (dst.device == Device::cpu) {
    std::memset(dst.data, 0, dst.nbytes());
    return;
  }
  CUDA_CHECK(cudaMemsetAsync(dst.data, 0, dst.nbytes(), b.stream()));
}

void fill(Backend& b, const TensorView& dst, float value) {
  if (dst.dtype == DType::f32)
    launch_fill_f32(static_cast<float*>(dst.data), dst.numel(), value, b.stream());
  else
    launch_fill_bf16(bf(dst), dst.numel(), value, b.stream());
}

void fill_uniform(Backend& b, const TensorView& dst, uint64_t seed, float bound) {
  if (dst.dtype == DType::f32)
    launch_fill_uniform_f32(static_cast<float*>(dst.data), dst.numel(), seed, bound, b.stream());
  else
    launch_fill_uniform_bf16(bf(dst), dst.numel(), seed, bound, b.stream());
}

void synchronize(Backend& b) {
  CUDA_CHECK(cudaStreamSynchronize(b.stream()));
}

// ---- ops

void embedding(Backend& b, const TensorView& ids, const TensorView& table, float scale,
               const TensorView& out) {
  launch_embedding(static_cast<const int32_t*>(ids.data), ids.numel(), bf(table), table.dim(0),
                   table.dim(1), scale, bf(out), b.stream());
}

void rms_norm(Backend& b, const TensorView& x, const TensorView& w, float eps, bool plus_one,
              const TensorView& out) {
  launch_rms_norm(bf(x), {}, f32(w), x.dim(0), x.dim(1), eps, plus_one, bf(out), nullptr,
                  b.stream());
}

namespace {
NormDelta norm_delta(const TensorView& delta) {
  NormDelta d;
  d.x = bf(delta);
  return d;
}
}  // namespace

void add_rms_norm(Backend& b, const TensorView& x, const TensorView& delta, const TensorView& w,
                  float eps, bool plus_one, const TensorView& out) {
  launch_rms_norm(bf(x), norm_delta(delta), f32(w), x.dim(0), x.dim(1), eps, plus_one, bf(out),
                  nullptr, b.stream());
}

void rope(Backend& b, const TensorView& x, const TensorView& positions,
          const TensorView& inv_freq) {
  const int64_t stride = x.dim(1) * x.dim(2);
  launch_rope(bf(x), stride, bf(x), stride, x.dim(0), x.dim(1), x.dim(2), nullptr, 0.0f, false,
              static_cast<const int32_t*>(positions.data), f32(inv_freq), b.stream());
}

void rms_norm_rope(Backend& b, const TensorView& x, const TensorView& w, float eps, bool plus_one,
                   const TensorView& positions, const TensorView& inv_freq, const TensorView& out) {
  launch_rope(bf(x), x.strides[0], bf(out), out.strides[0], x.dim(0), x.dim(1), x.dim(2),
              w.empty() ? nullptr : f32(w), eps, plus_one,
              static_cast<const int32_t*>(positions.data), f32(inv_freq), b.stream());
}

void attention(Backend& b, const TensorView& q, const TensorView& k_cache,
               const TensorView& v_cache, int64_t first_slot, const ops::AttentionParams& p,
               const TensorView& out, float* amax) {
  CHECK(attention_supports(q.dim(2)),
        "CUDA attention supports head_dim 32, 64, 128 and 256, not {}", q.dim(2));
  for (const TensorView* t : {&q, &k_cache, &v_cache, &out})
    CHECK((reinterpret_cast<uintptr_t>(t->data) & 15) == 0,
          "CUDA attention needs 16-byte aligned q/k/v/out");
  AttentionArgs a;
  a.q = bf(q);
  a.k = bf(k_cache);
  a.v = bf(v_cache);
  a.out = bf(out);
  a.t = q.dim(0);
  a.hq = q.dim(1);
  a.d = q.dim(2);
  a.hkv = k_cache.dim(1);
  a.c = k_cache.dim(0);
  a.first = first_slot;
  a.scale = p.scale;
  a.softcap = p.softcap;
  a.window = p.window;
  a.amax = amax;
  if (b.caps().attention_wgmma && attention_wgmma_supports(a))
    launch_attention_wgmma(a, b.stream());
  else
    launch_attention(a, b.stream());
}

void store_kv(Backend& b, const TensorView& k, const TensorView& v, const TensorView& slot_mapping,
              const TensorView& k_pool, const TensorView& v_pool, const ops::KvScales& scales) {
  const int64_t row = k.dim(1) * k.dim(2);
  if (!scales.empty()) {
    launch_store_kv_fp8(bf(k), k.strides[0], bf(v), v.strides[0],
                        static_cast<const int32_t*>(slot_mapping.data), k.dim(0), k.dim(1),
                        k.dim(2), static_cast<uint8_t*>(k_pool.data),
                        static_cast<uint8_t*>(v_pool.data), scales.k.ptr<float>(),
                        scales.v.ptr<float>(), k_pool.dim(0) * k_pool.dim(1), b.stream());
    return;
  }
  for (const TensorView* t : {&k, &v, &k_pool, &v_pool})
    CHECK((reinterpret_cast<uintptr_t>(t->data) & 15) == 0 && t->strides[0] % 8 == 0,
          "CUDA store_kv needs 16-byte aligned rows");
  CHECK(row % 8 == 0, "CUDA store_kv needs Hkv * D a multiple of 8, got {}", row);
  launch_store_kv(bf(k), k.strides[0], bf(v), v.strides[0],
                  static_cast<const int32_t*>(slot_mapping.data), k.dim(0), row, bf(k_pool),
                  bf(v_pool), k_pool.dim(0) * k_pool.dim(1), b.stream());
}

bool rope_store_kv_supported(int64_t d, std::initializer_list<const TensorView*> operands) {
  if (!rope_store_kv_supported(d)) return false;
  for (const TensorView* t : operands)
    if ((reinterpret_cast<uintptr_t>(t->data) & 15) != 0 || t->strides[0] % 8 != 0) return false;
  return true;
}

void rope_store_kv(Backend& b, const TensorView& q, const TensorView& k, const TensorView& v,
                   const ops::QkRope& qk, const TensorView& slot_mapping, const TensorView& k_pool,
                   const TensorView& v_pool, const ops::KvScales& scales, const TensorView& q_out) {
  for (const TensorView* t : {&k_pool, &v_pool})
    CHECK((reinterpret_cast<uintptr_t>(t->data) & 15) == 0,
          "CUDA rope_store_kv needs 16-byte "
          "aligned pools");
  RopeStoreArgs a;
  a.q = bf(q);
  a.k = bf(k);
  a.v = bf(v);
  a.q_stride = q.strides[0];
  a.k_stride = k.strides[0];
  a.v_stride = v.strides[0];
  a.q_out = bf(q_out);
  a.q_out_stride = q_out.strides[0];
  a.t = q.dim(0);
  a.hq = q.dim(1);
  a.hkv = k.dim(1);
  a.d = q.dim(2);
  a.q_norm = qk.q_norm.empty() ? nullptr : f32(qk.q_norm);
  a.k_norm = qk.k_norm.empty() ? nullptr : f32(qk.k_norm);
  a.eps = qk.eps;
  a.plus_one = qk.plus_one;
  a.positions = static_cast<const int32_t*>(qk.positions.data);
  a.inv_freq = f32(qk.inv_freq);
  a.slot_mapping = static_cast<const int32_t*>(slot_mapping.data);
  a.slots = k_pool.dim(0) * k_pool.dim(1);
  a.k_pool = k_pool.data;
  a.v_pool = v_pool.data;
  a.k_scale = scales.empty() ? nullptr : scales.k.ptr<float>();
  a.v_scale = scales.empty() ? nullptr : scales.v.ptr<float>();
  launch_rope_store_kv(a, b.stream());
}

size_t paged_attention_scratch_bytes(int64_t t, int64_t heads, int64_t head_dim,
                                     int64_t max_context_len) {
  // paged_decode_slots >= paged_decode_max_splits: room for a shared prefix's chunks.
  const int64_t partials = t * heads * paged_decode_slots(max_context_len);
  return size_t(partials * (head_dim + 2)) * 4 + 512;  // two allocations' alignment
}

void paged_attention(Backend& b, const TensorView& q, const TensorView& k_pool,
                     const TensorView& v_pool, const ops::PagedBatch& batch,
                     const ops::AttentionParams& p, const TensorView& out, float* amax,
                     const ops::KvScales& scales, float* lse,
                     const ops::QuantizedActivation* out_q) {
  const int64_t t = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k_pool.dim(2);
  CHECK(attention_supports(d), "CUDA attention supports head_dim 32, 64, 128 and 256, not {}", d);
  for (const TensorView* x : {&q, &k_pool, &v_pool, &out})
    CHECK((reinterpret_cast<uintptr_t>(x->data) & 15) == 0,
          "CUDA paged attention needs 16-byte aligned q/k/v/out");
  AttentionArgs a;
  a.q = bf(q);
  a.k = bf(k_pool);
  a.v = bf(v_pool);
  a.out = bf(out);
  a.t = batch.max_query_len;
  a.hq = hq;
  a.d = d;
  a.hkv = hkv;
  a.c = 0;
  a.first = 0;
  a.scale = p.scale;
  a.softcap = p.softcap;
  a.window = p.window;
  a.amax = amax;
  a.lse = lse;
  a.cu_q = static_cast<const int32_t*>(batch.cu_q.data);
  a.context_lens = static_cast<const int32_t*>(batch.context_lens.data);
  a.block_tables = static_cast<const int32_t*>(batch.block_tables.data);
  a.table_stride = batch.block_tables.strides[0];
  a.num_seqs = batch.num_seqs;
  a.decode_sms = b.caps().decode_sms;
  a.block_size = int(k_pool.dim(1));
  CHECK(a.block_size == kPagedBlockSize,
        "paged_attention: the CUDA kernels take {}-slot blocks, got {}", kPagedBlockSize,
        a.block_size);
  if (!scales.empty()) {  // codes rows are D bytes: 8-byte chunks stay aligned
    a.k = a.v = nullptr;
    a.k8 = static_cast<const uint8_t*>(k_pool.data);
    a.v8 = static_cast<const uint8_t*>(v_pool.data);
    a.k_scale = scales.k.ptr<const float>();
    a.v_scale = scales.v.ptr<const float>();
  }
  // Rows after the last sequence's (a captured batch's padding) are zeros, in out and in its
  // quantization: written by the quantizing kernel when there is one.
  const int32_t* rows_end = a.cu_q + batch.num_seqs;
  if (out_q == nullptr) launch_zero_padding_rows(a.out, t, hq * d, rows_end, b.stream());
  b.last_decode_grid = {};
  // Batch-invariant mode: decode steps on the prefill kernel too (ops/exactness.h).
  if (batch.max_query_len == 1 && paged_decode_supports(d, hq / hkv) && !b.batch_invariant()) {
    const int splits = paged_decode_max_splits(batch.max_context_len);
    // Shared prefixes on layers without a window (a window would cut into the prefix).
    const bool shared = batch.has_prefixes() && p.window <= 0;
    const int slots = shared ? paged_decode_slots(batch.max_context_len) : splits;
    const size_t mark = b.arena().mark();
    float* part_o = nullptr;
    float* part_ml = nullptr;
    if (slots > 1) {
      part_o = static_cast<float*>(b.arena().alloc({t * hq * slots * d}, DType::f32).data);
      part_ml = static_cast<float*>(b.arena().alloc({t * hq * slots * 2}, DType::f32).data);
    }
    if (shared) {
      a.prefix_cu_members = static_cast<const int32_t*>(batch.prefix_cu_members.data);
      a.prefix_members = static_cast<const int32_t*>(batch.prefix_members.data);
      a.prefix_lens = static_cast<const int32_t*>(batch.prefix_lens.data);
      a.prefix_len_of_seq = static_cast<const int32_t*>(batch.prefix_len_of_seq.data);
      a.prefix_groups = batch.prefix_lens.numel();
      b.last_decode_grid =
          launch_paged_decode_shared(a, splits, slots, b.caps().shared_prefix_mma,
                                     b.caps().decode_mma, part_o, part_ml, b.stream());
    } else {
      b.last_decode_grid =
          launch_paged_decode(a, splits, b.caps().decode_mma, part_o, part_ml, b.stream());
    }
    b.arena().rewind(mark);
  } else if (b.caps().attention_wgmma && attention_wgmma_supports(a)) {
    launch_attention_wgmma(a, b.stream());
  } else {  // also every FP8-pool prefill: the wgmma kernel reads bf16 tiles only
    launch_attention(a, b.stream());
  }
  if (out_q != nullptr)
    launch_quantize_rows(out.data, false, t, hq * d, quant_out(*out_q), b.stream(), rows_end,
                         a.out);
}

void gated(Backend& b, const TensorView& gate, const TensorView& up, int act,
           const TensorView& out) {
  launch_gated(bf(gate), bf(up), gate.dim(0), gate.numel() / std::max<int64_t>(gate.dim(0), 1), act,
               bf(out), nullptr, b.stream());
}

void add(Backend& b, const TensorView& a, const TensorView& c, float alpha, const TensorView& out) {
  if (a.dtype == DType::f32) {
    launch_add_f32(static_cast<const float*>(a.data), static_cast<const float*>(c.data), alpha,
                   static_cast<float*>(out.data), a.numel(), b.stream());
    return;
  }
  launch_add(bf(a), bf(c), alpha, bf(out), a.numel(), b.stream());
}

void softcap(Backend& b, const TensorView& x, float cap) {
  if (x.dtype == DType::f32)
    launch_softcap_f32(static_cast<float*>(x.data), x.numel(), cap, b.stream());
  else
    launch_softcap_bf16(bf(x), x.numel(), cap, b.stream());
}

// ---- FP8 activations

size_t quantized_bytes(ActScaling act, int64_t rows, int64_t cols) {
  const int64_t padded = act == ActScaling::group ? round_up(rows, 4) : rows;
  const int64_t scales = act == ActScaling::token   ? rows
                         : act == ActScaling::group ? ((cols + 127) / 128) * padded
                                                    : 1;
  return size_t(round_up(padded * cols, 256) + round_up(scales * 4, 256));
}

ops::QuantizedActivation alloc_quantized(Backend& b, ActScaling act, int64_t rows, int64_t cols) {
  CHECK(act != ActScaling::none, "alloc_quantized: no activation scaling");
  ops::QuantizedActivation q;
  q.act = act;
  q.rows = rows;
  q.cols = cols;
  q.padded_rows = act == ActScaling::group ? round_up(rows, 4) : rows;
  q.codes = b.arena().alloc({q.padded_rows, cols}, DType::f8e4m3);
  if (act == ActScaling::token)
    q.scales = b.arena().alloc({rows}, DType::f32);
  else if (act == ActScaling::group)
    q.scales = b.arena().alloc({(cols + 127) / 128, q.padded_rows}, DType::f32);
  else
    q.scales = b.arena().alloc({1}, DType::f32);
  return q;
}

void quantize(Backend& b, const TensorView& x, const ops::QuantizedActivation& q,
              float static_scale) {
  const bool x_f32 = x.dtype == DType::f32;
  uint8_t* codes = static_cast<uint8_t*>(q.codes.data);
  float* scales = static_cast<float*>(q.scales.data);
  switch (q.act) {
    case ActScaling::token:
    case ActScaling::group:
      launch_quantize_rows(x.data, x_f32, q.rows, q.cols, quant_out(q), b.stream());
      return;
    case ActScaling::tensor: {
      const size_t mark = b.arena().mark();
      float* amax = zeroed_amax(b);
      launch_amax(x.data, x_f32, x.numel(), amax, b.stream());
      launch_quantize_tensor(x.data, x_f32, x.numel(), amax, 0.0f, codes, scales, b.stream());
      b.arena().rewind(mark);
      return;
    }
    case ActScaling::static_tensor:
      launch_quantize_tensor(x.data, x_f32, x.numel(), nullptr, static_scale, codes, scales,
                             b.stream());
      return;
    case ActScaling::none:
      break;
  }
  RAISE("quantize: no activation scaling");
}

namespace {
// The quantization target of q, with the values also written to `plain` when it is set.
QuantOut quant_out(const ops::QuantizedActivation& q, const TensorView& plain) {
  QuantOut o = quant_out(q);
  o.plain = plain.empty() ? nullptr : bf(plain);
  return o;
}

// Where a composed op (batch-invariant mode, per-tensor scaling) stages its bf16 output before
// quantizing it: `plain` when the caller wants it, else arena scratch (the caller's scope).
TensorView staging(Backend& b, const Shape& shape, const TensorView& plain) {
  return plain.empty() ? b.arena().alloc(shape, DType::bf16) : plain;
}

// quantize(rms_norm(x)), after x += delta when delta is set (rms_norm's bf16 output in plain
// too when set). Per tensor: the scale needs the amax of the whole output first, so the norm
// writes bf16 and its amax in one pass, and the quantizer reads that back.
void norm_quant(Backend& b, const TensorView& x, const NormDelta& delta, const TensorView& w,
                float eps, bool plus_one, const ops::QuantizedActivation& q,
                const TensorView& plain) {
  const bool rows = q.act == ActScaling::token || q.act == ActScaling::group;
  if (rows && !b.batch_invariant()) {
    launch_rms_norm_quant(bf(x), delta, f32(w), x.dim(0), x.dim(1), eps, plus_one,
                          quant_out(q, plain), b.stream());
    return;
  }
  CHECK(rows || q.act == ActScaling::tensor, "rms_norm_quant: {} scaling is not dynamic",
        act_scaling_name(q.act));
  const size_t mark = b.arena().mark();
  const TensorView h = staging(b, x.shape, plain);
  if (rows) {
    // Batch-invariant mode: the fused kernel quantizes the fp32 normed values, the training
    // forward's quantize(rms_norm(x)) their bf16 rounding.
    launch_rms_norm(bf(x), delta, f32(w), x.dim(0), x.dim(1), eps, plus_one, bf(h), nullptr,
                    b.stream());
    launch_quantize_rows(h.data, false, h.dim(0), h.dim(1), quant_out(q), b.stream());
  } else {
    float* amax = zeroed_amax(b);
    launch_rms_norm(bf(x), delta, f32(w), x.dim(0), x.dim(1), eps, plus_one, bf(h), amax,
                    b.stream());
    launch_quantize_tensor(h.data, false, h.numel(), amax, 0.0f,
                           static_cast<uint8_t*>(q.codes.data), static_cast<float*>(q.scales.data),
                           b.stream());
  }
  b.arena().rewind(mark);
}
}  // namespace

void rms_norm_quant(Backend& b, const TensorView& x, const TensorView& w, float eps, bool plus_one,
                    const ops::QuantizedActivation& q, const TensorView& plain) {
  norm_quant(b, x, {}, w, eps, plus_one, q, plain);
}

void add_rms_norm_quant(Backend& b, const TensorView& x, const TensorView& delta,
                        const TensorView& w, float eps, bool plus_one,
                        const ops::QuantizedActivation& q, const TensorView& plain) {
  norm_quant(b, x, norm_delta(delta), w, eps, plus_one, q, plain);
}

void gated_quant(Backend& b, const TensorView& gate, const TensorView& up, int act,
                 const ops::QuantizedActivation& q, const TensorView& plain) {
  const int64_t rows = gate.dim(0), cols = gate.numel() / std::max<int64_t>(rows, 1);
  const bool by_row = q.act == ActScaling::token || q.act == ActScaling::group;
  if (by_row && !b.batch_invariant()) {
    launch_gated_quant(bf(gate), bf(up), rows, cols, act, quant_out(q, plain), b.stream());
    return;
  }
  CHECK(by_row || q.act == ActScaling::tensor, "gated_quant: {} scaling is not dynamic",
        act_scaling_name(q.act));
  const size_t mark = b.arena().mark();
  const TensorView h = staging(b, gate.shape, plain);
  if (by_row) {  // batch-invariant mode, as norm_quant: the products rounded to bf16 first
    launch_gated(bf(gate), bf(up), rows, cols, act, bf(h), nullptr, b.stream());
    launch_quantize_rows(h.data, false, rows, cols, quant_out(q), b.stream());
  } else {
    float* amax = zeroed_amax(b);
    launch_gated(bf(gate), bf(up), rows, cols, act, bf(h), amax, b.stream());
    launch_quantize_tensor(h.data, false, h.numel(), amax, 0.0f,
                           static_cast<uint8_t*>(q.codes.data), static_cast<float*>(q.scales.data),
                           b.stream());
  }
  b.arena().rewind(mark);
}

void dequantize(Backend& b, const ops::QuantizedActivation& q, const TensorView& out) {
  const int mode = q.act == ActScaling::token ? 1 : q.act == ActScaling::group ? 2 : 0;
  launch_dequantize_act(static_cast<const uint8_t*>(q.codes.data), f32(q.scales), mode, q.rows,
                        q.cols, q.padded_rows, bf(out), b.stream());
}

uint64_t check_fp8_quotient(Backend& b, uint32_t b_first, uint32_t b_count, uint32_t b_step,
                            uint32_t (&bad)[2]) {
  const size_t mark = b.arena().mark();
  TensorView buf = b.arena().alloc({4}, DType::f32);  // [count (u64), bad a, bad b]
  CUDA_CHECK(cudaMemsetAsync(buf.data, 0, 16, b.stream()));
  auto* count = static_cast<unsigned long long*>(buf.data);
  auto* pair = reinterpret_cast<uint32_t*>(count + 1);
  launch_fp8_quotient_check(b_first, b_count, b_step, count, pair, b.stream());
  uint32_t host[4] = {};
  CUDA_CHECK(cudaMemcpyAsync(host, buf.data, sizeof(host), cudaMemcpyDeviceToHost, b.stream()));
  CUDA_CHECK(cudaStreamSynchronize(b.stream()));
  b.arena().rewind(mark);
  bad[0] = host[2];
  bad[1] = host[3];
  return uint64_t(host[0]) | uint64_t(host[1]) << 32;
}

// ---- profiling

bool profiling(Backend& b) {
  return b.profiling();
}

ProfileRange::ProfileRange(Backend& b, const char* name)
    : b_(b.profiling() ? &b : nullptr), name_(b_ ? name : "") {
  if (b_) b_->range_begin();
}
ProfileRange::ProfileRange(Backend& b, std::string name)
    : b_(b.profiling() ? &b : nullptr), name_(std::move(name)) {
  if (b_) b_->range_begin();
}
ProfileRange::~ProfileRange() {
  if (b_) b_->range_end(std::move(name_));
}

}  // namespace fp8rl::cuda
