// Linear layers on CUDA: pick the GEMM that computes the FP8 recipe exactly for this weight's
// scheme and the activation's scaling, quantize the input if it is not already, run cuBLASLt,
// add the bias.
//
//   weights  activations      GEMM
//   tensor   tensor / static  SCALAR_32F x SCALAR_32F
//   tensor   token            OUTER_VEC_32F, the weight scale broadcast to [N] at load time
//   row      token            OUTER_VEC_32F x OUTER_VEC_32F
//   row      tensor / static  OUTER_VEC_32F, the activation scale broadcast to [M] per call
//   block    group            BLK128x128_32F x VEC128_32F, tokens padded to a multiple of 4
//   anything else, a device without that mode, or K, N not multiples of 16: both operands
//   dequantized to bf16 and a bf16 GEMM (same values up to bf16 rounding of the products).
#include <algorithm>
#include <cstring>
#include <span>

#include "ops/cuda/backend.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/view_pointers.h"
#include "quant/fp8.h"

namespace fp8rl::cuda {

namespace {

int scheme_code(Fp8Scheme s) {
  return s == Fp8Scheme::tensor ? 1 : s == Fp8Scheme::row ? 2 : 3;
}

enum class Path { bf16, scalar, outer, outer_broadcast_x, block, dequantized };

const char* path_name(Path p) {
  switch (p) {
    case Path::bf16:
      return "bf16";
    case Path::scalar:
      return "fp8 SCALAR_32F";
    case Path::outer:
      return "fp8 OUTER_VEC_32F";
    case Path::outer_broadcast_x:
      return "fp8 OUTER_VEC_32F (activation scale broadcast)";
    case Path::block:
      return "fp8 BLK128x128_32F x VEC128_32F";
    case Path::dequantized:
      return "fp8 dequantized to bf16 (fallback)";
  }
  return "?";
}

Path choose_path(Backend& b, const LinearWeight& w, ActScaling act) {
  if (!w.is_fp8()) return Path::bf16;
  // FP8 tensor-core alignment and the table above (the CPU's bf16 emulation asks the same).
  if (!fp8_gemm_native(w, act)) return Path::dequantized;
  const Capabilities& c = b.caps();
  const bool per_tensor_act = act == ActScaling::tensor || act == ActScaling::static_tensor;
  switch (w.scheme) {
    case Fp8Scheme::tensor:
      if (per_tensor_act && c.fp8_tensor) return Path::scalar;
      if (act == ActScaling::token && c.fp8_outer) return Path::outer;
      break;
    case Fp8Scheme::row:
      if (act == ActScaling::token && c.fp8_outer) return Path::outer;
      if (per_tensor_act && c.fp8_outer) return Path::outer_broadcast_x;
      break;
    case Fp8Scheme::block:
      if (act == ActScaling::group && c.fp8_block) return Path::block;
      break;
    case Fp8Scheme::off:
      break;
  }
  return Path::dequantized;
}

// Where a GEMM writes before `out` is final: `out` itself; fp32 scratch when a bias has to be
// added before the single rounding to bf16 (as the CPU adds it to the fp32 sum); padded
// scratch when block scaling ran on a token count rounded up to 4.
struct Target {
  TensorView y;         // what the GEMM writes: [rows, N]
  bool staged = false;  // y is fp32 scratch that finish() rounds into out with the bias
  bool padded = false;  // y has rows past out's
};

Target make_target(Backend& b, const LinearWeight& w, const TensorView& out, int64_t rows) {
  Target t;
  t.staged = !w.bias.empty() && out.dtype == DType::bf16;
  t.padded = rows != out.dim(0);
  t.y = t.staged || t.padded
            ? b.arena().alloc({rows, out.dim(1)}, t.staged ? DType::f32 : out.dtype)
            : out;
  return t;
}

void finish(Backend& b, const LinearWeight& w, const Target& t, const TensorView& out) {
  const int64_t m = out.dim(0), n = out.dim(1);
  const float* bias = static_cast<const float*>(w.bias.data);
  if (t.staged) {  // the first m rows of y are out's rows (row-major prefix)
    launch_bias_round(static_cast<const float*>(t.y.data), bias, m, n, static_cast<bf16*>(out.data),
                      b.stream());
    return;
  }
  if (t.padded)
    CUDA_CHECK(
        cudaMemcpyAsync(out.data, t.y.data, out.nbytes(), cudaMemcpyDeviceToDevice, b.stream()));
  if (bias != nullptr) launch_add_bias(static_cast<float*>(out.data), bias, m, n, b.stream());
}

GemmArgs bf16_args(const TensorView& x, const void* w, const TensorView& y, int64_t n) {
  GemmArgs g;
  g.mode = GemmScale::none;
  g.m = x.dim(0);
  g.n = n;
  g.k = x.dim(1);
  g.w = w;
  g.x = x.data;
  g.y = y.data;
  g.y_f32 = y.dtype == DType::f32;
  return g;
}

}  // namespace

TensorView dequantized_weight(Backend& b, const LinearWeight& w) {
  TensorView wd = b.arena().alloc(w.weight.shape, DType::bf16);
  launch_dequantize_weight(static_cast<const uint8_t*>(w.weight.data),
                           static_cast<const float*>(w.scales.data), scheme_code(w.scheme),
                           w.out_features(), w.in_features(), static_cast<bf16*>(wd.data),
                           b.stream());
  return wd;
}

namespace {

// The GEMM arguments of an FP8 path for a quantized input; may allocate from the arena.
GemmArgs fp8_args(Backend& b, Path path, const ops::QuantizedActivation& x, const LinearWeight& w,
                  void* y, bool y_f32) {
  GemmArgs g;
  g.m = path == Path::block ? x.padded_rows : x.rows;
  g.n = w.out_features();
  g.k = w.in_features();
  g.w = w.weight.data;
  g.x = x.codes.data;
  g.y = y;
  g.y_f32 = y_f32;
  g.w_scale = static_cast<const float*>(w.gemm_scales.data);
  g.x_scale = static_cast<const float*>(x.scales.data);
  switch (path) {
    case Path::scalar:
      g.mode = GemmScale::scalar;
      break;
    case Path::outer:
      g.mode = GemmScale::outer;
      break;
    case Path::outer_broadcast_x: {
      g.mode = GemmScale::outer;
      TensorView v = b.arena().alloc({x.rows}, DType::f32);
      launch_broadcast(static_cast<const float*>(x.scales.data), static_cast<float*>(v.data),
                       x.rows, b.stream());
      g.x_scale = static_cast<const float*>(v.data);
      break;
    }
    case Path::block:
      g.mode = GemmScale::block;
      break;
    default:
      RAISE("fp8_args: not an FP8 GEMM path");
  }
  return g;
}

// ---- The weight-streaming kernel (linear.cu) for GEMMs of few rows
//
// A rollout's decode step has 4-64 rows: every linear is then a pass over its weight, and
// cuBLASLt's FP8 kernels (64-128-row tiles) keep too few bytes in flight to stream it at the
// memory's bandwidth. Row- and tensor-scaled weights with per-token or per-tensor input scales
// run on the streaming kernel instead, up to four weights reading one input in one launch.
// Never in batch-invariant mode, where a row's kernel must not depend on the row count.

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

// Whether x W^T runs on the streaming kernel (into a bf16 output with unit column stride).
bool streaming_applies(const Backend& b, const ops::QuantizedActivation& x, const LinearWeight& w) {
  const bool scalar_x = x.act == ActScaling::tensor || x.act == ActScaling::static_tensor;
  return b.caps().streaming_linears && !b.batch_invariant() && x.rows > 0 &&
         x.rows <= kStreamingMaxRows && (x.act == ActScaling::token || scalar_x) &&
         (w.scheme == Fp8Scheme::row || w.scheme == Fp8Scheme::tensor) &&
         fp8_gemm_native(w, x.act) && w.in_features() == x.cols && aligned16(w.weight.data) &&
         aligned16(x.codes.data);
}

StreamingSegment streaming_segment(const LinearWeight& w, const TensorView& out, int first_tile) {
  StreamingSegment s;
  s.w = static_cast<const uint8_t*>(w.weight.data);
  s.w_scale = static_cast<const float*>(w.scales.data);
  s.w_scale_per_row = w.scheme == Fp8Scheme::row;
  s.bias = static_cast<const float*>(w.bias.data);
  s.y = static_cast<bf16*>(out.data);
  s.ldy = out.strides[0];
  s.n = w.out_features();
  s.first_tile = first_tile;
  return s;
}

// An adapter's down product xa [M, r] for the fused up product: `data` with row stride ld.
struct LoraXa {
  const bf16* data = nullptr;
  int64_t ld = 0;
};
// A column slice [m, n] of a wider row-major bf16 matrix (row stride ld).
struct ColumnSlice {
  const bf16* data = nullptr;
  int64_t ld = 0;
};

// out_i = x W_i^T (+ the adapter's up product where xa[i] is set) for the weights given, in
// one launch; false (nothing queued) where the kernel does not apply to every one.
bool run_streaming(Backend& b, const ops::QuantizedActivation& x,
                   std::span<const LinearWeight* const> weights, std::span<const TensorView> outs,
                   std::span<const LoraWeights> loras = {}, std::span<const LoraXa> xa = {},
                   const StreamingDown& down = {}) {
  StreamingArgs a;
  a.down = down;
  a.x = static_cast<const uint8_t*>(x.codes.data);
  a.x_scale = static_cast<const float*>(x.scales.data);
  a.x_scale_per_row = x.act == ActScaling::token;
  a.m = int(x.rows);
  a.k = x.cols;
  a.multiprocessors = b.caps().multiprocessors;
  int tiles = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const LinearWeight& w = *weights[i];
    const TensorView& out = outs[i];
    if (a.num_segments == kStreamingMaxSegments || !streaming_applies(b, x, w) ||
        out.dtype != DType::bf16 || out.strides[1] != 1)
      return false;
    StreamingSegment& sg = a.seg[a.num_segments++];
    sg = streaming_segment(w, out, tiles);
    if (!xa.empty() && xa[i].data != nullptr) {
      sg.lora_xa = xa[i].data;
      sg.lora_ld = xa[i].ld;
      sg.lora_b = static_cast<const bf16*>(loras[i].b.data);
      sg.lora_rank = int(loras[i].rank());
      sg.lora_scale = loras[i].scale;
    }
    tiles += int(w.out_features() / 16);
  }
  launch_linear_streaming(a, b.stream());
  b.last_linear_path =
      weights.size() > 1 ? "fp8 weight streaming, grouped" : "fp8 weight streaming";
  return true;
}

bool run_streaming(Backend& b, const ops::QuantizedActivation& x, const LinearWeight& w,
                   const TensorView& out) {
  const LinearWeight* ws[] = {&w};
  return run_streaming(b, x, ws, {&out, 1});
}

// ---- Decode-sized FP8 GEMMs on two streams
//
// cuBLASLt 13.1 has one configuration for OUTER_VEC_32F on sm_90 (128x128 tiles, no split-K,
// no batched form: tools/experiments/gemm_sweep), so the GEMM of a 256-row decode step with
// N = 4,096 keeps 64 of 132 SMs busy for its whole K loop, and two GEMMs of 192 tiles each
// leave most of a second wave idle. GEMMs whose plans use no workspace run concurrently
// instead, the second fork()ed onto the side stream: a pair reading one input (gate and up),
// or one GEMM's two K halves into fp32 partials that sum_round adds and rounds once (down_proj).
// A half's product carries the whole row scales (s_x[m] s_w[n] is constant along K), so the
// halves add up to the unsplit result up to the order of the fp32 sum. Never in
// batch-invariant mode, where a row's summation order must not depend on m.
//
// Measured on an H200 at M = 256, N = 4,096, replayed from a CUDA graph as decode steps are
// (tools/experiments/gemm_sweep --halves-on-streams, docs/PERFORMANCE.md): a GEMM costs ~8 us
// however short its K loop, so halves pay only for a long K. K = 12,288: 24.4 us as two halves
// against 32.4 us whole; K = 4,096: 10.3 against 13.3, which the ~3 us sum_round eats.
// Hence kHalvesMinK.
constexpr int64_t kHalvesMinK = 8192;

bool concurrency_on(const Backend& b) {
  return b.caps().concurrent_linears && !b.batch_invariant();
}

int64_t gemm_tiles(int64_t m, int64_t n) {  // the 128x128 output tiles of OUTER_VEC_32F
  return ((m + 127) / 128) * ((n + 127) / 128);
}

// A plan that cuBLASLt supports and that never touches the shared workspace.
bool concurrent_plan(Backend& b, const GemmArgs& g) {
  return b.gemm().supported(g) && b.gemm().workspace_used(g) == 0;
}
bool concurrent_plans(Backend& b, std::initializer_list<GemmArgs> gs) {
  for (const GemmArgs& g : gs)
    if (!concurrent_plan(b, g)) return false;
  return true;
}

// out = x W^T as two K halves on two streams, when a whole GEMM fills at most half the SMs.
// False, with nothing queued, when that does not apply. The halves go through scratch (2 M N
// fp32, within linear_scratch_bytes' two fp32 outputs) and sum_round writes out.
bool run_k_halves(Backend& b, const ops::QuantizedActivation& x, const LinearWeight& w,
                  const TensorView& out) {
  const int64_t m = x.rows, n = w.out_features(), k = w.in_features();
  if (!concurrency_on(b) || out.dtype != DType::bf16 || k % 32 != 0 || k < kHalvesMinK ||
      2 * gemm_tiles(m, n) > b.caps().multiprocessors)
    return false;
  const size_t mark = b.arena().mark();
  const TensorView parts = b.arena().alloc({2, m, n}, DType::f32);  // [2, M, N] K-half sums
  float* lo_y = static_cast<float*>(parts.data);
  GemmArgs lo = fp8_args(b, Path::outer, x, w, lo_y, true);
  lo.k = k / 2;
  lo.w_ld = lo.x_ld = k;
  GemmArgs hi = lo;
  hi.w = static_cast<const uint8_t*>(lo.w) + k / 2;
  hi.x = static_cast<const uint8_t*>(lo.x) + k / 2;
  hi.y = lo_y + m * n;
  if (!concurrent_plans(b, {lo, hi})) {
    b.arena().rewind(mark);
    return false;
  }
  b.fork();
  b.gemm().run(hi, b.side_stream());
  b.gemm().run(lo, b.stream());
  b.join();
  launch_sum_round(lo_y, lo_y + m * n, static_cast<const float*>(w.bias.data), m, n,
                   static_cast<bf16*>(out.data), b.stream());
  b.last_linear_path = "fp8 OUTER_VEC_32F, K halves on two streams";
  b.arena().rewind(mark);
  return true;
}

void run_quantized(Backend& b, const ops::QuantizedActivation& x, const LinearWeight& w,
                   const TensorView& out) {
  const size_t mark = b.arena().mark();
  Path path = choose_path(b, w, x.act);
  if (path != Path::dequantized && path != Path::block && run_streaming(b, x, w, out)) return;
  if (path == Path::outer && run_k_halves(b, x, w, out)) {
    b.arena().rewind(mark);
    return;
  }
  GemmArgs g;
  Target t;
  if (path != Path::dequantized) {
    // Block scaling runs on the padded token count; the pad rows' outputs land in scratch.
    t = make_target(b, w, out, path == Path::block ? x.padded_rows : x.rows);
    g = fp8_args(b, path, x, w, t.y.data, t.y.dtype == DType::f32);
    if (!b.gemm().supported(g)) path = Path::dequantized;  // e.g. a shape cuBLASLt rejects
  }
  if (path == Path::dequantized) {
    t = make_target(b, w, out, x.rows);
    TensorView xd = b.arena().alloc({x.rows, x.cols}, DType::bf16);
    dequantize(b, x, xd);
    TensorView wd = dequantized_weight(b, w);
    g = bf16_args(xd, wd.data, t.y, w.out_features());
  }
  b.gemm().run(g, b.stream());
  finish(b, w, t, out);
  b.last_linear_path = path_name(path);
  b.arena().rewind(mark);
}

}  // namespace

void linear(Backend& b, const TensorView& x, const LinearWeight& w, const TensorView& out,
            const float* x_amax) {
  const size_t mark = b.arena().mark();
  if (!w.is_fp8() || w.act == ActScaling::none) {
    // bf16 weights, or weight-only FP8 dequantized to bf16: the activations stay bf16.
    CHECK(w.is_fp8() || w.weight.dtype == DType::bf16,
          "CUDA linear: unquantized weights must be bf16 on the device (Model::to_device "
          "converts them)");
    const Target t = make_target(b, w, out, x.dim(0));
    const void* wd = w.is_fp8() ? dequantized_weight(b, w).data : w.weight.data;
    b.gemm().run(bf16_args(x, wd, t.y, w.out_features()), b.stream());
    finish(b, w, t, out);
    b.last_linear_path =
        w.is_fp8() ? "fp8 weight-only, dequantized to bf16" : path_name(Path::bf16);
  } else {
    const ops::QuantizedActivation q = alloc_quantized(b, w.act, x.dim(0), x.dim(1));
    if (x_amax != nullptr)  // the producer already reduced max |x|: one pass
      launch_quantize_tensor(x.data, x.dtype == DType::f32, x.numel(), x_amax, 0.0f,
                             static_cast<uint8_t*>(q.codes.data),
                             static_cast<float*>(q.scales.data), b.stream());
    else
      quantize(b, x, q, w.input_scale);
    run_quantized(b, q, w, out);
  }
  b.arena().rewind(mark);
}

void linear(Backend& b, const ops::QuantizedActivation& x, const LinearWeight& w,
            const TensorView& out) {
  run_quantized(b, x, w, out);
}

namespace {

// linear(x, w0, out0) and linear(x, w1, out1) of one quantized input (gate and up), side by
// side on two streams where each alone would leave SMs idle.
void linear_pair(Backend& b, const ops::QuantizedActivation& x, const LinearWeight& w0,
                 const TensorView& out0, const LinearWeight& w1, const TensorView& out1) {
  auto direct = [&](const LinearWeight& w, const TensorView& out) {
    return choose_path(b, w, x.act) == Path::outer && w.bias.empty() && out.dtype == DType::bf16;
  };
  const LinearWeight* ws[] = {&w0, &w1};
  const TensorView outs[] = {out0, out1};
  if (run_streaming(b, x, ws, outs)) return;
  // Side by side while the two fill at most four waves: past that, each one's last partial
  // wave is a small part of its time.
  const int64_t tiles =
      gemm_tiles(x.rows, w0.out_features()) + gemm_tiles(x.rows, w1.out_features());
  if (concurrency_on(b) && direct(w0, out0) && direct(w1, out1) &&
      tiles <= 4 * b.caps().multiprocessors) {
    const GemmArgs g0 = fp8_args(b, Path::outer, x, w0, out0.data, false);
    const GemmArgs g1 = fp8_args(b, Path::outer, x, w1, out1.data, false);
    if (concurrent_plans(b, {g0, g1})) {
      b.fork();
      b.gemm().run(g1, b.side_stream());
      b.gemm().run(g0, b.stream());
      b.join();
      b.last_linear_path = "fp8 OUTER_VEC_32F, a pair on two streams";
      return;
    }
  }
  run_quantized(b, x, w0, out0);
  run_quantized(b, x, w1, out1);
}

}  // namespace

// D = alpha X W^T + out with C = D = out (bf16): fp32 accumulation, one rounding of the sum.
void linear_accumulate(Backend& b, const TensorView& x, const LinearWeight& w, float alpha,
                       const TensorView& out) {
  CHECK(w.weight.dtype == DType::bf16,
        "CUDA linear_accumulate: the weight must be bf16 on the device, got {}",
        dtype_name(w.weight.dtype));
  GemmArgs g = bf16_args(x, w.weight.data, out, w.out_features());
  g.alpha = alpha;
  g.accumulate = true;
  b.gemm().run(g, b.stream());
}

// ---- ops::linear_group
//
// LoRA adds two GEMMs per projection, each a few microseconds at a decode step however small:
// per group they become one down product over the A matrices side by side (LoraAdapter lays
// them out so) and one launch for the up products, or none where the streaming kernel adds
// them in its epilogue.

namespace {

// Steps up to this many rows run a group with a stacked weight as one GEMM: above it each
// weight's GEMM fills the GPU on its own (at 8,192 tokens of Qwen3-8B on an H200 stacked q/k/v
// ran 1.5% (FP8-row) and 2.6% (bf16) slower; at a 256-row decode step 6.6% and 2.0% faster).
constexpr int64_t kStackedMaxRows = 2048;
// Up products of at most this many rows on the grouped kernel; cuBLASLt's beyond.
constexpr int64_t kExpandMaxRows = 256;

// The group's A matrices as one [sum r_i, K] bf16 weight when each projection has an adapter
// without dropout and they lie side by side in group order; else empty.
LinearWeight stacked_lora_a(std::span<const ops::Projection> group) {
  const char* next = nullptr;
  int64_t rows = 0;
  for (const ops::Projection& p : group) {
    if (!p.lora.active() || p.dropout.p > 0 || (next != nullptr && p.lora.a.data != next))
      return {};
    rows += p.lora.rank();
    next = static_cast<const char*>(p.lora.a.data) + p.lora.a.nbytes();
  }
  LinearWeight a;
  a.weight =
      TensorView(group[0].lora.a.data, DType::bf16, {rows, group[0].lora.a.dim(1)}, Device::cuda);
  return a;
}

// The adapters' down products xa_i = dropout_i(x) A_i^T into arena scratch.
void lora_down(Backend& b, const TensorView& x, std::span<const ops::Projection> group,
               std::span<LoraXa> xa) {
  const int64_t m = x.dim(0);
  const LinearWeight stacked = stacked_lora_a(group);
  if (!stacked.weight.empty()) {
    const int64_t r = stacked.out_features();
    const TensorView all = b.arena().alloc({m, r}, DType::bf16);
    linear(b, x, stacked, all);
    int64_t col = 0;
    for (size_t i = 0; i < group.size(); ++i) {
      xa[i] = {static_cast<const bf16*>(all.data) + col, r};
      col += group[i].lora.rank();
    }
    return;
  }
  for (size_t i = 0; i < group.size(); ++i) {
    const ops::Projection& p = group[i];
    if (!p.lora.active()) continue;
    TensorView in = x;
    if (p.dropout.p > 0) {
      in = b.arena().alloc(x.shape, DType::bf16);
      lora_dropout(b, x, p.dropout, in);
    }
    LinearWeight a;
    a.weight = p.lora.a;
    const TensorView out = b.arena().alloc({m, p.lora.rank()}, DType::bf16);
    linear(b, in, a, out);
    xa[i] = {static_cast<const bf16*>(out.data), p.lora.rank()};
  }
}

// Whether lora_up runs the group's up products as one grouped launch.
bool up_products_grouped(const Backend& b, int64_t m, std::span<const ops::Projection> group) {
  // The grouped kernel takes one rank for the group (a template of the kernel).
  int64_t rank = 0;
  for (const ops::Projection& p : group)
    if (p.lora.active()) rank = p.lora.rank();
  // Batch-invariant mode: cuBLASLt's pinned plan at every row count (the grouped kernel runs
  // only up to kExpandMaxRows rows, so a decode step and a training pass would differ).
  bool grouped = m <= kExpandMaxRows && lora_expand_supported(int(rank)) && !b.batch_invariant();
  // Its epilogue moves two columns at a time.
  for (const ops::Projection& p : group)
    grouped = grouped && (!p.lora.active() || (p.lora.rank() == rank && p.out.dim(1) % 2 == 0));
  return grouped;
}

// out_i = base_i + scale_i xa_i B_i^T for the projections with an adapter, base_i out_i itself
// unless `bases` gives it (grouped launches only: a stacked GEMM's column slice, which then
// needs no copy into out_i first).
void lora_up(Backend& b, int64_t m, std::span<const ops::Projection> group,
             std::span<const LoraXa> xa, std::span<const ColumnSlice> bases = {}) {
  LoraExpandArgs e;
  e.m = int(m);
  const bool grouped = up_products_grouped(b, m, group);
  CHECK(grouped || bases.empty(), "lora_up: separate bases need the grouped launch");
  for (size_t i = 0; i < group.size(); ++i) {
    const ops::Projection& p = group[i];
    if (!p.lora.active()) continue;
    if (!grouped) {
      // A column slice of the stacked down products is copied out first: past ranks that are
      // not multiples of 8 its rows start off 16-byte alignment, which cuBLASLt's pinned
      // (batch-invariant) plans refuse.
      const int64_t r = p.lora.rank();
      const void* x = xa[i].data;
      if (xa[i].ld != r) {
        const TensorView own = b.arena().alloc({m, r}, DType::bf16);
        CUDA_CHECK(cudaMemcpy2DAsync(own.data, size_t(r) * 2, xa[i].data, size_t(xa[i].ld) * 2,
                                     size_t(r) * 2, size_t(m), cudaMemcpyDeviceToDevice,
                                     b.stream()));
        x = own.data;
      }
      GemmArgs g;
      g.mode = GemmScale::none;
      g.m = m;
      g.n = p.out.dim(1);
      g.k = r;
      g.w = p.lora.b.data;
      g.x = x;
      g.y = p.out.data;
      g.alpha = p.lora.scale;
      g.accumulate = true;
      b.gemm().run(g, b.stream());
      continue;
    }
    LoraExpandSegment& sg = e.seg[e.num_segments++];
    sg.xa = xa[i].data;
    sg.ld = xa[i].ld;
    sg.b = static_cast<const bf16*>(p.lora.b.data);
    sg.rank = int(p.lora.rank());
    sg.scale = p.lora.scale;
    sg.y = static_cast<bf16*>(p.out.data);
    sg.ldy = p.out.dim(1);
    sg.n = p.out.dim(1);
    if (!bases.empty()) {
      sg.base = bases[i].data;
      sg.ld_base = bases[i].ld;
    }
  }
  if (e.num_segments > 0) launch_lora_expand(e, b.stream());
}

// The group on one streaming launch that also computes its adapters' down products
// (StreamingDown); false, with nothing queued, where that does not apply.
bool run_streaming_with_down(Backend& b, const ops::LinearInput& in,
                             std::span<const ops::Projection> group,
                             std::span<const LinearWeight* const> ws,
                             std::span<const TensorView> outs, std::span<const LoraWeights> loras) {
  const LinearWeight stacked_a = stacked_lora_a(group);
  const int64_t m = in.rows(), k = in.cols(), rows = stacked_a.out_features();
  if (!b.caps().streaming_lora_down || stacked_a.weight.empty() || rows > kStreamingDownMaxRows ||
      in.x.dtype != DType::bf16 || in.x.dim(0) != m || in.x.dim(1) != k || in.x.strides[0] != k ||
      !aligned16(in.x.data) || !aligned16(stacked_a.weight.data))
    return false;
  const size_t mark = b.arena().mark();
  const TensorView xa_all = b.arena().alloc({m, rows}, DType::bf16);  // [M, sum r_i]
  const int64_t splits = round_up(k, kStreamingDownSlice) / kStreamingDownSlice;
  const TensorView partial = b.arena().alloc({splits, m, rows}, DType::f32);
  StreamingDown down;
  down.x = static_cast<const bf16*>(in.x.data);
  down.a = static_cast<const bf16*>(stacked_a.weight.data);
  down.rows = int(rows);
  down.xa = static_cast<bf16*>(xa_all.data);
  down.partial = static_cast<float*>(partial.data);
  down.sync = b.streaming_sync();
  LoraXa xa[kStreamingMaxSegments];
  int64_t col = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    xa[i] = {static_cast<const bf16*>(xa_all.data) + col, rows};
    col += group[i].lora.rank();
  }
  if (!run_streaming(b, in.q, ws, outs, loras, {xa, group.size()}, down)) {
    b.arena().rewind(mark);
    return false;
  }
  b.last_linear_path = "fp8 weight streaming, adapters' down and up products in the same launch";
  return true;  // the caller rewinds the arena after the launch is queued
}

}  // namespace

void linear_group(Backend& b, const ops::LinearInput& in, std::span<const ops::Projection> group,
                  const LinearWeight* stacked) {
  const size_t mark = b.arena().mark();
  const int64_t m = in.rows();
  const bool quantized = in.q.act != ActScaling::none;
  const size_t count = group.size();
  LoraXa xa[kStreamingMaxSegments];
  bool adapters = false;
  for (const ops::Projection& p : group) adapters = adapters || p.lora.active();
  const LinearWeight* ws[kStreamingMaxSegments];
  TensorView outs[kStreamingMaxSegments];
  LoraWeights loras[kStreamingMaxSegments];
  for (size_t i = 0; i < count; ++i) {
    ws[i] = group[i].weight;
    outs[i] = group[i].out;
    loras[i] = group[i].lora;
  }
  // The streaming kernel stages each adapter's B rows and xa in registers for ranks up to 64
  // (linear.cu, kLoraPerThread); larger ranks add their up products after it.
  bool fusable = true;
  for (const ops::Projection& p : group) fusable = fusable && p.lora.rank() <= 64;
  if (adapters && fusable && quantized &&
      run_streaming_with_down(b, in, group, {ws, count}, {outs, count}, {loras, count})) {
    b.arena().rewind(mark);
    return;
  }
  // The stacked weight only below kStackedMaxRows: not in batch-invariant mode, where a token's
  // GEMM must not depend on the step's row count.
  const bool stack =
      stacked != nullptr && count > 1 && m <= kStackedMaxRows && !b.batch_invariant();
  if (adapters) lora_down(b, in.x, group, {xa, count});
  if (quantized &&
      run_streaming(b, in.q, {ws, count}, {outs, count}, {loras, count},
                    fusable ? std::span<const LoraXa>(xa, count) : std::span<const LoraXa>())) {
    if (adapters && fusable) b.last_linear_path = "fp8 weight streaming, adapters in its epilogue";
    if (adapters && !fusable) lora_up(b, m, group, {xa, count});
    b.arena().rewind(mark);
    return;
  }
  if (stack) {
    const TensorView y = b.arena().alloc({m, stacked->out_features()}, DType::bf16);
    if (quantized)
      run_quantized(b, in.q, *stacked, y);
    else
      linear(b, in.x, *stacked, y);
    // Each output is its column slice of y; a grouped up-product launch reads the slices of
    // the projections with an adapter and writes their outputs (one pass over them, not a
    // copy and then an update).
    const bool expand = adapters && up_products_grouped(b, m, group);
    ColumnSlice bases[kStreamingMaxSegments];
    const bf16* from = static_cast<const bf16*>(y.data);
    for (size_t i = 0; i < count; ++i) {
      bases[i] = {from, y.dim(1)};
      const size_t width = size_t(outs[i].dim(1)) * 2;
      if (!expand || !group[i].lora.active())
        CUDA_CHECK(cudaMemcpy2DAsync(outs[i].data, width, from, size_t(y.dim(1)) * 2, width,
                                     size_t(m), cudaMemcpyDeviceToDevice, b.stream()));
      from += outs[i].dim(1);
    }
    if (adapters)
      lora_up(b, m, group, {xa, count},
              expand ? std::span<const ColumnSlice>(bases, count) : std::span<const ColumnSlice>());
    b.arena().rewind(mark);
    return;
  } else if (quantized && count == 2) {
    linear_pair(b, in.q, *ws[0], outs[0], *ws[1], outs[1]);
  } else {
    for (size_t i = 0; i < count; ++i) {
      if (quantized)
        run_quantized(b, in.q, *ws[i], outs[i]);
      else
        linear(b, in.x, *ws[i], outs[i]);
    }
  }
  if (adapters) lora_up(b, m, group, {xa, count});
  b.arena().rewind(mark);
}

size_t streaming_down_scratch_bytes(int64_t m, int64_t k, int64_t rows) {
  return arena_aligned(size_t(round_up(k, kStreamingDownSlice) / kStreamingDownSlice * m * rows) *
                       4);
}

size_t linear_scratch_bytes(const LinearWeight& w, int64_t m) {
  const int64_t n = w.out_features(), k = w.in_features();
  if (!w.is_fp8())
    return w.bias.empty() ? 0 : arena_aligned(size_t(m * n) * 4);  // fp32 biased output
  size_t bytes = arena_aligned(size_t(n * k) * 2);  // dequantized weight (fallback, weight-only)
  if (w.act != ActScaling::none) {
    bytes += quantized_bytes(w.act, m, k) + 256;                 // codes, scales, amax
    bytes += arena_aligned(size_t(m) * 4);                       // broadcast activation scale
    bytes += 2 * arena_aligned(size_t(round_up(m, 4) * n) * 4);  // padded / fp32 biased outputs
    bytes += arena_aligned(size_t(m * k) * 2);  // dequantized activation (fallback)
  }
  return bytes;
}

void quantize_weight(Backend& b, const TensorView& w, Fp8Scheme scheme, const TensorView& q,
                     const TensorView& scales) {
  const size_t mark = b.arena().mark();
  float* amax = nullptr;
  if (scheme == Fp8Scheme::tensor) {
    TensorView a = b.arena().alloc({1}, DType::f32);
    CUDA_CHECK(cudaMemsetAsync(a.data, 0, sizeof(float), b.stream()));
    amax = static_cast<float*>(a.data);
  }
  launch_quantize_weight(static_cast<const bf16*>(w.data), w.dim(0), w.dim(1), scheme_code(scheme),
                         static_cast<uint8_t*>(q.data), static_cast<float*>(scales.data), amax,
                         b.stream());
  b.arena().rewind(mark);
}

void prepare_linear(Context& ctx, LinearWeight& w, std::vector<DeviceBuffer>& storage) {
  Backend& b = *ctx.cuda;
  w.gemm_scales = w.scales;
  if (!w.is_fp8()) return;
  const int64_t n = w.out_features(), k = w.in_features();
  if (w.scheme == Fp8Scheme::block) {
    const int64_t nb = (n + 127) / 128, kb = (k + 127) / 128, ld = round_up(kb, 4);
    if (ld != kb) {  // cuBLASLt's K-major block scales need a leading dimension % 4 == 0
      storage.emplace_back(ctx, size_t(nb * ld) * 4);
      w.gemm_scales = storage.back().view({nb, ld}, DType::f32);
      launch_repack_block_scales(static_cast<const float*>(w.scales.data), nb, kb, ld,
                                 static_cast<float*>(w.gemm_scales.data), b.stream());
    }
  } else if (w.scheme == Fp8Scheme::tensor && w.act == ActScaling::token) {
    storage.emplace_back(ctx, size_t(n) * 4);
    w.gemm_scales = storage.back().view({n}, DType::f32);
    launch_broadcast(static_cast<const float*>(w.scales.data),
                     static_cast<float*>(w.gemm_scales.data), n, b.stream());
  }
}

double time_gemm(Backend& b, const LinearWeight& w, int64_t m, int iters) {
  const size_t mark = b.arena().mark();
  const int64_t n = w.out_features(), k = w.in_features();
  TensorView x = b.arena().alloc({m, k}, DType::bf16);
  launch_fill_uniform_bf16(static_cast<bf16*>(x.data), m * k, 7, 1.0f, b.stream());
  TensorView y = b.arena().alloc({round_up(m, 4), n}, DType::bf16);
  GemmArgs g;
  Path path = w.is_fp8() && w.act != ActScaling::none ? choose_path(b, w, w.act) : Path::bf16;
  ops::QuantizedActivation q;
  if (w.is_fp8() && w.act != ActScaling::none) {
    q = alloc_quantized(b, w.act, m, k);
    quantize(b, x, q, w.input_scale > 0 ? w.input_scale : 1.0f);
  }
  if (path != Path::bf16 && path != Path::dequantized) {
    g = fp8_args(b, path, q, w, y.data, false);
    if (!b.gemm().supported(g)) path = Path::dequantized;
  }
  if (path == Path::bf16 || path == Path::dequantized) {
    const void* wd = w.weight.data;
    if (w.is_fp8()) wd = dequantized_weight(b, w).data;
    g = bf16_args(x, wd, y, n);
  }
  for (int i = 0; i < 3; ++i) b.gemm().run(g, b.stream());  // warm-up (plans the algorithm)
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  CUDA_CHECK(cudaEventRecord(e0, b.stream()));
  for (int i = 0; i < iters; ++i) b.gemm().run(g, b.stream());
  CUDA_CHECK(cudaEventRecord(e1, b.stream()));
  CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  b.arena().rewind(mark);
  return double(ms) / std::max(iters, 1);
}

}  // namespace fp8rl::cuda
