// The sampler kernel's launcher on raw device pointers (sampling.cu), called by sampling.cpp
// after the checks of ops/sampling.cpp. CUDA runtime types only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/sample_row.h"

namespace fp8rl::cuda {

struct SampleArgs {
  const float* logits;  // [L, v]
  int64_t v;
  const ops::SampleRow* rows;  // [r]
  int64_t r;
  const int32_t* history;  // [*]
  float* work;             // [r, v] scratch
  int top_k_logprobs;      // K
  int32_t* tokens;         // [r]
  float* logprobs;         // [r]
  float* processed;        // [r] or null
  int32_t* top_ids;        // [r, K] or null
  float* top_logprobs;     // [r, K] or null
};

void launch_sample(const SampleArgs& a, cudaStream_t s);
// a.processed[i] = log softmax(logits[rows[i].logit_row] / T)[tokens[i]] with the
// cross-entropy's log-softmax (backward.cu), after launch_sample wrote the tokens.
void launch_tempered_logprobs(const SampleArgs& a, cudaStream_t s);

}  // namespace fp8rl::cuda
