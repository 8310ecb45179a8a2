// The embedding gather on the CPU (the reference of ops/cuda/embedding.cu): out[t, :] =
// table[ids[t], :] * scale. The table is read as the bf16 copy Model::to_device uploads, and
// with Rounding::bf16 each output is rounded as the CUDA kernel stores it.
#include "core/parallel.h"
#include "ops/cpu/cpu_ops.h"

namespace fp8rl::ops::cpu {

void embedding(std::span<const int32_t> ids, const TensorView& table, float scale,
               const TensorView& out, Rounding r) {
  const int64_t h = table.dim(1);
  float* o = out.ptr<float>();
  parallel_for(0, int64_t(ids.size()), [&](int64_t t) {
    const size_t base = size_t(ids[size_t(t)]) * size_t(h);
    for (int64_t j = 0; j < h; ++j)
      o[t * h + j] =
          round_as(r, round_as(r, load_as_f32(table.data, table.dtype, base + size_t(j))) * scale);
  });
}

}  // namespace fp8rl::ops::cpu
