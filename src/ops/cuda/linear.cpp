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

#include "ops/cuda/backend.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/kernels.h"
#include "quant/fp8.h"

namespace fp8rl::cuda {

namespace {

int64_t round_up(int64_t a, int64_t b) {
  return (a + b - 1) / b * b;
}
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
// Hence kHalvesMinK. When the consumer adds the halves itself (linear_split: the residual add
// of o_proj's and down_proj's outputs), the sum costs nothing and K = 4,096 pays too.
constexpr int64_t kHalvesMinK = 8192;
constexpr int64_t kSplitMinK = 4096;

bool concurrency_on(const Backend& b) {
  return b.caps().concurrent_linears && !b.batch_invariant();
}

int64_t gemm_tiles(int64_t m, int64_t n) {  // the 128x128 output tiles of OUTER_VEC_32F
  return ((m + 127) / 128) * ((n + 127) / 128);
}

// Plans that cuBLASLt supports and that never touch the shared workspace.
bool concurrent_plans(Backend& b, std::initializer_list<GemmArgs> gs) {
  for (const GemmArgs& g : gs)
    if (!b.gemm().supported(g) || b.gemm().workspace_used(g) != 0) return false;
  return true;
}

// out = x W^T as two K halves on two streams, when a whole GEMM fills at most half the SMs.
// False, with nothing queued, when that does not apply. With `split` ([2, M, N] f32) the halves
// stay there unsummed (linear_split); else they go through scratch (2 M N fp32, within
// linear_scratch_bytes' two fp32 outputs) and sum_round writes out.
bool run_k_halves(Backend& b, const ops::QuantizedActivation& x, const LinearWeight& w,
                  const TensorView& out, const TensorView* split = nullptr) {
  const int64_t m = x.rows, n = w.out_features(), k = w.in_features();
  if (!concurrency_on(b) || out.dtype != DType::bf16 || k % 32 != 0 ||
      k < (split != nullptr ? kSplitMinK : kHalvesMinK) ||
      2 * gemm_tiles(m, n) > b.caps().multiprocessors)
    return false;
  const size_t mark = b.arena().mark();
  const TensorView parts =  // [2, M, N] K-half sums
      split != nullptr ? *split : b.arena().alloc({2, m, n}, DType::f32);
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
  if (split != nullptr) {
    b.last_linear_path = "fp8 OUTER_VEC_32F, K halves on two streams, left unsummed";
    return true;
  }
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

bool linear_split(Backend& b, const ops::QuantizedActivation& x, const LinearWeight& w,
                  const TensorView& out, const TensorView& parts) {
  const size_t mark = b.arena().mark();
  const bool outer = choose_path(b, w, x.act) == Path::outer;
  if (outer && run_k_halves(b, x, w, out, &parts)) {
    b.arena().rewind(mark);
    return true;
  }
  run_quantized(b, x, w, out);
  return false;
}

bool linear_split(Backend& b, const TensorView& x, const LinearWeight& w, const TensorView& out,
                  const TensorView& parts) {
  if (!w.is_fp8() || w.act == ActScaling::none || choose_path(b, w, w.act) != Path::outer) {
    linear(b, x, w, out);
    return false;
  }
  const size_t mark = b.arena().mark();
  const ops::QuantizedActivation q = alloc_quantized(b, w.act, x.dim(0), x.dim(1));
  quantize(b, x, q, w.input_scale);
  const bool split = linear_split(b, q, w, out, parts);
  b.arena().rewind(mark);
  return split;
}

// ---- Pending outputs (ops::linear_pending)
//
// At a decode step's 256 rows cuBLASLt's one OUTER_VEC_32F kernel (128x128 tiles: 96 CTAs for
// the stacked q/k/v's N = 6,144) is slower than its SCALAR_32F kernel of another tile: 13.1
// against 11.5 us in a graph replay on an H200 (gemm_sweep). SCALAR with unit scales and alpha
// = 2^-e gives the raw sums in fp16, and rope_store_kv scales them as it loads them: 0.4-0.7%
// off bench generate's FP8-row step (docs/PERFORMANCE.md). Gate/up were measured the same way
// and lost: one GEMM over a stacked weight was slower end to end than the OUTER_VEC pair on two
// streams, and slower again with its scales left to the fused activation, whose reads of the
// 2 I column scales per row cost more than the GEMM saved. Not in batch-invariant mode: whether
// a step's rows take this path depends on its row count.

namespace {
GemmArgs pending_args(Backend& b, const ops::QuantizedActivation& x, const LinearWeight& w,
                      void* raw, float inv_alpha) {
  GemmArgs g;
  g.mode = GemmScale::scalar;
  g.m = x.rows;
  g.n = w.out_features();
  g.k = w.in_features();
  g.w = w.weight.data;
  g.x = x.codes.data;
  g.y = raw;
  g.y_f16 = true;
  g.alpha = 1.0f / inv_alpha;  // a power of two: exact
  g.w_scale = g.x_scale = b.unit_scale();
  return g;
}
}  // namespace

bool linear_pending_supported(Backend& b, const ops::QuantizedActivation& x,
                              const LinearWeight& w) {
  if (b.batch_invariant() || !b.caps().pending_linears || !b.caps().fp8_tensor ||
      w.scheme != Fp8Scheme::row || x.act != ActScaling::token || !w.bias.empty() ||
      choose_path(b, w, x.act) != Path::outer || w.in_features() > (int64_t(1) << 20))
    return false;
  return b.gemm().supported(pending_args(b, x, w, nullptr, 1.0f));
}

void linear_pending(Backend& b, const ops::QuantizedActivation& x, const LinearWeight& w,
                    const TensorView& raw, float inv_alpha) {
  b.gemm().run(pending_args(b, x, w, raw.data, inv_alpha), b.stream());
  b.last_linear_path = "fp8 SCALAR_32F, pending row scales (fp16 raw sums)";
}

void linear_pair(Backend& b, const ops::QuantizedActivation& x, const LinearWeight& w0,
                 const TensorView& out0, const LinearWeight& w1, const TensorView& out1) {
  auto direct = [&](const LinearWeight& w, const TensorView& out) {
    return choose_path(b, w, x.act) == Path::outer && w.bias.empty() && out.dtype == DType::bf16;
  };
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
