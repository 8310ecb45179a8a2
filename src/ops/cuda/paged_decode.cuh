// What the paged decode kernels share (paged_attention.cu: the CUDA-core kernels, the prefix
// kernels and the combine; paged_decode_mma.cu: the tensor-core kernel): the block shape, the
// chunking of a row's keys and the row's description.
#pragma once

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

namespace fp8rl::cuda {

constexpr int kDecodeThreads = 128;
constexpr int kDecodeTile = 64;  // keys per shared-memory tile
static_assert(kDecodeTile == 2 * kWarp, "the softmax step takes two scores per lane");
// Keys per chunk until the chunk count reaches the cap. 512 rather than 256: at 256 sequences
// of 384 keys (bench generate's mean) the halved block count and the combine left out take the
// tensor-core kernel from 0.129 to 0.110 ms a layer, and 8 sequences (a GRPO group) lose
// nothing (bench grpo, docs/PERFORMANCE.md).
constexpr int kDecodeMinChunk = 512;
// A shared prefix and the keys after it each take at most half the chunks of a row.
constexpr int kPrefixMaxSplits = kPagedDecodeMaxSplits / 2;

// Keys per chunk for a range of `len` keys: multiples of kDecodeMinChunk, at most `cap`
// chunks.
__host__ __device__ inline int decode_chunk(int len, int cap) {
  const int per = int(ceil_div(len, cap));
  return int(ceil_div(per < 1 ? 1 : per, kDecodeMinChunk)) * kDecodeMinChunk;
}

// The visible keys [lo, pos] of sequence seq's one new query (lo past its shared prefix, if
// it has one), or false if it has none. Its partials are slots [slot0, slot0 + splits) of the
// row's `slots`; slots [0, slot0) are the prefix kernel's.
struct DecodeRow {
  int row, pos, lo, chunk, splits, slot0, slots;
};
__device__ __forceinline__ bool decode_row(const AttentionArgs& a, int seq, DecodeRow& r) {
  r.row = a.cu_q[seq];
  if (a.cu_q[seq + 1] - r.row != 1) return false;
  r.pos = a.context_lens[seq] - 1;
  const int shared = a.prefix_len_of_seq != nullptr ? a.prefix_len_of_seq[seq] : 0;
  if (shared > 0) {  // the host sets prefixes only below the position and without a window
    r.lo = shared;
    const int len = r.pos - r.lo + 1;
    r.chunk = decode_chunk(len, kPrefixMaxSplits);
    r.splits = int(ceil_div(len, r.chunk));
    r.slot0 = int(ceil_div(shared, decode_chunk(shared, kPrefixMaxSplits)));
  } else {
    r.lo = a.window > 0 ? max(0, r.pos - int(a.window) + 1) : 0;
    const int len = r.pos - r.lo + 1;
    r.chunk = decode_chunk(len, kPagedDecodeMaxSplits);
    r.splits = int(ceil_div(len, r.chunk));
    r.slot0 = 0;
  }
  r.slots = r.slot0 + r.splits;
  return true;
}

// The tensor-core decode kernel (paged_decode_mma.cu) takes bf16 and FP8 pools with head dims up to
// this (D = 256's O and Q fragments would not fit the registers of 3 blocks an SM); it computes
// the CUDA-core kernel's items (chunk, KV head, sequence) and partials, several items a block
// when a.decode_sms is set.
constexpr int kMmaDecodeMaxD = 128;
cudaError_t paged_decode_mma_init(int d);  // the kernel's smem limits; nothing for other d
DecodeGrid launch_paged_decode_mma(const AttentionArgs& a, int max_splits, int slots, float* part_o,
                                   float* part_ml, cudaStream_t s);

}  // namespace fp8rl::cuda
