#include "ops/columns.h"

#include <cstring>

#include "core/check.h"
#if FP8RL_HAVE_CUDA
#include "ops/cuda/backend.h"
#endif

namespace fp8rl::ops {

TensorView column_heads(const TensorView& src, int64_t col, int64_t heads, int64_t d) {
  CHECK(src.rank() == 2 && src.strides[1] == 1 && col >= 0 && heads > 0 && d > 0 &&
            col + heads * d <= src.dim(1),
        "column_heads: columns [{}, {}) of {}", col, col + heads * d, src.shape.str());
  TensorView v(static_cast<char*>(src.data) + size_t(col) * dtype_size(src.dtype), src.dtype,
               {src.dim(0), heads, d}, src.device);
  v.strides[0] = src.strides[0];
  return v;
}

void split_columns(Context& ctx, const TensorView& src, std::initializer_list<TensorView> parts) {
  CHECK(src.rank() == 2 && src.is_contiguous() && src.device == ctx.device,
        "split_columns: src must be a contiguous matrix on {}, got {}", device_name(ctx.device),
        src.shape.str());
  const int64_t rows = src.dim(0);
  int64_t cols = 0;
  for (const TensorView& p : parts) {
    CHECK(p.rank() == 2 && p.dim(0) == rows && p.is_contiguous() && p.dtype == src.dtype &&
              p.device == src.device,
          "split_columns: part {} {} of {} {}", p.shape.str(), dtype_name(p.dtype), src.shape.str(),
          dtype_name(src.dtype));
    cols += p.dim(1);
  }
  CHECK(cols == src.dim(1), "split_columns: parts of {} columns for {}", cols, src.shape.str());
  if (ctx.dry_run || rows == 0) return;
  const size_t es = dtype_size(src.dtype), pitch = size_t(src.dim(1)) * es;
  size_t offset = 0;
  for (const TensorView& p : parts) {
    const size_t width = size_t(p.dim(1)) * es;
    const char* from = static_cast<const char*>(src.data) + offset;
    if (ctx.device == Device::cpu) {
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(static_cast<char*>(p.data) + size_t(r) * width, from + size_t(r) * pitch,
                    width);
    } else {
#if FP8RL_HAVE_CUDA
      CUDA_CHECK(cudaMemcpy2DAsync(p.data, width, from, pitch, width, size_t(rows),
                                   cudaMemcpyDeviceToDevice, ctx.cuda->stream()));
#else
      RAISE("split_columns: this build has no CUDA backend (built without nvcc)");
#endif
    }
    offset += width;
  }
}

}  // namespace fp8rl::ops
