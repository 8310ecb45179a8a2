// Tensor views -> the sampler kernel (ops/sampling.h): the working rows from the device arena.
#include "ops/cuda/backend.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/sampling_launch.h"

namespace fp8rl::cuda {

void sample(Backend& b, const TensorView& logits, const TensorView& rows, const TensorView& history,
            int top_logprobs, const ops::SampleOutput& out) {
  ArenaScope scope(b.arena());
  const int64_t r = rows.dim(0), v = logits.dim(1);
  const TensorView work = b.arena().alloc({r, v}, DType::f32);
  SampleArgs a{};
  a.logits = static_cast<const float*>(logits.data);
  a.v = v;
  a.rows = static_cast<const ops::SampleRow*>(rows.data);
  a.r = r;
  a.history = history.empty() ? nullptr : static_cast<const int32_t*>(history.data);
  a.work = static_cast<float*>(work.data);
  a.top_k_logprobs = top_logprobs;
  a.tokens = static_cast<int32_t*>(out.tokens.data);
  a.logprobs = static_cast<float*>(out.logprobs.data);
  a.processed =
      out.processed_logprobs.empty() ? nullptr : static_cast<float*>(out.processed_logprobs.data);
  a.top_ids = top_logprobs > 0 ? static_cast<int32_t*>(out.top_ids.data) : nullptr;
  a.top_logprobs = top_logprobs > 0 ? static_cast<float*>(out.top_logprobs.data) : nullptr;
  launch_sample(a, b.stream());
  launch_tempered_logprobs(a, b.stream());
}

size_t sample_scratch_bytes(int64_t r, int64_t v) {
  return size_t(r * v) * sizeof(float) + 256;
}

}  // namespace fp8rl::cuda
