// NumPy .npy files (format 1.0, 2.0 and 3.0): what `fp8rl logits --out` writes and what tests
// compare against goldens saved by numpy.
#pragma once

#include <string>
#include <string_view>

#include "core/tensor.h"

namespace fp8rl {

// f32 '<f4', f16 '<f2', i32 '<i4', i64 '<i8', little-endian C order; format 1.0, or 2.0 when
// the header does not fit 1.0's 16-bit length. bf16 and fp8 have no numpy dtype: an error.
// Strided views are written in logical (row-major) order.
void write_npy(const std::string& path, const TensorView& t);
// Validates magic, version, the header dict (descr, fortran_order False, shape) and the data
// size against the file. Supports '<f4', '<f2', '<i4', '<i8'; other dtypes (big-endian, bool,
// f8, objects, ...) are an error naming them.
Tensor read_npy(const std::string& path);
// The same checks on the bytes of a whole .npy file held in memory; `what` names it in errors.
Tensor parse_npy(std::string_view bytes, const std::string& what);

}  // namespace fp8rl
