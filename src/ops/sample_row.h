// The per-row parameters of the sampler op (ops/sampling.h), in a header of its own with no
// dependencies so that the CUDA kernel (ops/cuda/sampling.cu) reads the same struct.
#pragma once

#include <cstdint>
#include <type_traits>

namespace fp8rl::ops {

// One row to sample. An array of these lives on ctx.device, passed as an i32 tensor
// [R, kSampleRowWords] (the bytes of the structs; i32 because core has no u8 dtype and every
// field is a multiple of 4 bytes).
struct SampleRow {
  int32_t logit_row = 0;  // row of `logits` (several samples of one prompt may share it)
  float temperature = 1.0f;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  int32_t top_k = 0;     // <= 0 or >= V: off
  uint64_t stream = 0;   // the sequence's random stream (from seed, request, sample index)
  int64_t position = 0;  // position of the token being sampled: the counter within the stream
  int32_t history_begin = 0, history_end = 0;  // ids for repetition_penalty, in `history`
  int32_t banned_begin = 0, banned_end = 0;    // ids that must not be sampled now
};
static_assert(std::is_standard_layout_v<SampleRow> && std::is_trivially_copyable_v<SampleRow>);
static_assert(sizeof(SampleRow) == 56 && sizeof(SampleRow) % 4 == 0);
inline constexpr int64_t kSampleRowWords = sizeof(SampleRow) / 4;

// Fixed-point scale of the top-p masses (ops/sampling.h (d)): w_i = floor(e_i * 2^40).
inline constexpr float kSampleMassScale = 1099511627776.0f;  // 2^40

}  // namespace fp8rl::ops
