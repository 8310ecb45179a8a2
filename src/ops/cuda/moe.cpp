// Tensor views -> the mixture-of-experts kernels (moe.cu): the router's bf16 GEMM and top-k,
// then the experts as a permutation, two grouped GEMMs around the gated activation, and the
// combine. Every buffer comes from the backend's arena, sized by T, k, E and the widths alone
// (moe_experts_scratch_bytes): no allocation, no host sync, graph-capturable.
#include <algorithm>

#include "ops/cuda/backend.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/moe_launch.h"

namespace fp8rl::cuda {

namespace {

// The FP8 input rows of an expert GEMM for the weight's activation scaling; bf16 unquantized.
MoeInput input_mode(const ExpertLinear& w) {
  if (!w.is_fp8()) return MoeInput::plain;
  switch (w.act) {
    case ActScaling::token:
      return MoeInput::token;
    case ActScaling::group:
      return MoeInput::group;
    default:
      return MoeInput::tensor;
  }
}

MoeWeightScale weight_scale(const ExpertLinear& w) {
  switch (w.scheme) {
    case Fp8Scheme::tensor:
      return MoeWeightScale::tensor;
    case Fp8Scheme::row:
      return MoeWeightScale::row;
    case Fp8Scheme::block:
      return MoeWeightScale::block;
    case Fp8Scheme::off:
      break;
  }
  return MoeWeightScale::none;
}

// Bytes of the input rows of a projection reading [rows, cols] (the arena's 256-byte rounding).
size_t input_bytes(const ExpertLinear& w, int64_t rows, int64_t cols, int64_t experts) {
  if (!w.is_fp8()) return arena_aligned(size_t(rows * cols) * 2);
  const int64_t scales = w.act == ActScaling::group ? rows * ((cols + 127) / 128) : rows;
  return arena_aligned(size_t(rows * cols)) + arena_aligned(size_t(scales) * 4) +
         arena_aligned(size_t(experts) * 4);
}

// The input rows of a projection: src's rows (gathered by token when k > 0) into the arena as
// the projection's GEMM reads them.
struct ExpertInput {
  const void* x = nullptr;
  const float* scales = nullptr;
};
ExpertInput expert_input(Backend& b, const ExpertLinear& w, const TensorView& src, int64_t rows,
                         int64_t k, const MoePermutation& p) {
  const int64_t cols = src.dim(1), e = w.num_experts();
  MoeInputArgs a;
  a.src = static_cast<const bf16*>(src.data);
  a.rows = rows;
  a.cols = cols;
  a.k = k;
  a.e = e;
  a.mode = input_mode(w);
  if (a.mode == MoeInput::plain) {
    a.out = static_cast<bf16*>(b.arena().alloc({rows, cols}, DType::bf16).data);
    launch_moe_input(a, p, b.stream());
    return {a.out, nullptr};
  }
  a.codes = static_cast<uint8_t*>(b.arena().alloc({rows, cols}, DType::f8e4m3).data);
  const int64_t scales = a.mode == MoeInput::group ? rows * ((cols + 127) / 128) : rows;
  a.scales = static_cast<float*>(b.arena().alloc({scales}, DType::f32).data);
  a.expert_amax = static_cast<float*>(b.arena().alloc({e}, DType::f32).data);
  if (a.mode == MoeInput::tensor) {
    CUDA_CHECK(cudaMemsetAsync(a.expert_amax, 0, size_t(e) * sizeof(float), b.stream()));
    launch_moe_amax(a, p, b.stream());
  }
  launch_moe_input(a, p, b.stream());
  return {a.codes, a.scales};
}

// One grouped GEMM of the projections `w` (1 or 2 of the same shape) over the permuted rows.
void expert_gemm(Backend& b, const ExpertInput& in, std::initializer_list<const ExpertLinear*> w,
                 std::initializer_list<bf16*> y, int64_t rows, const MoePermutation& p,
                 float alpha = 1.0f, bool accumulate = false) {
  const ExpertLinear& w0 = **w.begin();
  MoeGemmArgs a;
  a.x = in.x;
  a.x_scales = in.scales;
  a.x_group = w0.is_fp8() && w0.act == ActScaling::group;
  a.fp8 = w0.is_fp8();
  a.rows = rows;
  a.n = w0.out_features();
  a.k = w0.in_features();
  a.e = w0.num_experts();
  a.projections = int(w.size());
  int j = 0;
  for (const ExpertLinear* one : w) {
    a.w[j] = one->weight.data;
    a.w_scales[j] = one->is_fp8() ? static_cast<const float*>(one->scales.data) : nullptr;
    ++j;
  }
  j = 0;
  for (bf16* out : y) a.y[j++] = out;
  a.scale = weight_scale(w0);
  a.alpha = alpha;
  a.accumulate = accumulate;
  launch_moe_gemm(a, p, b.stream());
}

// An adapter's stacked A [E, r, K] or B [E, N, r] (bf16) as unquantized experts.
ExpertLinear adapter_experts(const TensorView& m) {
  ExpertLinear w;
  w.weight = m;
  return w;
}

// y += scale (x A_e^T) B_e^T over the permuted rows (x: their plain bf16 values), the CPU's
// linear (xa rounded to bf16) then linear_accumulate.
void expert_lora(Backend& b, const bf16* x, const LoraWeights& l, bf16* y, int64_t rows,
                 const MoePermutation& p) {
  if (!l.active()) return;
  ArenaScope scope(b.arena());
  const int64_t r = l.a.dim(1);
  bf16* xa = static_cast<bf16*>(b.arena().alloc({rows, r}, DType::bf16).data);
  const ExpertLinear a = adapter_experts(l.a), bw = adapter_experts(l.b);
  expert_gemm(b, {x, nullptr}, {&a}, {xa}, rows, p);
  expert_gemm(b, {xa, nullptr}, {&bw}, {y}, rows, p, l.scale, true);
}

}  // namespace

void moe_route(Backend& b, const TensorView& x, const LinearWeight& router, bool normalize,
               const TensorView& weights, const TensorView& experts, bool replay,
               const TensorView& chosen) {
  const int64_t t = x.dim(0), e = router.out_features();
  if (t == 0) return;
  CHECK(e <= 8192, "moe_route: {} experts; CUDA takes at most 8192", e);
  ArenaScope scope(b.arena());
  const TensorView logits = b.arena().alloc({t, e}, DType::bf16);  // [T, E]
  linear(b, x, router, logits);
  MoeRouteArgs a;
  a.logits = static_cast<const bf16*>(logits.data);
  a.t = t;
  a.e = e;
  a.k = weights.dim(1);
  a.normalize = normalize;
  a.replay = replay;
  a.weights = static_cast<float*>(weights.data);
  a.experts = static_cast<int32_t*>(experts.data);
  a.chosen = chosen.empty() ? nullptr : static_cast<int32_t*>(chosen.data);
  launch_moe_route(a, b.stream());
}

size_t moe_route_scratch_bytes(const LinearWeight& router, int64_t t) {
  return arena_aligned(size_t(t * router.out_features()) * 2) + linear_scratch_bytes(router, t);
}

void moe_experts(Backend& b, const TensorView& x, const MoeWeights& w, int act,
                 const TensorView& weights, const TensorView& experts, const TensorView& out,
                 const MoeLora& lora) {
  const int64_t t = x.dim(0), h = x.dim(1), k = experts.dim(1);
  const int64_t e = w.gate.num_experts(), inter = w.gate.out_features(), rows = t * k;
  if (t == 0) return;
  ArenaScope scope(b.arena());
  const auto i32 = [&](int64_t n) {
    return static_cast<int32_t*>(b.arena().alloc({n}, DType::i32).data);
  };
  MoePermutation p;
  p.offsets = i32(e + 1);
  p.tile_first = i32(e + 1);
  p.pair_of_row = i32(rows);
  p.row_of_pair = i32(rows);
  p.expert_of_row = i32(rows);
  const int32_t* ids = static_cast<const int32_t*>(experts.data);
  launch_moe_permute(ids, rows, e, p, b.stream());
  // gate and up [rows, I] in one GEMM over the gathered rows; a = act(gate) * up over gate.
  bf16* gate = static_cast<bf16*>(b.arena().alloc({rows, inter}, DType::bf16).data);
  bf16* up = static_cast<bf16*>(b.arena().alloc({rows, inter}, DType::bf16).data);
  {
    ArenaScope in_scope(b.arena());
    const ExpertInput in = expert_input(b, w.gate, x, rows, k, p);
    expert_gemm(b, in, {&w.gate, &w.up}, {gate, up}, rows, p);
    if (lora.gate.active() || lora.up.active()) {
      // The adapters read the plain rows: FP8 experts gather them once more in bf16.
      ExpertLinear unquantized = w.gate;
      unquantized.scheme = Fp8Scheme::off;
      const bf16* plain = static_cast<const bf16*>(
          w.gate.is_fp8() ? expert_input(b, unquantized, x, rows, k, p).x : in.x);
      expert_lora(b, plain, lora.gate, gate, rows, p);
      expert_lora(b, plain, lora.up, up, rows, p);
    }
  }
  // Rows past the pairs routed (ids outside [0, E)) hold stale values: nothing reads them.
  launch_gated(gate, up, rows, inter, act, gate, nullptr, b.stream());
  bf16* y = static_cast<bf16*>(b.arena().alloc({rows, h}, DType::bf16).data);  // [rows, H]
  {
    ArenaScope in_scope(b.arena());
    const TensorView a = TensorView(gate, DType::bf16, {rows, inter}, Device::cuda);
    const ExpertInput in = expert_input(b, w.down, a, rows, 0, p);
    expert_gemm(b, in, {&w.down}, {y}, rows, p);
    expert_lora(b, gate, lora.down, y, rows, p);
  }
  launch_moe_combine(y, h, static_cast<const float*>(weights.data), ids, p.row_of_pair, t, k,
                     static_cast<bf16*>(out.data), b.stream());
}

void check_moe_experts(const Backend* b, const TensorView& x, const MoeWeights& w, int64_t k,
                       const MoeLora& lora, const TensorView& out) {
  for (const auto& [l, d] : {std::pair{&lora.gate, &lora.gate_dropout},
                             {&lora.up, &lora.up_dropout},
                             {&lora.down, &lora.down_dropout}}) {
    if (!l->active()) continue;
    CHECK(d->p == 0.0f,
          "moe_experts: LoRA dropout on MoE experts (p = {}) runs on the CPU only (training)",
          d->p);
    CHECK(l->a.rank() == 3 && l->a.dim(1) % 8 == 0,
          "moe_experts: expert adapters of rank {} on CUDA: the rank must be a multiple of 8",
          l->a.rank() == 3 ? l->a.dim(1) : 0);
  }
  CHECK(k <= kMoeMaxTopK, "moe_experts: top-{} routing; CUDA takes at most {} experts a token", k,
        kMoeMaxTopK);
  const int64_t h = w.gate.in_features(), inter = w.gate.out_features();
  CHECK(h % 16 == 0 && inter % 16 == 0,
        "moe_experts: hidden size {} and expert intermediate size {} must be multiples of 16 on "
        "CUDA",
        h, inter);
  CHECK(x.is_contiguous() && out.is_contiguous() && reinterpret_cast<uintptr_t>(x.data) % 16 == 0,
        "moe_experts: x and out must be contiguous, x 16-byte aligned, on CUDA");
  CHECK(w.gate.scheme == w.up.scheme && w.gate.act == w.up.act,
        "moe_experts: gate ({}) and up ({}) experts must share one FP8 scheme on CUDA",
        scheme_name(w.gate.scheme), scheme_name(w.up.scheme));
  for (const ExpertLinear* p : {&w.gate, &w.down}) {
    if (!p->is_fp8()) {
      CHECK(p->weight.dtype == DType::bf16,
            "moe_experts: unquantized experts must be bf16 on CUDA, got {} (Model::to_device "
            "converts)",
            dtype_name(p->weight.dtype));
      continue;
    }
    CHECK(
        p->act == ActScaling::token || p->act == ActScaling::group || p->act == ActScaling::tensor,
        "moe_experts: FP8 experts on CUDA quantize their inputs dynamically (token, group or "
        "tensor scaling), not with {}",
        act_scaling_name(p->act));
    CHECK(b == nullptr || b->caps().major * 10 + b->caps().minor >= 89,
          "moe_experts: FP8 experts need an sm_89 or later GPU (FP8 tensor cores); {} is sm_{}{}",
          b->caps().name, b->caps().major, b->caps().minor);
  }
  const int64_t e = w.gate.num_experts(), rows = x.dim(0) * k;
  CHECK(e <= 8192 && (rows + kMoeTileRows - 1) / kMoeTileRows + e <= 65535,
        "moe_experts: {} experts and {} routed rows exceed the CUDA kernels' grid", e, rows);
}

size_t moe_experts_scratch_bytes(const MoeWeights& w, int64_t t, int64_t k, int64_t lora_rank) {
  const int64_t e = w.gate.num_experts(), inter = w.gate.out_features();
  const int64_t h = w.gate.in_features(), rows = t * k;
  const size_t perm = 2 * arena_aligned(size_t(e + 1) * 4) + 3 * arena_aligned(size_t(rows) * 4);
  const size_t gate_up = 2 * arena_aligned(size_t(rows * inter) * 2);
  const size_t y = arena_aligned(size_t(rows * h) * 2);
  // Adapters: xa [rows, r], and for FP8 experts the plain rows of x once more.
  const size_t xa = lora_rank > 0 ? arena_aligned(size_t(rows * lora_rank) * 2) : 0;
  const size_t plain = lora_rank > 0 && w.gate.is_fp8() ? arena_aligned(size_t(rows * h) * 2) : 0;
  // The gate/up input is released before y is taken; the down input after.
  const size_t first = input_bytes(w.gate, rows, h, e) + plain + xa;
  const size_t second = y + input_bytes(w.down, rows, inter, e) + xa;
  return perm + gate_up + std::max(first, second);
}

}  // namespace fp8rl::cuda
