// Shape checks and backend dispatch for the op interface. Every op validates its operands
// here once (shapes, dtypes, devices), so backends can assume well-formed views.
#include "ops/ops.h"

#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "ops/backward.h"
#include "ops/columns.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/dispatch.h"
#include "quant/fp8.h"
#if FP8RL_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace fp8rl {
size_t LinearWeight::nbytes() const {
  return weight.nbytes() + (scales.empty() ? 0 : scales.nbytes()) +
         (bias.empty() ? 0 : bias.nbytes());
}

LinearWeight ExpertLinear::expert(int64_t e) const {
  CHECK(e >= 0 && e < num_experts(), "expert {} is outside [0, {})", e, num_experts());
  const int64_t n = out_features(), k = in_features();
  LinearWeight w;
  w.weight =
      TensorView(static_cast<char*>(weight.data) + size_t(e * n * k) * dtype_size(weight.dtype),
                 weight.dtype, {n, k}, weight.device);
  w.scheme = scheme;
  w.act = act;
  if (is_fp8()) {
    const Shape s = weight_scale_shape(scheme, n, k);
    w.scales = TensorView(scales.ptr<float>() + e * s.numel(), DType::f32, s, scales.device);
    w.gemm_scales = w.scales;
  }
  return w;
}

size_t ExpertLinear::nbytes() const {
  return weight.nbytes() + (scales.empty() ? 0 : scales.nbytes());
}

bool fp8_gemm_native(const LinearWeight& w, ActScaling act) {
  if (!w.is_fp8() || w.in_features() % 16 != 0 || w.out_features() % 16 != 0) return false;
  const bool per_tensor_act = act == ActScaling::tensor || act == ActScaling::static_tensor;
  switch (w.scheme) {
    case Fp8Scheme::tensor:
    case Fp8Scheme::row:
      return per_tensor_act || act == ActScaling::token;
    case Fp8Scheme::block:
      return act == ActScaling::group;
    case Fp8Scheme::off:
      break;
  }
  return false;
}
}  // namespace fp8rl

namespace fp8rl::ops {

namespace {

void check_ctx(const Context& ctx) {
  CHECK(!ctx.dry_run || ctx.scratch != nullptr, "a dry run needs a measuring scratch arena");
  // A dry run may plan for a CUDA device that is not there (it computes nothing).
  CHECK(ctx.device == Device::cpu ? ctx.scratch != nullptr : ctx.cuda != nullptr || ctx.dry_run,
        "Context for {} has no {}", device_name(ctx.device),
        ctx.device == Device::cpu ? "scratch arena" : "CUDA backend (use CudaDevice::context())");
  CHECK(!ctx.bf16_activations || ctx.device == Device::cpu,
        "bf16_activations is the CPU's emulation of CUDA; CUDA activations are always bf16");
}

// Where the CPU ops round (ops/cpu/cpu_ops.h).
cpu::Rounding rounding(const Context& ctx) {
  return ctx.bf16_activations ? cpu::Rounding::bf16 : cpu::Rounding::none;
}

// A contiguous tensor on the context's device of rank `rank` and dtype `want`.
void check_tensor(const Context& ctx, const TensorView& t, DType want, int rank, const char* what) {
  CHECK(t.dtype == want && t.rank() == rank && t.is_contiguous() && t.device == ctx.device,
        "{}: expected a contiguous {} tensor of rank {} on {}, got {} {} on {}", what,
        dtype_name(want), rank, device_name(ctx.device), dtype_name(t.dtype), t.shape.str(),
        device_name(t.device));
}

// An activation: contiguous, on the context's device, in its activation dtype.
void check_act(const Context& ctx, const TensorView& t, int rank, const char* what) {
  check_tensor(ctx, t, ctx.activation_dtype(), rank, what);
}

// The output of a linear or softcap: an activation, or f32 for Output::f32.
void check_output(const Context& ctx, const TensorView& t, Output kind, int rank,
                  const char* what) {
  check_tensor(ctx, t, kind == Output::f32 ? DType::f32 : ctx.activation_dtype(), rank, what);
}

// A weight-like operand (norm weight, table, frequencies) on the context's device; on CUDA
// it must have the dtype the kernels read.
void check_param(const Context& ctx, const TensorView& t, DType cuda_dtype, const char* what) {
  CHECK(t.device == ctx.device && t.is_contiguous(), "{}: expected a contiguous tensor on {}", what,
        device_name(ctx.device));
  if (ctx.device == Device::cuda)
    CHECK(t.dtype == cuda_dtype, "{}: CUDA needs {}, got {} (Model::to_device converts)", what,
          dtype_name(cuda_dtype), dtype_name(t.dtype));
}

void check_i32(const Context& ctx, const TensorView& t, int64_t n, const char* what) {
  CHECK(t.dtype == DType::i32 && t.rank() == 1 && t.dim(0) == n && t.is_contiguous() &&
            t.device == ctx.device,
        "{}: expected {} i32 on {}, got {} {} on {}", what, n, device_name(ctx.device),
        dtype_name(t.dtype), t.shape.str(), device_name(t.device));
}

Arena& scratch_of(Context& ctx) {
  CHECK(ctx.scratch != nullptr, "Context has no scratch arena");
  return *ctx.scratch;
}

// Scratch of the fused quantizers: the staged [R, C] row values (f32 on the CPU, bf16 plus the
// amax on CUDA) at most.
size_t quantize_op_scratch_bytes(int64_t rows, int64_t cols) {
  return size_t(rows * cols) * 4 + 512;
}

void check_quantized(const Context& ctx, const QuantizedActivation& q, const char* what) {
  CHECK(q.act != ActScaling::none && q.codes.dtype == DType::f8e4m3 &&
            q.codes.device == ctx.device && q.scales.dtype == DType::f32 &&
            q.padded_rows >= q.rows && q.codes.numel() == q.padded_rows * q.cols,
        "{}: malformed quantized activation (use alloc_quantized)", what);
}

void check_linear(const Context& ctx, int64_t m, int64_t k, const LinearWeight& w,
                  const TensorView& out, Output kind) {
  check_output(ctx, out, kind, 2, "linear output");
  CHECK(w.weight.rank() == 2 && k == w.in_features() && out.dim(0) == m &&
            out.dim(1) == w.out_features(),
        "linear: x [{}, {}] weight {} out {}", m, k, w.weight.shape.str(), out.shape.str());
  CHECK(w.is_fp8() == (w.weight.dtype == DType::f8e4m3),
        "linear: scheme {} does not match weight dtype {}", scheme_name(w.scheme),
        dtype_name(w.weight.dtype));
  CHECK(w.weight.device == ctx.device, "linear: weight on {}, context on {} (Model::to_device)",
        device_name(w.weight.device), device_name(ctx.device));
  if (ctx.device == Device::cuda && w.is_fp8())
    CHECK(!w.gemm_scales.empty() && (w.bias.empty() || w.bias.dtype == DType::f32),
          "linear: CUDA weight not prepared (ops::prepare_linear / Model::to_device)");
}

}  // namespace

void embedding(Context& ctx, const TensorView& ids, const TensorView& table, float scale,
               const TensorView& out) {
  check_ctx(ctx);
  check_act(ctx, out, 2, "embedding output");
  check_i32(ctx, ids, out.dim(0), "embedding ids");
  check_param(ctx, table, DType::bf16, "embedding table");
  CHECK(table.rank() == 2 && out.dim(1) == table.dim(1), "embedding: table {} out {}",
        table.shape.str(), out.shape.str());
  if (ctx.device == Device::cpu &&
      !ctx.dry_run)  // device ids are checked on the host before their upload
    for (int64_t i = 0; i < ids.numel(); ++i)
      CHECK(ids.ptr<const int32_t>()[i] >= 0 && ids.ptr<const int32_t>()[i] < table.dim(0),
            "token id {} is outside the vocabulary [0, {})", ids.ptr<const int32_t>()[i],
            table.dim(0));
  FP8RL_DISPATCH(ctx, "embedding",
                 cpu::embedding({ids.ptr<const int32_t>(), size_t(ids.numel())}, table, scale, out,
                                rounding(ctx)),
                 cuda::embedding(*ctx.cuda, ids, table, scale, out));
}

void embedding(Context& ctx, std::span<const int32_t> ids, const TensorView& table, float scale,
               const TensorView& out) {
  check_ctx(ctx);
  for (int32_t id : ids)
    CHECK(id >= 0 && id < table.dim(0), "token id {} is outside the vocabulary [0, {})", id,
          table.dim(0));
  TensorView host(const_cast<int32_t*>(ids.data()), DType::i32, {int64_t(ids.size())});
  if (ctx.device == Device::cpu) return embedding(ctx, host, table, scale, out);
  ScratchScope scope(ctx);
  TensorView dev = scratch_alloc(ctx, host.shape, DType::i32);
  copy(ctx, host, dev);
  embedding(ctx, dev, table, scale, out);
}

void rms_norm(Context& ctx, const TensorView& x, const TensorView& w, float eps, bool plus_one,
              const TensorView& out) {
  check_ctx(ctx);
  check_act(ctx, x, 2, "rms_norm input");
  check_act(ctx, out, 2, "rms_norm output");
  check_param(ctx, w, DType::f32, "rms_norm weight");
  CHECK(w.rank() == 1 && w.dim(0) == x.dim(1) && out.shape == x.shape, "rms_norm: x {} w {} out {}",
        x.shape.str(), w.shape.str(), out.shape.str());
  FP8RL_DISPATCH(ctx, "rms_norm", cpu::rms_norm(x, w, eps, plus_one, out, rounding(ctx)),
                 cuda::rms_norm(*ctx.cuda, x, w, eps, plus_one, out));
}

void add_rms_norm(Context& ctx, const TensorView& x, const TensorView& delta, const TensorView& w,
                  float eps, bool plus_one, const TensorView& out) {
  check_ctx(ctx);
  check_act(ctx, x, 2, "add_rms_norm residual");
  check_act(ctx, delta, 2, "add_rms_norm delta");
  check_act(ctx, out, 2, "add_rms_norm output");
  check_param(ctx, w, DType::f32, "rms_norm weight");
  CHECK(w.rank() == 1 && w.dim(0) == x.dim(1) && delta.shape == x.shape && out.shape == x.shape &&
            (out.data != x.data || x.numel() == 0),
        "add_rms_norm: x {} delta {} w {} out {} (out must not be x)", x.shape.str(),
        delta.shape.str(), w.shape.str(), out.shape.str());
  FP8RL_DISPATCH(ctx, "add_rms_norm",
                 cpu::add_rms_norm(x, delta, w, eps, plus_one, out, rounding(ctx)),
                 cuda::add_rms_norm(*ctx.cuda, x, delta, w, eps, plus_one, out));
}

void rope(Context& ctx, const TensorView& x, const TensorView& positions,
          const TensorView& inv_freq) {
  check_ctx(ctx);
  check_act(ctx, x, 3, "rope input");
  check_i32(ctx, positions, x.dim(0), "rope positions");
  check_param(ctx, inv_freq, DType::f32, "rope inv_freq");
  CHECK(inv_freq.dtype == DType::f32 && inv_freq.rank() == 1 && x.dim(2) == 2 * inv_freq.dim(0),
        "rope: x {} inv_freq {}", x.shape.str(), inv_freq.shape.str());
  FP8RL_DISPATCH(ctx, "rope",
                 cpu::rope(x, {positions.ptr<const int32_t>(), size_t(positions.numel())}, inv_freq,
                           rounding(ctx)),
                 cuda::rope(*ctx.cuda, x, positions, inv_freq));
}

void rope(Context& ctx, const TensorView& x, std::span<const int32_t> positions,
          const TensorView& inv_freq) {
  CHECK(ctx.device == Device::cpu, "rope with host positions runs on the CPU only");
  rope(ctx, x,
       TensorView(const_cast<int32_t*>(positions.data()), DType::i32, {int64_t(positions.size())}),
       inv_freq);
}

namespace {
// amax = max(amax, max |out|) for an optional f32 [1] on the CPU.
void reduce_amax(const TensorView& out, const TensorView& amax) {
  if (amax.empty()) return;
  float& a = *amax.ptr<float>();
  const float* o = out.ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) a = std::max(a, std::fabs(o[i]));
}

void cpu_attention(Arena& scratch, const TensorView& q, const TensorView& k_cache,
                   const TensorView& v_cache, int64_t first_slot, const AttentionParams& p,
                   const TensorView& out, const TensorView& amax, cpu::Rounding r) {
  cpu::attention(scratch, q, k_cache, v_cache, first_slot, p, out, r);
  reduce_amax(out, amax);
}

// [T, heads, D] whose heads and head values are contiguous; the token stride is free.
void check_heads(const Context& ctx, const TensorView& t, const char* what) {
  const DType want = ctx.activation_dtype();
  CHECK(t.dtype == want && t.rank() == 3 && t.device == ctx.device && t.strides[2] == 1 &&
            t.strides[1] == t.dim(2) && (t.dim(0) <= 1 || t.strides[0] >= t.dim(1) * t.dim(2)),
        "{}: expected a {} [T, heads, D] tensor on {} with contiguous heads, got {} {} strides "
        "[{}, {}, {}] on {}",
        what, dtype_name(want), device_name(ctx.device), dtype_name(t.dtype), t.shape.str(),
        t.strides[0], t.strides[1], t.strides[2], device_name(t.device));
}
}  // namespace

void rms_norm_rope(Context& ctx, const TensorView& x, const TensorView& w, float eps, bool plus_one,
                   const TensorView& positions, const TensorView& inv_freq, const TensorView& out) {
  check_ctx(ctx);
  check_heads(ctx, x, "rms_norm_rope input");
  check_heads(ctx, out, "rms_norm_rope output");
  CHECK(out.shape == x.shape, "rms_norm_rope: x {} out {}", x.shape.str(), out.shape.str());
  check_i32(ctx, positions, x.dim(0), "rms_norm_rope positions");
  check_param(ctx, inv_freq, DType::f32, "rope inv_freq");
  CHECK(inv_freq.dtype == DType::f32 && inv_freq.rank() == 1 && x.dim(2) == 2 * inv_freq.dim(0),
        "rms_norm_rope: x {} inv_freq {}", x.shape.str(), inv_freq.shape.str());
  if (!w.empty()) {
    check_param(ctx, w, DType::f32, "rms_norm_rope weight");
    CHECK(w.rank() == 1 && w.dim(0) == x.dim(2), "rms_norm_rope: x {} w {}", x.shape.str(),
          w.shape.str());
  }
  // In place, or no overlap at all: each head is read completely before it is written.
  const size_t es = dtype_size(x.dtype);
  const auto span = [&](const TensorView& t) {
    const char* b = static_cast<const char*>(t.data);
    const int64_t last = t.dim(0) == 0 ? 0 : (t.dim(0) - 1) * t.strides[0] + t.dim(1) * t.dim(2);
    return std::pair<const char*, const char*>(b, b + size_t(last) * es);
  };
  const auto [xb, xe] = span(x);
  const auto [ob, oe] = span(out);
  CHECK((x.data == out.data && x.strides[0] == out.strides[0]) || oe <= xb || xe <= ob,
        "rms_norm_rope: out overlaps x without being x");
  FP8RL_DISPATCH(ctx, "rms_norm_rope",
                 cpu::rms_norm_rope(x, w, eps, plus_one,
                                    {positions.ptr<const int32_t>(), size_t(positions.numel())},
                                    inv_freq, out, rounding(ctx)),
                 cuda::rms_norm_rope(*ctx.cuda, x, w, eps, plus_one, positions, inv_freq, out));
}

void attention(Context& ctx, const TensorView& q, const TensorView& k_cache,
               const TensorView& v_cache, int64_t first_slot, const AttentionParams& p,
               const TensorView& out, const TensorView& amax) {
  check_ctx(ctx);
  check_act(ctx, q, 3, "attention q");
  check_act(ctx, k_cache, 3, "attention k cache");
  check_act(ctx, v_cache, 3, "attention v cache");
  check_act(ctx, out, 3, "attention output");
  CHECK(k_cache.shape == v_cache.shape && q.dim(2) == k_cache.dim(2) &&
            q.dim(1) % k_cache.dim(1) == 0 && out.shape == q.shape,
        "attention: q {} k {} v {} out {}", q.shape.str(), k_cache.shape.str(), v_cache.shape.str(),
        out.shape.str());
  CHECK(first_slot >= 0 && first_slot + q.dim(0) <= k_cache.dim(0),
        "attention: queries at slots [{}, {}) exceed the cache capacity {}", first_slot,
        first_slot + q.dim(0), k_cache.dim(0));
  CHECK(
      amax.empty() || (amax.dtype == DType::f32 && amax.numel() == 1 && amax.device == ctx.device),
      "attention: amax must be one f32 on {}", device_name(ctx.device));
  dry_run_scratch(ctx, attention_scratch_bytes(ctx, q.dim(0), q.dim(1), k_cache.dim(0)));
  FP8RL_DISPATCH(
      ctx, "attention",
      cpu_attention(scratch_of(ctx), q, k_cache, v_cache, first_slot, p, out, amax, rounding(ctx)),
      cuda::attention(*ctx.cuda, q, k_cache, v_cache, first_slot, p, out,
                      amax.empty() ? nullptr : amax.ptr<float>()));
}

namespace {
// A paged cache [num_blocks, block_size, Hkv, D] in the activation dtype, contiguous.
void check_pool(const Context& ctx, const TensorView& pool, const char* what) {
  check_act(ctx, pool, 4, what);
}

// A K or V pool with its scales: f8e4m3 codes [num_blocks, block_size, Hkv, D] and f32 scales
// [num_blocks, block_size, Hkv] when `scale` is given, the activation dtype otherwise.
void check_pool(const Context& ctx, const TensorView& pool, const TensorView& scale,
                const char* what) {
  if (scale.empty()) return check_pool(ctx, pool, what);
  check_tensor(ctx, pool, DType::f8e4m3, 4, what);
  check_tensor(ctx, scale, DType::f32, 3, what);
  CHECK(scale.dim(0) == pool.dim(0) && scale.dim(1) == pool.dim(1) && scale.dim(2) == pool.dim(2),
        "{}: scales {} do not fit codes {}", what, scale.shape.str(), pool.shape.str());
}

// [rows, cols] i32 on the device whose rows are contiguous (the row stride is free).
void check_table(const Context& ctx, const TensorView& t, int64_t rows, const char* what) {
  CHECK(t.dtype == DType::i32 && t.rank() == 2 && t.dim(0) == rows && t.device == ctx.device &&
            t.strides[1] == 1 && (rows <= 1 || t.strides[0] >= t.dim(1)),
        "{}: expected [{}, blocks] i32 on {} with contiguous rows, got {} {} on {}", what, rows,
        device_name(ctx.device), dtype_name(t.dtype), t.shape.str(), device_name(t.device));
}
}  // namespace

void store_kv(Context& ctx, const TensorView& k, const TensorView& v,
              const TensorView& slot_mapping, const TensorView& k_pool, const TensorView& v_pool,
              const KvScales& scales) {
  check_ctx(ctx);
  check_heads(ctx, k, "store_kv k");
  check_heads(ctx, v, "store_kv v");
  CHECK(scales.k.empty() == scales.v.empty(), "store_kv: K and V scales must come together");
  check_pool(ctx, k_pool, scales.k, "store_kv k pool");
  check_pool(ctx, v_pool, scales.v, "store_kv v pool");
  check_i32(ctx, slot_mapping, k.dim(0), "store_kv slot mapping");
  CHECK(v.shape == k.shape && v_pool.shape == k_pool.shape && k_pool.dim(2) == k.dim(1) &&
            k_pool.dim(3) == k.dim(2),
        "store_kv: k {} v {} pools {} {}", k.shape.str(), v.shape.str(), k_pool.shape.str(),
        v_pool.shape.str());
  FP8RL_DISPATCH(ctx, "store_kv", cpu::store_kv(k, v, slot_mapping, k_pool, v_pool, scales),
                 cuda::store_kv(*ctx.cuda, k, v, slot_mapping, k_pool, v_pool, scales));
}

void rope_store_kv(Context& ctx, const TensorView& q, const TensorView& k, const TensorView& v,
                   const QkRope& qk, const TensorView& slot_mapping, const TensorView& k_pool,
                   const TensorView& v_pool, const KvScales& scales, const TensorView& q_out) {
  check_ctx(ctx);
  check_heads(ctx, q, "rope_store_kv q");
  check_heads(ctx, k, "rope_store_kv k");
  check_heads(ctx, v, "rope_store_kv v");
  check_heads(ctx, q_out, "rope_store_kv q output");
  CHECK(q_out.shape == q.shape && k.dim(0) == q.dim(0) && v.shape == k.shape &&
            k.dim(2) == q.dim(2) && q.dim(1) % k.dim(1) == 0,
        "rope_store_kv: q {} k {} v {} q_out {}", q.shape.str(), k.shape.str(), v.shape.str(),
        q_out.shape.str());
  // q_out is written while q, k and v are read: q itself (each head is read before it is
  // written) or disjoint from all three. Views with one token stride (column parts of one
  // matrix) are disjoint when their column ranges are.
  const size_t es = dtype_size(q.dtype);
  const auto overlap = [&](const TensorView& a, const TensorView& b) {
    const auto* pa = static_cast<const char*>(a.data);
    const auto* pb = static_cast<const char*>(b.data);
    const auto end = [&](const TensorView& t, const char* p) {
      const int64_t n = t.dim(0) == 0 ? 0 : (t.dim(0) - 1) * t.strides[0] + t.dim(1) * t.dim(2);
      return p + size_t(n) * es;
    };
    if (end(a, pa) <= pb || end(b, pb) <= pa) return false;
    const int64_t stride = a.strides[0] * int64_t(es), la = a.dim(1) * a.dim(2) * int64_t(es),
                  lb = b.dim(1) * b.dim(2) * int64_t(es);
    if (a.dim(0) <= 1 || b.dim(0) <= 1 || b.strides[0] != a.strides[0]) return true;
    const int64_t off = (((pb - pa) % stride) + stride) % stride;  // b's row start in a's row
    return off < la || off + lb > stride;
  };
  const bool in_place = q_out.data == q.data && q_out.strides[0] == q.strides[0];
  for (const TensorView* t : {&q, &k, &v})
    CHECK((in_place && t == &q) || !overlap(q_out, *t),
          "rope_store_kv: q_out overlaps an input without being q");
#if FP8RL_HAVE_CUDA
  const bool fused =
      ctx.device == Device::cuda && cuda::rope_store_kv_supported(q.dim(2), {&q, &k, &v, &q_out});
#else
  const bool fused = false;
#endif
  if (!fused) {  // the three ops (the CPU reference), k rotated into scratch
    ScratchScope scope(ctx);
    const TensorView kr = scratch_alloc(ctx, k.shape, k.dtype);
    rms_norm_rope(ctx, q, qk.q_norm, qk.eps, qk.plus_one, qk.positions, qk.inv_freq, q_out);
    rms_norm_rope(ctx, k, qk.k_norm, qk.eps, qk.plus_one, qk.positions, qk.inv_freq, kr);
    store_kv(ctx, kr, v, slot_mapping, k_pool, v_pool, scales);
    return;
  }
  check_i32(ctx, qk.positions, q.dim(0), "rope_store_kv positions");
  check_param(ctx, qk.inv_freq, DType::f32, "rope inv_freq");
  CHECK(qk.inv_freq.rank() == 1 && q.dim(2) == 2 * qk.inv_freq.dim(0),
        "rope_store_kv: q {} inv_freq {}", q.shape.str(), qk.inv_freq.shape.str());
  for (const TensorView* w : {&qk.q_norm, &qk.k_norm}) {
    if (w->empty()) continue;
    check_param(ctx, *w, DType::f32, "rope_store_kv norm weight");
    CHECK(w->rank() == 1 && w->dim(0) == q.dim(2), "rope_store_kv: q {} norm weight {}",
          q.shape.str(), w->shape.str());
  }
  CHECK(scales.k.empty() == scales.v.empty(), "rope_store_kv: K and V scales must come together");
  check_pool(ctx, k_pool, scales.k, "rope_store_kv k pool");
  check_pool(ctx, v_pool, scales.v, "rope_store_kv v pool");
  check_i32(ctx, slot_mapping, k.dim(0), "rope_store_kv slot mapping");
  CHECK(v_pool.shape == k_pool.shape && k_pool.dim(2) == k.dim(1) && k_pool.dim(3) == k.dim(2),
        "rope_store_kv: k {} pools {} {}", k.shape.str(), k_pool.shape.str(), v_pool.shape.str());
  FP8RL_DISPATCH(
      ctx, "rope_store_kv", RAISE("rope_store_kv: the fused kernel is CUDA's"),
      cuda::rope_store_kv(*ctx.cuda, q, k, v, qk, slot_mapping, k_pool, v_pool, scales, q_out));
}

void paged_attention(Context& ctx, const TensorView& q, const TensorView& k_pool,
                     const TensorView& v_pool, const PagedBatch& batch, const AttentionParams& p,
                     const TensorView& out, const TensorView& amax, const KvScales& scales,
                     const QuantizedActivation* out_q) {
  check_ctx(ctx);
  check_act(ctx, q, 3, "paged_attention q");
  check_act(ctx, out, 3, "paged_attention output");
  CHECK(scales.k.empty() == scales.v.empty(), "paged_attention: K and V scales must come together");
  check_pool(ctx, k_pool, scales.k, "paged_attention k pool");
  check_pool(ctx, v_pool, scales.v, "paged_attention v pool");
  CHECK(k_pool.shape == v_pool.shape && q.dim(2) == k_pool.dim(3) &&
            q.dim(1) % k_pool.dim(2) == 0 && out.shape == q.shape && k_pool.dim(1) > 0,
        "paged_attention: q {} pools {} {} out {}", q.shape.str(), k_pool.shape.str(),
        v_pool.shape.str(), out.shape.str());
  const int64_t seqs = batch.num_seqs;
  CHECK(seqs >= 0, "paged_attention: {} sequences", seqs);
  check_i32(ctx, batch.cu_q, seqs + 1, "paged_attention cu_q");
  check_i32(ctx, batch.context_lens, seqs, "paged_attention context_lens");
  check_table(ctx, batch.block_tables, seqs, "paged_attention block_tables");
  if (batch.has_prefixes()) {
    check_i32(ctx, batch.prefix_cu_members, seqs / 2 + 1, "paged_attention prefix_cu_members");
    check_i32(ctx, batch.prefix_members, seqs, "paged_attention prefix_members");
    check_i32(ctx, batch.prefix_lens, seqs / 2, "paged_attention prefix_lens");
    check_i32(ctx, batch.prefix_len_of_seq, seqs, "paged_attention prefix_len_of_seq");
  }
  CHECK(batch.max_query_len >= 0 && batch.max_context_len >= batch.max_query_len &&
            batch.max_context_len <= batch.block_tables.dim(1) * k_pool.dim(1),
        "paged_attention: bounds of {} queries and {} tokens per sequence for tables of {} "
        "blocks of {}",
        batch.max_query_len, batch.max_context_len, batch.block_tables.dim(1), k_pool.dim(1));
  CHECK(
      amax.empty() || (amax.dtype == DType::f32 && amax.numel() == 1 && amax.device == ctx.device),
      "paged_attention: amax must be one f32 on {}", device_name(ctx.device));
  if (out_q != nullptr) {
    check_quantized(ctx, *out_q, "paged_attention out_q");
    CHECK((out_q->act == ActScaling::token || out_q->act == ActScaling::group) &&
              out_q->rows == out.dim(0) && out_q->cols == out.dim(1) * out.dim(2),
          "paged_attention: out_q must be a token or group scaled [{}, {}] activation", out.dim(0),
          out.dim(1) * out.dim(2));
  }
  dry_run_scratch(
      ctx, paged_attention_scratch_bytes(ctx, q.dim(0), q.dim(1), q.dim(2), batch.max_context_len));
  FP8RL_DISPATCH(
      ctx, "paged_attention",
      {
        cpu::paged_attention(scratch_of(ctx), q, k_pool, v_pool, batch, p, out, rounding(ctx), {},
                             scales);
        reduce_amax(out, amax);
        if (out_q != nullptr) cpu::quantize(out.reshape({out_q->rows, out_q->cols}), *out_q, 0.0f);
      },
      cuda::paged_attention(*ctx.cuda, q, k_pool, v_pool, batch, p, out,
                            amax.empty() ? nullptr : amax.ptr<float>(), scales, nullptr, out_q));
}

namespace {
void check_gated(const Context& ctx, const TensorView& gate, const TensorView& up,
                 const TensorView& out, const char* what) {
  check_ctx(ctx);
  check_act(ctx, gate, gate.rank(), what);
  check_act(ctx, up, up.rank(), what);
  check_act(ctx, out, out.rank(), what);
  CHECK(gate.rank() >= 1 && gate.shape == up.shape && out.shape == gate.shape,
        "{}: gate {} up {} out {}", what, gate.shape.str(), up.shape.str(), out.shape.str());
}
}  // namespace

void silu_mul(Context& ctx, const TensorView& gate, const TensorView& up, const TensorView& out) {
  check_gated(ctx, gate, up, out, "silu_mul");
  FP8RL_DISPATCH(ctx, "silu_mul", cpu::silu_mul(gate, up, out, rounding(ctx)),
                 cuda::gated(*ctx.cuda, gate, up, 0, out));
}

void gelu_tanh_mul(Context& ctx, const TensorView& gate, const TensorView& up,
                   const TensorView& out) {
  check_gated(ctx, gate, up, out, "gelu_tanh_mul");
  FP8RL_DISPATCH(ctx, "gelu_tanh_mul", cpu::gelu_tanh_mul(gate, up, out, rounding(ctx)),
                 cuda::gated(*ctx.cuda, gate, up, 1, out));
}

void add(Context& ctx, const TensorView& a, const TensorView& b, const TensorView& out,
         float alpha) {
  check_ctx(ctx);
  // Activations, or f32 gradients (the backward's residual sums) on either device.
  const DType dt = a.dtype == DType::f32 ? DType::f32 : ctx.activation_dtype();
  check_tensor(ctx, a, dt, a.rank(), "add");
  check_tensor(ctx, b, dt, b.rank(), "add");
  check_tensor(ctx, out, dt, out.rank(), "add");
  CHECK(a.rank() >= 1 && a.shape == b.shape && out.shape == a.shape, "add: a {} b {} out {}",
        a.shape.str(), b.shape.str(), out.shape.str());
  FP8RL_DISPATCH(ctx, "add", cpu::add(a, b, alpha, out, rounding(ctx)),
                 cuda::add(*ctx.cuda, a, b, alpha, out));
}

void softcap(Context& ctx, const TensorView& x, float cap, Output kind) {
  check_ctx(ctx);
  check_output(ctx, x, kind, x.rank(), "softcap");
  CHECK(cap > 0 && x.rank() >= 1, "softcap: cap must be positive");
  FP8RL_DISPATCH(ctx, "softcap", cpu::softcap(x, cap, kind, rounding(ctx)),
                 cuda::softcap(*ctx.cuda, x, cap));
}

// ---- FP8 activations

QuantizedActivation alloc_quantized(Context& ctx, ActScaling act, int64_t rows, int64_t cols) {
  check_ctx(ctx);
  CHECK(act != ActScaling::none, "alloc_quantized: activation scaling none");
#if FP8RL_HAVE_CUDA
  if (ctx.device == Device::cuda && !ctx.dry_run)
    return cuda::alloc_quantized(*ctx.cuda, act, rows, cols);
#endif
  Arena& a = scratch_of(ctx);
  QuantizedActivation q;
  q.act = act;
  q.rows = q.padded_rows = rows;
  q.cols = cols;
  if (ctx.dry_run && ctx.device == Device::cuda) {
    // The backend's footprint (padded rows, its scale layout) as one measured block.
    a.alloc({int64_t(quantized_bytes(ctx, act, rows, cols))}, DType::f8e4m3);  // bytes
    q.padded_rows = (rows + 3) / 4 * 4;
    q.codes = TensorView(a.base(), DType::f8e4m3, {q.padded_rows, cols}, Device::cuda);
    q.scales = TensorView(a.base(), DType::f32, act_scale_shape(act, rows, cols), Device::cuda);
    return q;
  }
  q.codes = a.alloc({rows, cols}, DType::f8e4m3);
  q.scales = a.alloc(act_scale_shape(act, rows, cols), DType::f32);
  return q;
}

size_t quantized_bytes(const Context& ctx, ActScaling act, int64_t m, int64_t k) {
#if FP8RL_HAVE_CUDA
  if (ctx.device == Device::cuda) return cuda::quantized_bytes(act, m, k);
#endif
  (void)ctx;
  return size_t(m * k + 63) / 64 * 64 +
         size_t(act_scale_shape(act, m, k).numel() * 4 + 63) / 64 * 64;
}

void quantize(Context& ctx, const TensorView& x, const QuantizedActivation& q, float static_scale) {
  check_ctx(ctx);
  check_quantized(ctx, q, "quantize");
  CHECK(x.rank() == 2 && x.dim(0) == q.rows && x.dim(1) == q.cols && x.is_contiguous() &&
            x.device == ctx.device && (x.dtype == DType::f32 || x.dtype == ctx.activation_dtype()),
        "quantize: x {} {} does not fit [{}, {}]", dtype_name(x.dtype), x.shape.str(), q.rows,
        q.cols);
  CHECK(q.act != ActScaling::static_tensor || static_scale > 0,
        "quantize: a static scale must be positive, got {}", static_scale);
  FP8RL_DISPATCH(ctx, "quantize", cpu::quantize(x, q, static_scale),
                 cuda::quantize(*ctx.cuda, x, q, static_scale));
}

namespace {
// A fused quantizer's optional plain output: empty, or the shape of its input.
void check_plain(Context& ctx, const TensorView& plain, const Shape& shape, const char* what) {
  if (plain.empty()) return;
  check_act(ctx, plain, 2, what);
  CHECK(plain.shape == shape && plain.is_contiguous(), "{}: plain output {} for input {}", what,
        plain.shape.str(), shape.str());
}
}  // namespace

void rms_norm_quant(Context& ctx, const TensorView& x, const TensorView& w, float eps,
                    bool plus_one, const QuantizedActivation& q, const TensorView& plain) {
  check_ctx(ctx);
  check_act(ctx, x, 2, "rms_norm_quant input");
  check_param(ctx, w, DType::f32, "rms_norm weight");
  check_quantized(ctx, q, "rms_norm_quant");
  CHECK(q.act != ActScaling::static_tensor, "rms_norm_quant needs a dynamic scaling");
  CHECK(w.rank() == 1 && w.dim(0) == x.dim(1) && q.rows == x.dim(0) && q.cols == x.dim(1),
        "rms_norm_quant: x {} w {} q [{}, {}]", x.shape.str(), w.shape.str(), q.rows, q.cols);
  check_plain(ctx, plain, x.shape, "rms_norm_quant");
  dry_run_scratch(ctx, quantize_op_scratch_bytes(x.dim(0), x.dim(1)));
  FP8RL_DISPATCH(ctx, "rms_norm_quant",
                 cpu::rms_norm_quant(scratch_of(ctx), x, w, eps, plus_one, q, rounding(ctx), plain),
                 cuda::rms_norm_quant(*ctx.cuda, x, w, eps, plus_one, q, plain));
}

void add_rms_norm_quant(Context& ctx, const TensorView& x, const TensorView& delta,
                        const TensorView& w, float eps, bool plus_one, const QuantizedActivation& q,
                        const TensorView& plain) {
  check_ctx(ctx);
  check_act(ctx, x, 2, "add_rms_norm_quant residual");
  check_act(ctx, delta, 2, "add_rms_norm_quant delta");
  check_param(ctx, w, DType::f32, "rms_norm weight");
  check_quantized(ctx, q, "add_rms_norm_quant");
  CHECK(q.act != ActScaling::static_tensor, "add_rms_norm_quant needs a dynamic scaling");
  CHECK(w.rank() == 1 && w.dim(0) == x.dim(1) && delta.shape == x.shape && q.rows == x.dim(0) &&
            q.cols == x.dim(1),
        "add_rms_norm_quant: x {} delta {} w {} q [{}, {}]", x.shape.str(), delta.shape.str(),
        w.shape.str(), q.rows, q.cols);
  check_plain(ctx, plain, x.shape, "add_rms_norm_quant");
  dry_run_scratch(ctx, quantize_op_scratch_bytes(x.dim(0), x.dim(1)));
  FP8RL_DISPATCH(
      ctx, "add_rms_norm_quant",
      cpu::add_rms_norm_quant(scratch_of(ctx), x, delta, w, eps, plus_one, q, rounding(ctx), plain),
      cuda::add_rms_norm_quant(*ctx.cuda, x, delta, w, eps, plus_one, q, plain));
}

namespace {
void gated_quant(Context& ctx, const TensorView& gate, const TensorView& up,
                 const QuantizedActivation& q, const TensorView& plain, int act, const char* what) {
  check_ctx(ctx);
  check_act(ctx, gate, 2, what);
  check_act(ctx, up, 2, what);
  check_quantized(ctx, q, what);
  CHECK(q.act != ActScaling::static_tensor, "{} needs a dynamic scaling", what);
  CHECK(gate.shape == up.shape && q.rows == gate.dim(0) && q.cols == gate.dim(1),
        "{}: gate {} up {} q [{}, {}]", what, gate.shape.str(), up.shape.str(), q.rows, q.cols);
  check_plain(ctx, plain, gate.shape, what);
  dry_run_scratch(ctx, quantize_op_scratch_bytes(gate.dim(0),
                                                 gate.numel() / std::max<int64_t>(gate.dim(0), 1)));
  FP8RL_DISPATCH(ctx, what,
                 cpu::gated_quant(scratch_of(ctx), gate, up, act, q, rounding(ctx), plain),
                 cuda::gated_quant(*ctx.cuda, gate, up, act, q, plain));
}
}  // namespace

void silu_mul_quant(Context& ctx, const TensorView& gate, const TensorView& up,
                    const QuantizedActivation& q, const TensorView& plain) {
  gated_quant(ctx, gate, up, q, plain, 0, "silu_mul_quant");
}
void gelu_tanh_mul_quant(Context& ctx, const TensorView& gate, const TensorView& up,
                         const QuantizedActivation& q, const TensorView& plain) {
  gated_quant(ctx, gate, up, q, plain, 1, "gelu_tanh_mul_quant");
}

void dequantize(Context& ctx, const QuantizedActivation& q, const TensorView& out) {
  check_ctx(ctx);
  check_quantized(ctx, q, "dequantize");
  check_act(ctx, out, 2, "dequantize output");
  CHECK(out.dim(0) == q.rows && out.dim(1) == q.cols, "dequantize: out {} for [{}, {}]",
        out.shape.str(), q.rows, q.cols);
  FP8RL_DISPATCH(ctx, "dequantize", cpu::dequantize(q, out, rounding(ctx)),
                 cuda::dequantize(*ctx.cuda, q, out));
}

// ---- Linear layers

namespace {
// The token count is part of the name: a profile then tells a prefill's GEMMs from a decode
// step's (same weight, M = tokens of the step).
std::string linear_name(const LinearWeight& w, int64_t m) {
  return fmt::format("linear {}x{} {} m={}", w.out_features(), w.in_features(),
                     scheme_name(w.scheme), m);
}
}  // namespace

void linear(Context& ctx, const TensorView& x, const LinearWeight& w, const TensorView& out,
            Output kind) {
  check_ctx(ctx);
  check_act(ctx, x, 2, "linear input");
  check_linear(ctx, x.dim(0), x.dim(1), w, out, kind);
  dry_run_scratch(ctx, linear_scratch_bytes(ctx, w, x.dim(0)));
  FP8RL_DISPATCH(ctx, linear_name(w, x.dim(0)),
                 cpu::linear(scratch_of(ctx), x, w, out, kind, rounding(ctx)),
                 cuda::linear(*ctx.cuda, x, w, out));
}

void linear(Context& ctx, const TensorView& x, const LinearWeight& w, const TensorView& out,
            const TensorView& x_amax) {
  check_ctx(ctx);
  check_act(ctx, x, 2, "linear input");
  check_linear(ctx, x.dim(0), x.dim(1), w, out, Output::activation);
  dry_run_scratch(ctx, linear_scratch_bytes(ctx, w, x.dim(0)));
  CHECK(w.is_fp8() && w.act == ActScaling::tensor && x_amax.dtype == DType::f32 &&
            x_amax.numel() == 1 && x_amax.device == ctx.device,
        "linear with a known input amax: needs a tensor-scaled FP8 weight and one f32 on {}",
        device_name(ctx.device));
  FP8RL_DISPATCH(ctx, linear_name(w, x.dim(0)),
                 cpu::linear(scratch_of(ctx), x, w, out, Output::activation, rounding(ctx)),
                 cuda::linear(*ctx.cuda, x, w, out, x_amax.ptr<float>()));
}

namespace {
// The checks of a linear on a quantized input (and its scratch in a dry run).
void check_quantized_linear(Context& ctx, const QuantizedActivation& x, const LinearWeight& w,
                            const TensorView& out, Output kind) {
  check_ctx(ctx);
  check_quantized(ctx, x, "linear input");
  check_linear(ctx, x.rows, x.cols, w, out, kind);
  dry_run_scratch(ctx, linear_scratch_bytes(ctx, w, x.rows));
  CHECK(w.is_fp8() && x.act == w.act,
        "linear: input quantized with {} scaling for a weight whose activations use {}",
        act_scaling_name(x.act), act_scaling_name(w.act));
}
}  // namespace

void linear(Context& ctx, const QuantizedActivation& x, const LinearWeight& w,
            const TensorView& out, Output kind) {
  check_quantized_linear(ctx, x, w, out, kind);
  FP8RL_DISPATCH(ctx, linear_name(w, x.rows),
                 cpu::linear(scratch_of(ctx), x, w, out, kind, rounding(ctx)),
                 cuda::linear(*ctx.cuda, x, w, out));
}

void linear_accumulate(Context& ctx, const TensorView& x, const LinearWeight& w, float alpha,
                       const TensorView& out) {
  check_ctx(ctx);
  check_act(ctx, x, 2, "linear_accumulate input");
  check_linear(ctx, x.dim(0), x.dim(1), w, out, Output::activation);
  CHECK(!w.is_fp8() && w.bias.empty(),
        "linear_accumulate: needs an unquantized weight without bias, got {}",
        linear_name(w, x.dim(0)));
  if (ctx.device == Device::cpu)
    dry_run_scratch(ctx, linear_scratch_bytes(w, x.dim(0)) + size_t(out.numel()) * 4 + 64);
  FP8RL_DISPATCH(ctx, "linear_accumulate " + linear_name(w, x.dim(0)).substr(7),
                 cpu::linear_accumulate(scratch_of(ctx), x, w, alpha, out, rounding(ctx)),
                 cuda::linear_accumulate(*ctx.cuda, x, w, alpha, out));
}

namespace {

// The reference of an adapter's term: out += scale * (dropout(x) A^T) B^T.
void add_lora(Context& ctx, const TensorView& x_in, const LoraWeights& lora, const TensorView& out,
              const LoraDropout& dropout) {
  ScratchScope scope(ctx);
  TensorView x = x_in;
  if (dropout.p > 0) {
    x = scratch_alloc(ctx, x_in.shape, x_in.dtype);
    lora_dropout(ctx, x_in, dropout, x);
  }
  LinearWeight a, b;
  a.weight = lora.a;  // [r, K]
  b.weight = lora.b;  // [N, r]
  const TensorView xa = scratch_alloc(ctx, {x.dim(0), lora.rank()}, ctx.activation_dtype());
  linear(ctx, x, a, xa);
  linear_accumulate(ctx, xa, b, lora.scale, out);
}

}  // namespace

void linear_group(Context& ctx, const LinearInput& in, std::span<const Projection> group,
                  const LinearWeight* stacked) {
  check_ctx(ctx);
  const bool quantized = in.q.act != ActScaling::none;
  CHECK(!group.empty() && group.size() <= 4, "linear_group: {} projections (1 to 4)", group.size());
  CHECK(quantized || !in.x.empty(), "linear_group: no input");
  if (!in.x.empty()) check_act(ctx, in.x, 2, "linear_group input");
  if (quantized) check_quantized(ctx, in.q, "linear_group input");
  CHECK(!quantized || in.x.empty() || (in.x.dim(0) == in.q.rows && in.x.dim(1) == in.q.cols),
        "linear_group: x {} and its quantization [{}, {}] differ", in.x.shape.str(), in.q.rows,
        in.q.cols);
  const int64_t m = in.rows(), k = in.cols();
  int64_t n_total = 0, rank_total = 0;
  for (const Projection& p : group) {
    CHECK(p.weight != nullptr, "linear_group: a projection without weight");
    check_linear(ctx, m, k, *p.weight, p.out, Output::activation);
    CHECK(!quantized || (p.weight->is_fp8() && p.weight->act == in.q.act),
          "linear_group: input quantized with {} scaling for a weight whose activations use {}",
          act_scaling_name(in.q.act), act_scaling_name(p.weight->act));
    CHECK(!p.lora.active() || !in.x.empty(),
          "linear_group: an adapter reads the unquantized input, which is missing");
    if (p.lora.active())
      CHECK(p.lora.a.rank() == 2 && p.lora.a.dim(1) == k && p.lora.b.rank() == 2 &&
                p.lora.b.dim(0) == p.weight->out_features() && p.lora.b.dim(1) == p.lora.rank() &&
                p.lora.a.dtype == ctx.activation_dtype() &&
                p.lora.b.dtype == ctx.activation_dtype(),
            "linear_group: adapter A {} B {} for weight {}", p.lora.a.shape.str(),
            p.lora.b.shape.str(), p.weight->weight.shape.str());
    n_total += p.weight->out_features();
    rank_total += p.lora.rank();
  }
  CHECK(stacked == nullptr || (stacked->out_features() == n_total && stacked->in_features() == k),
        "linear_group: stacked weight {} for {} outputs of {} inputs",
        stacked == nullptr ? "" : stacked->weight.shape.str(), n_total, k);
  if (ctx.device == Device::cpu) {  // the reference: each linear, then its adapter
    for (const Projection& p : group) {
      if (quantized)
        linear(ctx, in.q, *p.weight, p.out);
      else
        linear(ctx, in.x, *p.weight, p.out);
      if (p.lora.active()) add_lora(ctx, in.x, p.lora, p.out, p.dropout);
    }
    return;
  }
  // The CUDA backend's scratch at most: the adapters' xa, a dropped-out input, a stacked
  // output, the partials of down products in a streaming launch, and the largest GEMM's own.
  const size_t count = group.size();
  size_t bytes = (3 * count + 2) * 256 + size_t(m * rank_total) * 4 + count * size_t(m * k) * 2 +
                 size_t(m * n_total) * 2;
#if FP8RL_HAVE_CUDA
  bytes += cuda::streaming_down_scratch_bytes(m, k, rank_total);
#endif
  size_t gemm = stacked != nullptr ? linear_scratch_bytes(ctx, *stacked, m) : 0;
  for (const Projection& p : group) gemm = std::max(gemm, linear_scratch_bytes(ctx, *p.weight, m));
  dry_run_scratch(ctx, bytes + gemm);
  FP8RL_DISPATCH(ctx, linear_name(*group[0].weight, m) + (group.size() > 1 ? " group" : ""),
                 (void)0, cuda::linear_group(*ctx.cuda, in, group, stacked));
}

size_t linear_scratch_bytes(const LinearWeight& w, int64_t m) {
  const int64_t k = w.in_features();
  const size_t pad = 256;
  // Per-thread blocks of 16 dequantized weight rows (ops/cpu/gemm.cpp), then the activation.
  size_t bytes = size_t(num_threads()) * 16 * size_t(k) * 4 + pad;
  if (w.act != ActScaling::none)
    bytes += size_t(m * k) * 5 + size_t(m * (k / 128 + 2)) * 4 + 3 * pad;
  return bytes;
}

size_t linear_scratch_bytes(const Context& ctx, const LinearWeight& w, int64_t m) {
#if FP8RL_HAVE_CUDA
  if (ctx.device == Device::cuda) return cuda::linear_scratch_bytes(w, m);
#endif
  (void)ctx;
  return linear_scratch_bytes(w, m);
}

size_t attention_scratch_bytes(int64_t /*t*/, int64_t /*heads*/, int64_t c) {
  return size_t(num_threads()) * size_t(c) * 4 + 256;
}

size_t attention_scratch_bytes(const Context& ctx, int64_t t, int64_t heads, int64_t c) {
  return ctx.device == Device::cuda ? 0 : attention_scratch_bytes(t, heads, c);
}

size_t paged_attention_scratch_bytes(const Context& ctx, int64_t t, int64_t heads, int64_t head_dim,
                                     int64_t max_context_len) {
#if FP8RL_HAVE_CUDA
  if (ctx.device == Device::cuda)
    return cuda::paged_attention_scratch_bytes(t, heads, head_dim, max_context_len);
#endif
  (void)ctx, (void)t, (void)heads;
  // Per thread: a row of scores, and one dequantized key and value row for an FP8 pool.
  return size_t(num_threads()) * size_t(std::max<int64_t>(max_context_len, 1) + 2 * head_dim) * 4 +
         512;
}

// ---- Mixture of experts

namespace {

// The MoE backward ops have a CPU reference only: a CUDA context is refused before anything
// runs, in a dry run too (a training plan must not pretend the step can run).
void check_moe_backward_device(const Context& ctx, const char* what) {
  CHECK(ctx.device == Device::cpu,
        "{}: training MoE layers (their backward) is not supported on CUDA yet; MoE models run "
        "their forward and generation on CUDA, training on the CPU",
        what);
}

void check_routing(const Context& ctx, const TensorView& weights, const TensorView& experts,
                   int64_t t, int64_t num_experts, const char* what) {
  check_tensor(ctx, weights, DType::f32, 2, what);
  check_tensor(ctx, experts, DType::i32, 2, what);
  CHECK(weights.shape == experts.shape && weights.dim(0) == t && weights.dim(1) >= 1 &&
            weights.dim(1) <= num_experts,
        "{}: routing weights {} and experts {} for {} tokens and {} experts", what,
        weights.shape.str(), experts.shape.str(), t, num_experts);
}

// Each token's expert ids (host memory: the CPU only) in [0, E) and distinct; with
// `unrecorded`, a row whose first id is -1 is left alone.
void check_expert_ids(const TensorView& experts, int64_t num_experts, const char* what,
                      bool unrecorded = false) {
  const int64_t t = experts.dim(0), k = experts.dim(1);
  const int32_t* ids = experts.ptr<int32_t>();
  for (int64_t i = 0; i < t; ++i)
    for (int64_t s = 0; s < k; ++s) {
      if (unrecorded && ids[i * k] == -1) break;
      const int32_t e = ids[i * k + s];
      CHECK(e >= 0 && e < num_experts, "{} expert {} of token {} is outside [0, {})", what, e, i,
            num_experts);
      for (int64_t s2 = 0; s2 < s; ++s2)
        CHECK(ids[i * k + s2] != e, "{} expert {} appears twice for token {}", what, e, i);
    }
}

// Stacked expert weights [E, n, k] on the context's device, their scales matching the scheme.
void check_experts(const Context& ctx, const ExpertLinear& w, int64_t e, int64_t n, int64_t k,
                   const char* what) {
  CHECK(w.weight.rank() == 3 && w.weight.is_contiguous() && w.weight.device == ctx.device &&
            w.weight.dim(0) == e && w.weight.dim(1) == n && w.weight.dim(2) == k,
        "moe_experts: {} weight {} on {}, expected [{}, {}, {}] on {}", what, w.weight.shape.str(),
        device_name(w.weight.device), e, n, k, device_name(ctx.device));
  CHECK(w.is_fp8() == (w.weight.dtype == DType::f8e4m3),
        "moe_experts: {} scheme {} does not match weight dtype {}", what, scheme_name(w.scheme),
        dtype_name(w.weight.dtype));
  if (w.is_fp8())
    CHECK(w.scales.dtype == DType::f32 && w.scales.is_contiguous() &&
              w.scales.numel() == e * weight_scale_shape(w.scheme, n, k).numel(),
          "moe_experts: {} scales {} for {} experts of {} scaling", what, w.scales.shape.str(), e,
          scheme_name(w.scheme));
}

// The MoE layer's weights for an input of width h: router [E, h], experts' shapes agreeing.
void check_moe_weights(const Context& ctx, const MoeWeights& w, int64_t h) {
  const int64_t e = w.gate.weight.dim(0), inter = w.gate.weight.dim(1);
  check_experts(ctx, w.gate, e, inter, h, "gate");
  check_experts(ctx, w.up, e, inter, h, "up");
  check_experts(ctx, w.down, e, h, inter, "down");
}

// The largest rank of an MoE layer's expert adapters (0: none), for scratch bounds.
int64_t moe_lora_rank(const MoeLora& lora) {
  int64_t r = 0;
  for (const LoraWeights* l : {&lora.gate, &lora.up, &lora.down})
    if (l->active()) r = std::max(r, l->a.dim(1));
  return r;
}

// An MoE layer's expert adapters (f32 masters on the CPU, the bf16 compute copy on CUDA):
// A [E, r, K], B [E, N, r] per projection against its stacked weight; with `grads`, gradient
// buffers of the same shapes (f32).
void check_moe_lora(const Context& ctx, const MoeWeights& w, const MoeLora& lora,
                    const MoeLoraGrads* grads) {
  const struct {
    const char* name;
    const ExpertLinear& weight;
    const LoraWeights& l;
    TensorView ga, gb;
  } parts[] = {
      {"gate", w.gate, lora.gate, grads ? grads->gate_a : TensorView(),
       grads ? grads->gate_b : TensorView()},
      {"up", w.up, lora.up, grads ? grads->up_a : TensorView(), grads ? grads->up_b : TensorView()},
      {"down", w.down, lora.down, grads ? grads->down_a : TensorView(),
       grads ? grads->down_b : TensorView()}};
  for (const auto& p : parts) {
    if (!p.l.active()) continue;
    const int64_t e = p.weight.num_experts(), n = p.weight.out_features(),
                  k = p.weight.in_features(), r = p.l.a.rank() == 3 ? p.l.a.dim(1) : 0;
    const DType dt = grads == nullptr && ctx.device == Device::cuda ? DType::bf16 : DType::f32;
    const auto fits = [&](const TensorView& a, const TensorView& b) {
      return a.dtype == dt && b.dtype == dt && a.is_contiguous() && b.is_contiguous() &&
             a.device == ctx.device && b.device == ctx.device && a.shape == Shape{e, r, k} &&
             b.shape == Shape{e, n, r};
    };
    CHECK(r > 0 && fits(p.l.a, p.l.b),
          "moe_experts: {} adapter A {} B {} for {} experts of [{}, {}]: expected {} [E, r, K] "
          "and [E, N, r]",
          p.name, p.l.a.shape.str(), p.l.b.shape.str(), e, n, k, dtype_name(dt));
    if (grads != nullptr)
      CHECK(fits(p.ga, p.gb), "moe_experts_backward: {} adapter gradients {} {} for A {} B {}",
            p.name, p.ga.shape.str(), p.gb.shape.str(), p.l.a.shape.str(), p.l.b.shape.str());
  }
}

}  // namespace

void moe_route(Context& ctx, const TensorView& x, const LinearWeight& router, bool normalize,
               const TensorView& weights, const TensorView& experts, bool replay,
               const TensorView& chosen) {
  check_ctx(ctx);
  check_act(ctx, x, 2, "moe_route input");
  const int64_t t = x.dim(0), e = router.out_features();
  CHECK(router.weight.rank() == 2 && !router.is_fp8() && router.bias.empty() &&
            router.in_features() == x.dim(1) && router.weight.device == ctx.device,
        "moe_route: router {} {} for input {}: expected an unquantized [E, {}] weight without bias",
        dtype_name(router.weight.dtype), router.weight.shape.str(), x.shape.str(), x.dim(1));
  check_routing(ctx, weights, experts, t, e, "moe_route");
  if (!chosen.empty()) {
    CHECK(replay, "moe_route: `chosen` is an output of replay only");
    check_routing(ctx, weights, chosen, t, e, "moe_route chosen");
  }
  if (dry_run_scratch(ctx, moe_route_scratch_bytes(ctx, router, t))) return;
  // CUDA's ids are device memory: replayed ids are checked where they leave the host
  // (check_replayed_experts, called by the forward), so a decode step never syncs for them.
  if (replay && ctx.device == Device::cpu)
    check_expert_ids(experts, e, "moe_route: replayed", true);
  FP8RL_DISPATCH(
      ctx, "moe_route",
      cpu::moe_route(scratch_of(ctx), x, router, normalize, weights, experts, replay, chosen,
                     rounding(ctx)),
      cuda::moe_route(*ctx.cuda, x, router, normalize, weights, experts, replay, chosen));
}

void check_replayed_experts(const TensorView& host_experts, int64_t num_experts) {
  CHECK(host_experts.device == Device::cpu && host_experts.dtype == DType::i32 &&
            host_experts.rank() == 2 && host_experts.is_contiguous(),
        "moe_route: replayed experts must be host i32 [T, k], got {} {}",
        dtype_name(host_experts.dtype), host_experts.shape.str());
  check_expert_ids(host_experts, num_experts, "moe_route: replayed", true);
}

size_t moe_route_scratch_bytes(const Context& ctx, const LinearWeight& router, int64_t t) {
#if FP8RL_HAVE_CUDA
  if (ctx.device == Device::cuda) return cuda::moe_route_scratch_bytes(router, t);
#endif
  (void)ctx;
  return size_t(t * router.out_features()) * 4 + 128 + linear_scratch_bytes(router, t);
}

size_t moe_experts_scratch_bytes(const Context& ctx, const MoeWeights& w, int64_t t, int64_t k,
                                 int64_t lora_rank) {
#if FP8RL_HAVE_CUDA
  if (ctx.device == Device::cuda) return cuda::moe_experts_scratch_bytes(w, t, k, lora_rank);
#endif
  (void)ctx;
  // Bucketed pairs, then one expert's rows at most: every token (input, gate, up, output),
  // and the largest of the expert linears' own scratch over that many rows.
  const int64_t e = w.gate.num_experts(), h = w.gate.in_features(), inter = w.gate.out_features();
  const size_t rows = size_t(t) * 4, pad = 64;
  size_t linears = 0;
  for (const ExpertLinear* p : {&w.gate, &w.up, &w.down})
    linears = std::max(linears, linear_scratch_bytes(p->expert(0), t));
  return size_t(t * k + 2 * e + 1) * 4 + rows * size_t(2 * h + 2 * inter + lora_rank) + linears +
         8 * pad;
}

void moe_experts(Context& ctx, const TensorView& x, const MoeWeights& w, GatedActivation act,
                 const TensorView& weights, const TensorView& experts, const TensorView& out,
                 const MoeLora& lora) {
  check_ctx(ctx);
  check_act(ctx, x, 2, "moe_experts input");
  check_act(ctx, out, 2, "moe_experts output");
  const int64_t t = x.dim(0), h = x.dim(1), e = w.gate.weight.dim(0);
  CHECK(out.shape == x.shape && out.data != x.data, "moe_experts: x {} out {} (out must not be x)",
        x.shape.str(), out.shape.str());
  check_moe_weights(ctx, w, h);
  check_routing(ctx, weights, experts, t, e, "moe_experts");
  const int64_t k = experts.dim(1);
#if FP8RL_HAVE_CUDA
  if (ctx.device == Device::cuda) cuda::check_moe_experts(ctx.cuda, x, w, k, lora, out);
#endif
  check_moe_lora(ctx, w, lora, nullptr);
  if (dry_run_scratch(ctx, moe_experts_scratch_bytes(ctx, w, t, k, moe_lora_rank(lora)))) return;
  FP8RL_DISPATCH(
      ctx, "moe_experts",
      cpu::moe_experts(scratch_of(ctx), x, w, act, weights, experts, out, lora, rounding(ctx)),
      cuda::moe_experts(*ctx.cuda, x, w, act == GatedActivation::silu ? 0 : 1, weights, experts,
                        out, lora));
}

void moe_experts_backward(Context& ctx, const TensorView& x, const MoeWeights& w,
                          GatedActivation act, const TensorView& weights, const TensorView& experts,
                          const TensorView& dout, const TensorView& dx, const TensorView& d_weights,
                          const MoeLora& lora, const MoeLoraGrads& grads) {
  check_moe_backward_device(ctx, "moe_experts_backward");
  check_ctx(ctx);
  CHECK(!ctx.bf16_activations, "moe_experts_backward: the backward ops are the fp32 reference");
  check_act(ctx, x, 2, "moe_experts_backward input");
  const int64_t t = x.dim(0), h = x.dim(1), e = w.gate.weight.dim(0);
  const int64_t inter = w.gate.weight.dim(1);
  check_moe_weights(ctx, w, h);
  check_moe_lora(ctx, w, lora, &grads);
  check_routing(ctx, weights, experts, t, e, "moe_experts_backward");
  check_tensor(ctx, dout, DType::f32, 2, "moe_experts_backward dout");
  check_tensor(ctx, dx, DType::f32, 2, "moe_experts_backward dx");
  check_tensor(ctx, d_weights, DType::f32, 2, "moe_experts_backward d_weights");
  CHECK(dout.shape == x.shape && dx.shape == x.shape && d_weights.shape == weights.shape &&
            dx.data != dout.data,
        "moe_experts_backward: x {} dout {} dx {} d_weights {} (dx must not be dout)",
        x.shape.str(), dout.shape.str(), dx.shape.str(), d_weights.shape.str());
  // The buckets, then one expert's rows at most: input, gate, up, a, output; the linears' own.
  const int64_t k = experts.dim(1);
  size_t linears = 0;
  for (const ExpertLinear* p : {&w.gate, &w.up, &w.down})
    linears = std::max(linears, linear_scratch_bytes(p->expert(0), t));
  const size_t bytes = size_t(t * k + 2 * e + 1) * 4 +
                       size_t(t) * 4 * size_t(3 * h + 4 * inter + 3 * moe_lora_rank(lora)) +
                       linears + 1024;
  if (dry_run_scratch(ctx, bytes)) return;
  cpu::moe_experts_backward(scratch_of(ctx), x, w, act, weights, experts, dout, dx, d_weights, lora,
                            grads);
}

void moe_route_backward(Context& ctx, const TensorView& x, const LinearWeight& router,
                        bool normalize, const TensorView& experts, const TensorView& d_weights,
                        const TensorView& dx) {
  check_moe_backward_device(ctx, "moe_route_backward");
  check_ctx(ctx);
  CHECK(!ctx.bf16_activations, "moe_route_backward: the backward ops are the fp32 reference");
  check_act(ctx, x, 2, "moe_route_backward input");
  const int64_t t = x.dim(0), e = router.out_features();
  CHECK(router.weight.rank() == 2 && !router.is_fp8() && router.in_features() == x.dim(1),
        "moe_route_backward: router {} for input {}", router.weight.shape.str(), x.shape.str());
  check_routing(ctx, d_weights, experts, t, e, "moe_route_backward");
  check_tensor(ctx, dx, DType::f32, 2, "moe_route_backward dx");
  CHECK(dx.shape == x.shape, "moe_route_backward: dx {} for x {}", dx.shape.str(), x.shape.str());
  if (dry_run_scratch(ctx,
                      size_t(t * (e + experts.dim(1))) * 4 + 256 + linear_scratch_bytes(router, t)))
    return;
  check_expert_ids(experts, e, "moe_route_backward:");
  cpu::moe_route_backward(scratch_of(ctx), x, router, normalize, experts, d_weights, dx);
}

// ---- Weights on a device

void quantize_weight(Context& ctx, const TensorView& w, Fp8Scheme scheme, const TensorView& q,
                     const TensorView& scales) {
  check_ctx(ctx);
  CHECK(scheme != Fp8Scheme::off && w.rank() == 2 && q.shape == w.shape &&
            q.dtype == DType::f8e4m3 && scales.dtype == DType::f32 &&
            scales.shape == weight_scale_shape(scheme, w.dim(0), w.dim(1)) &&
            w.device == ctx.device && q.device == ctx.device && scales.device == ctx.device,
        "quantize_weight: w {} q {} scales {}", w.shape.str(), q.shape.str(), scales.shape.str());
  if (ctx.device == Device::cuda)
    CHECK(w.dtype == DType::bf16, "quantize_weight on CUDA takes bf16 weights");
  FP8RL_DISPATCH(ctx, "quantize_weight", fp8rl::quantize_weight(w, scheme, q, scales),
                 cuda::quantize_weight(*ctx.cuda, w, scheme, q, scales));
}

void prepare_linear(Context& ctx, LinearWeight& w, std::vector<DeviceBuffer>& storage) {
  check_ctx(ctx);
#if FP8RL_HAVE_CUDA
  // A dry run's model (planned buffers) skips the GEMM's repacked scales: a few bytes a row.
  if (ctx.device == Device::cuda && !ctx.dry_run) return cuda::prepare_linear(ctx, w, storage);
#endif
  (void)storage;
  w.gemm_scales = w.scales;
}

}  // namespace fp8rl::ops
