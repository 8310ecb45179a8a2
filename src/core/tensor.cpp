#include "core/tensor.h"

#include <sys/resource.h>
#include <sys/sysinfo.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace fp8rl {

std::string_view device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

Shape::Shape(std::initializer_list<int64_t> d) { *this = from(d.begin(), d.end()); }

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[i] != o.dims[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

TensorView::TensorView(void* d, DType dt, Shape s, Device dev)
    : data(d), dtype(dt), shape(s), device(dev) {
  int64_t st = 1;
  for (int i = s.rank - 1; i >= 0; --i) {
    strides[i] = st;
    st *= s.dims[i];
  }
}

bool TensorView::is_contiguous() const {
  int64_t st = 1;
  for (int i = shape.rank - 1; i >= 0; --i) {
    if (shape.dims[i] != 1 && strides[i] != st) return false;
    st *= shape.dims[i];
  }
  return true;
}

TensorView TensorView::slice_rows(int64_t begin, int64_t end) const {
  CHECK(rank() >= 1 && begin >= 0 && begin <= end && end <= shape[0],
        "slice_rows [{}, {}) out of range for shape {}", begin, end, shape.str());
  TensorView v = *this;
  v.shape.dims[0] = end - begin;
  v.data = static_cast<char*>(data) + size_t(begin * strides[0]) * dtype_size(dtype);
  return v;
}

TensorView TensorView::reshape(Shape s) const {
  CHECK(is_contiguous(), "reshape of a non-contiguous view");
  CHECK(s.numel() == numel(), "reshape {} -> {} changes the element count", shape.str(), s.str());
  return TensorView(data, dtype, s, device);
}

void* aligned_alloc_bytes(size_t bytes) {
  CHECK(bytes <= SIZE_MAX - 63, "out of host memory: {} bytes requested", bytes);
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  CHECK(p != nullptr, "out of host memory: allocating {} failed ({} at most for this process)",
        bytes_text(bytes), bytes_text(host_memory_limit()));
  return p;
}

void aligned_free(void* p) { std::free(p); }

size_t host_memory_limit() {
  size_t limit = SIZE_MAX;
  struct rlimit as {};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) limit = size_t(as.rlim_cur);
  struct sysinfo info {};
  if (::sysinfo(&info) == 0) {
    const unsigned __int128 total =
        (unsigned __int128)(info.totalram + info.totalswap) * info.mem_unit;
    if (total > 0 && total < limit) limit = size_t(total);
  }
  return limit;
}

void check_host_bytes(size_t bytes, std::string_view what) {
  const size_t limit = host_memory_limit();
  CHECK(bytes <= limit, "{}: {} needed, more than the {} of host memory this process can have",
        what, bytes_text(bytes), bytes_text(limit));
}

std::string bytes_text(size_t bytes) {
  return fmt::format("{} bytes ({:.1f} GiB)", bytes, double(bytes) / double(size_t(1) << 30));
}

Tensor Tensor::empty(Shape shape, DType dtype) {
  CHECK(shape.numel() >= 0, "negative shape {}", shape.str());
  Tensor t;
  void* p = aligned_alloc_bytes(size_t(shape.numel()) * dtype_size(dtype));
  t.storage_ = std::shared_ptr<void>(p, aligned_free);
  t.view_ = TensorView(p, dtype, shape);
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.view_.data, 0, t.nbytes());
  return t;
}

}  // namespace fp8rl
