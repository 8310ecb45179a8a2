// Launchers of attention_backward.cu (the saving paged attention's log-sum-exp and the
// reference backward of paged attention) and attention_backward_mma.cu (the tiled tensor-core
// backward), on raw device pointers like kernels.h; a header of their own because every .cu
// file includes kernels.h and a change there rebuilds them all.
#pragma once

#include "ops/cuda/kernels.h"

namespace fp8rl::cuda {

// Paged bf16 pools [blocks, block_size, hkv, d] and the batch layout of AttentionArgs (paged).
struct AttentionBackwardArgs {
  const bf16* q;       // [t, hq, d]
  const bf16* k_pool;  // [blocks, block_size, hkv, d]
  const bf16* v_pool;
  const int32_t* cu_q;          // [num_seqs + 1]
  const int32_t* context_lens;  // [num_seqs]
  const int32_t* block_tables;  // [num_seqs, table_stride]
  int64_t table_stride, num_seqs, block_size;
  int64_t t, hq, hkv, d;
  float scale, softcap;
  int64_t window;
};

// The attention kernels' head dims.
inline constexpr int64_t kAttentionBackwardMaxD = 256;

// lse [t, hq] f32 = log sum_j exp(s_j) over each query row's visible keys (query i of sequence s
// at position context_lens[s] - n_s + i); rows outside [cu_q[0], cu_q[num_seqs]) get 0.
void launch_paged_attention_lse(const AttentionBackwardArgs& a, float* lse, cudaStream_t s);

// FlashAttention-2's backward for full prefills (context_lens[s] == n_s), ops/backward.h:
// out (bf16) and dout (f32) [t, hq, d], lse [t, hq]; delta [t * hq] f32 scratch; writes dq
// [t, hq, d], dk, dv [t, hkv, d] f32 (rows outside the sequences 0).
void launch_paged_attention_backward(const AttentionBackwardArgs& a, const bf16* out,
                                     const float* dout, const float* lse, float* delta, float* dq,
                                     float* dk, float* dv, cudaStream_t s);

// Sets the shared-memory limits of the tiled backward's kernels (once per device, like
// attention_init) and returns the head dims whose kernels fit the device's shared memory, bit i
// for head dim 32 << i (all four on sm_80 and sm_90; sm_86/89 lack the 104-146 KB the
// head dim 128 and 256 kernels take). A limit that does not fit is not an error.
unsigned attention_backward_mma_init();
// The tiled backward (attention_backward_mma.cu: FlashAttention-2's Algorithm 2 on mma.sync,
// deterministic) runs for head dims 32/64/128/256 among `fitting` (the mask above) and pools
// of kPagedBlockSize-slot blocks.
bool attention_backward_mma_supports(unsigned fitting, int64_t d, int64_t block_size);
// The same result as launch_paged_attention_backward within bf16 operand rounding: dout is
// rounded to bf16 once into dout_bf [t, hq, d] (scratch), delta [t * hq] f32 scratch is
// dout_bf . out; max_query_len >= every sequence's length (the launch grid's bound). 16-byte
// aligned operands, d % 8 == 0.
void launch_paged_attention_backward_mma(const AttentionBackwardArgs& a, int64_t max_query_len,
                                         const bf16* out, const float* dout, const float* lse,
                                         bf16* dout_bf, float* delta, float* dq, float* dk,
                                         float* dv, cudaStream_t s);

}  // namespace fp8rl::cuda
