// Operand checks and backend dispatch of ops::sample (ops/sampling.h).
#include "ops/sampling.h"

#include "core/check.h"
#include "ops/cpu/cpu_ops.h"
#if FP8RL_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace fp8rl::ops {

namespace {

void check_view(const Context& ctx, const TensorView& t, DType dtype, int rank, const char* what) {
  CHECK(t.dtype == dtype && t.rank() == rank && t.is_contiguous() && t.device == ctx.device,
        "sample: {} must be a contiguous {} tensor of rank {} on {}, got {} {} on {}", what,
        dtype_name(dtype), rank, device_name(ctx.device), dtype_name(t.dtype), t.shape.str(),
        device_name(t.device));
}

// Host-side checks of the rows' contents (CPU only: device rows are built on the host).
void check_rows(const TensorView& rows, int64_t l, int64_t v, const TensorView& history) {
  const auto* rs = reinterpret_cast<const SampleRow*>(rows.data);
  const int64_t h = history.empty() ? 0 : history.numel();
  auto range_ok = [&](int32_t b, int32_t e) { return 0 <= b && b <= e && e <= h; };
  for (int64_t i = 0; i < rows.dim(0); ++i) {
    const SampleRow& r = rs[i];
    CHECK(r.logit_row >= 0 && r.logit_row < l, "sample: row {} reads logit row {} of {}", i,
          r.logit_row, l);
    CHECK(r.temperature >= 0.0f && r.top_p > 0.0f && r.top_p <= 1.0f && r.min_p >= 0.0f &&
              r.min_p <= 1.0f && r.repetition_penalty > 0.0f,
          "sample: row {} has temperature {} top_p {} min_p {} repetition_penalty {}", i,
          r.temperature, r.top_p, r.min_p, r.repetition_penalty);
    CHECK(range_ok(r.history_begin, r.history_end) && range_ok(r.banned_begin, r.banned_end),
          "sample: row {} history [{}, {}) banned [{}, {}) outside history [0, {})", i,
          r.history_begin, r.history_end, r.banned_begin, r.banned_end, h);
  }
  for (int64_t j = 0; j < h; ++j) {
    const int32_t id = history.ptr<const int32_t>()[j];
    CHECK(id >= 0 && id < v, "sample: history id {} outside the vocabulary [0, {})", id, v);
  }
}

}  // namespace

void sample(Context& ctx, const TensorView& logits, const TensorView& rows,
            const TensorView& history, int top_logprobs, const SampleOutput& out) {
  check_view(ctx, logits, DType::f32, 2, "logits");
  check_view(ctx, rows, DType::i32, 2, "rows");
  CHECK(rows.dim(1) == kSampleRowWords, "sample: rows must be [R, {}] (SampleRow), got {}",
        kSampleRowWords, rows.shape.str());
  CHECK(reinterpret_cast<uintptr_t>(rows.data) % alignof(SampleRow) == 0,
        "sample: rows must be {}-byte aligned (SampleRow)", alignof(SampleRow));
  const int64_t r = rows.dim(0), v = logits.dim(1);
  CHECK(v > 0 && v < (int64_t(1) << 31), "sample: vocabulary {} out of range", v);
  if (!history.empty()) check_view(ctx, history, DType::i32, 1, "history");
  CHECK(top_logprobs >= 0 && top_logprobs <= kMaxTopLogprobs && top_logprobs <= v,
        "sample: top_logprobs {} outside [0, {}]", top_logprobs, kMaxTopLogprobs);
  check_view(ctx, out.tokens, DType::i32, 1, "tokens");
  check_view(ctx, out.logprobs, DType::f32, 1, "logprobs");
  CHECK(out.tokens.dim(0) == r && out.logprobs.dim(0) == r,
        "sample: {} rows, tokens {} logprobs {}", r, out.tokens.shape.str(),
        out.logprobs.shape.str());
  if (!out.processed_logprobs.empty()) {
    check_view(ctx, out.processed_logprobs, DType::f32, 1, "processed_logprobs");
    CHECK(out.processed_logprobs.dim(0) == r, "sample: processed_logprobs {} for {} rows",
          out.processed_logprobs.shape.str(), r);
  }
  if (top_logprobs > 0) {
    check_view(ctx, out.top_ids, DType::i32, 2, "top_ids");
    check_view(ctx, out.top_logprobs, DType::f32, 2, "top_logprobs");
    CHECK(out.top_ids.dim(0) == r && out.top_ids.dim(1) == top_logprobs &&
              out.top_logprobs.shape == out.top_ids.shape,
          "sample: top_ids {} top_logprobs {} for [{}, {}]", out.top_ids.shape.str(),
          out.top_logprobs.shape.str(), r, top_logprobs);
  }
  if (r == 0) return;
  if (dry_run_scratch(ctx, sample_scratch_bytes(ctx, r, v))) return;
  if (ctx.device == Device::cpu) {
    CHECK(ctx.scratch != nullptr, "sample: CPU context without a scratch arena");
    check_rows(rows, logits.dim(0), v, history);
    cpu::sample(*ctx.scratch, logits, rows, history, top_logprobs, out);
    return;
  }
#if FP8RL_HAVE_CUDA
  CHECK(ctx.cuda != nullptr, "sample: CUDA context without a backend");
  cuda::ProfileRange range(*ctx.cuda, "sample");
  cuda::sample(*ctx.cuda, logits, rows, history, top_logprobs, out);
#else
  RAISE("sample: this build has no CUDA backend (built without nvcc)");
#endif
}

size_t sample_scratch_bytes(const Context& ctx, int64_t r, int64_t v) {
#if FP8RL_HAVE_CUDA
  if (ctx.device == Device::cuda) return cuda::sample_scratch_bytes(r, v);
#endif
  (void)ctx;
  return cpu::sample_scratch_bytes(r, v);
}

}  // namespace fp8rl::ops
