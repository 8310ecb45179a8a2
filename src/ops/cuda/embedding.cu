// Embedding gather: out[t, :] = table[ids[t], :] * scale (Gemma scales by sqrt(hidden)).
#include "ops/cuda/row_quant.cuh"

namespace fp8rl::cuda {

namespace {

// One block per token; ids outside the table give a NaN row, never a read out of bounds.
template <bool VEC>
__global__ void __launch_bounds__(256)
    embedding_kernel(const int32_t* __restrict__ ids, const bf16* __restrict__ table,
                     int64_t vocab, int64_t h, float scale, bf16* __restrict__ out) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  const bool ok = id >= 0 && id < vocab;
  const bf16* src = table + (ok ? int64_t(id) : 0) * h;
  float v[8];
  for (int64_t j = int64_t(threadIdx.x) * kChunk; j < h; j += 256 * kChunk) {
    load_chunk<VEC>(src, j, h, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = ok ? v[i] * scale : __int_as_float(0x7fc00000);
    store_chunk<VEC>(out + t * h, j, h, v);
  }
}

}  // namespace

void launch_embedding(const int32_t* ids, int64_t t, const bf16* table, int64_t vocab, int64_t h,
                      float scale, bf16* out, cudaStream_t s) {
  if (t == 0) return;
  const bool vec = h % 8 == 0 && (reinterpret_cast<uintptr_t>(table) & 15) == 0 &&
                   (reinterpret_cast<uintptr_t>(out) & 15) == 0;
  if (vec)
    embedding_kernel<true><<<unsigned(t), 256, 0, s>>>(ids, table, vocab, h, scale, out);
  else
    embedding_kernel<false><<<unsigned(t), 256, 0, s>>>(ids, table, vocab, h, scale, out);
  FP8RL_LAUNCH_CHECK("embedding");
}

}  // namespace fp8rl::cuda
