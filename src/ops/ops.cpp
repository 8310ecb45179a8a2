// Shape checks and backend dispatch for the op interface. Every op validates its operands
// here once, so backends can assume well-formed views.
#include "ops/ops.h"

#include "core/parallel.h"
#include "ops/cpu/cpu_ops.h"

namespace fp8rl {
size_t LinearWeight::nbytes() const {
  return weight.nbytes() + (scales.empty() ? 0 : scales.nbytes()) +
         (bias.empty() ? 0 : bias.nbytes());
}
}  // namespace fp8rl

namespace fp8rl::ops {

namespace {
void check_f32(const TensorView& t, int rank, const char* what) {
  CHECK(t.dtype == DType::f32 && t.rank() == rank && t.is_contiguous(),
        "{}: expected a contiguous f32 tensor of rank {}, got {} {}", what, rank,
        dtype_name(t.dtype), t.shape.str());
}
void check_cpu(const Context& ctx) {
  CHECK(ctx.device == Device::cpu, "this build has no {} backend for the forward ops yet",
        device_name(ctx.device));
}
Arena& scratch_of(Context& ctx) {
  CHECK(ctx.scratch != nullptr, "Context has no scratch arena");
  return *ctx.scratch;
}
}  // namespace

void embedding(Context& ctx, std::span<const int32_t> ids, const TensorView& table, float scale,
               const TensorView& out) {
  check_cpu(ctx);
  check_f32(out, 2, "embedding output");
  CHECK(table.rank() == 2 && out.dim(0) == int64_t(ids.size()) && out.dim(1) == table.dim(1),
        "embedding: table {} ids {} out {}", table.shape.str(), ids.size(), out.shape.str());
  for (int32_t id : ids)
    CHECK(id >= 0 && id < table.dim(0), "token id {} is outside the vocabulary [0, {})", id,
          table.dim(0));
  cpu::embedding(ids, table, scale, out);
}

void rms_norm(Context& ctx, const TensorView& x, const TensorView& w, float eps, bool plus_one,
              const TensorView& out) {
  check_cpu(ctx);
  check_f32(x, 2, "rms_norm input");
  check_f32(out, 2, "rms_norm output");
  CHECK(w.rank() == 1 && w.dim(0) == x.dim(1) && out.shape == x.shape, "rms_norm: x {} w {} out {}",
        x.shape.str(), w.shape.str(), out.shape.str());
  cpu::rms_norm(x, w, eps, plus_one, out);
}

void rope(Context& ctx, const TensorView& x, std::span<const int32_t> positions,
          const TensorView& inv_freq) {
  check_cpu(ctx);
  check_f32(x, 3, "rope input");
  check_f32(inv_freq, 1, "rope inv_freq");
  CHECK(x.dim(0) == int64_t(positions.size()) && x.dim(2) == 2 * inv_freq.dim(0),
        "rope: x {} positions {} inv_freq {}", x.shape.str(), positions.size(),
        inv_freq.shape.str());
  cpu::rope(x, positions, inv_freq);
}

void attention(Context& ctx, const TensorView& q, const TensorView& k_cache,
               const TensorView& v_cache, int64_t first_slot, const AttentionParams& p,
               const TensorView& out) {
  check_cpu(ctx);
  check_f32(q, 3, "attention q");
  check_f32(k_cache, 3, "attention k cache");
  check_f32(v_cache, 3, "attention v cache");
  check_f32(out, 3, "attention output");
  CHECK(k_cache.shape == v_cache.shape && q.dim(2) == k_cache.dim(2) &&
            q.dim(1) % k_cache.dim(1) == 0 && out.shape == q.shape,
        "attention: q {} k {} v {} out {}", q.shape.str(), k_cache.shape.str(), v_cache.shape.str(),
        out.shape.str());
  CHECK(first_slot >= 0 && first_slot + q.dim(0) <= k_cache.dim(0),
        "attention: queries at slots [{}, {}) exceed the cache capacity {}", first_slot,
        first_slot + q.dim(0), k_cache.dim(0));
  cpu::attention(scratch_of(ctx), q, k_cache, v_cache, first_slot, p, out);
}

void silu_mul(Context& ctx, const TensorView& gate, const TensorView& up, const TensorView& out) {
  check_cpu(ctx);
  CHECK(gate.shape == up.shape && out.shape == gate.shape && gate.dtype == DType::f32,
        "silu_mul: gate {} up {} out {}", gate.shape.str(), up.shape.str(), out.shape.str());
  cpu::silu_mul(gate, up, out);
}

void gelu_tanh_mul(Context& ctx, const TensorView& gate, const TensorView& up,
                   const TensorView& out) {
  check_cpu(ctx);
  CHECK(gate.shape == up.shape && out.shape == gate.shape && gate.dtype == DType::f32,
        "gelu_tanh_mul: gate {} up {} out {}", gate.shape.str(), up.shape.str(), out.shape.str());
  cpu::gelu_tanh_mul(gate, up, out);
}

void add(Context& ctx, const TensorView& a, const TensorView& b, const TensorView& out) {
  check_cpu(ctx);
  CHECK(a.shape == b.shape && out.shape == a.shape && a.dtype == DType::f32,
        "add: a {} b {} out {}", a.shape.str(), b.shape.str(), out.shape.str());
  cpu::add(a, b, out);
}

void softcap(Context& ctx, const TensorView& x, float cap) {
  check_cpu(ctx);
  CHECK(cap > 0 && x.dtype == DType::f32, "softcap: cap must be positive");
  cpu::softcap(x, cap);
}

void linear(Context& ctx, const TensorView& x, const LinearWeight& w, const TensorView& out) {
  check_cpu(ctx);
  check_f32(x, 2, "linear input");
  check_f32(out, 2, "linear output");
  CHECK(w.weight.rank() == 2 && x.dim(1) == w.in_features() && out.dim(0) == x.dim(0) &&
            out.dim(1) == w.out_features(),
        "linear: x {} weight {} out {}", x.shape.str(), w.weight.shape.str(), out.shape.str());
  CHECK(w.is_fp8() == (w.weight.dtype == DType::f8e4m3),
        "linear: scheme {} does not match weight dtype {}", scheme_name(w.scheme),
        dtype_name(w.weight.dtype));
  cpu::linear(scratch_of(ctx), x, w, out);
}

size_t linear_scratch_bytes(const LinearWeight& w, int64_t m) {
  const int64_t n = w.out_features(), k = w.in_features();
  const size_t pad = 256;
  size_t bytes = size_t(n * k) * 4 + pad;
  if (w.act != ActScaling::none)
    bytes += size_t(m * k) * 5 + size_t(m * (k / 128 + 2)) * 4 + 3 * pad;
  return bytes;
}

size_t attention_scratch_bytes(int64_t /*t*/, int64_t /*heads*/, int64_t c) {
  return size_t(num_threads()) * size_t(c) * 4 + 256;
}

}  // namespace fp8rl::ops
