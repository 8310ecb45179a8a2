// Tensor views (shape, strides, dtype, device) and owning tensors.
//
// A TensorView never owns memory; a Tensor owns its storage and hands out views. Strides are
// in elements. Ops take views, so the same op code serves weights in an mmap'd checkpoint,
// activations in an arena and tensors that own their memory.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "core/check.h"
#include "core/dtype.h"

namespace fp8rl {

enum class Device : uint8_t { cpu, cuda };
std::string_view device_name(Device d);

inline constexpr int kMaxDims = 6;

struct Shape {
  std::array<int64_t, kMaxDims> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  template <typename It>
  static Shape from(It begin, It end) {
    Shape s;
    for (It it = begin; it != end; ++it) {
      CHECK(s.rank < kMaxDims, "tensor rank above {}", kMaxDims);
      s.dims[s.rank++] = int64_t(*it);
    }
    return s;
  }
  int64_t operator[](int i) const { return dims[i < 0 ? rank + i : i]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  std::string str() const;  // "[2, 3]"
};

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  std::array<int64_t, kMaxDims> strides{};  // elements
  Device device = Device::cpu;

  TensorView() = default;
  // A contiguous row-major view.
  TensorView(void* data, DType dtype, Shape shape, Device device = Device::cpu);

  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  int rank() const { return shape.rank; }
  int64_t dim(int i) const { return shape[i]; }
  bool is_contiguous() const;
  bool empty() const { return data == nullptr; }

  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  // Rows [begin, end) of the outermost dimension.
  TensorView slice_rows(int64_t begin, int64_t end) const;
  // The same memory with another contiguous shape of equal numel.
  TensorView reshape(Shape s) const;
};

// A tensor that owns 64-byte aligned host memory. CUDA storage belongs to the CUDA context.
class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(Shape shape, DType dtype);
  static Tensor zeros(Shape shape, DType dtype);

  const TensorView& view() const { return view_; }
  TensorView& view() { return view_; }
  operator const TensorView&() const { return view_; }
  template <typename T>
  T* ptr() const {
    return view_.ptr<T>();
  }
  const Shape& shape() const { return view_.shape; }
  DType dtype() const { return view_.dtype; }
  int64_t numel() const { return view_.numel(); }
  size_t nbytes() const { return view_.nbytes(); }
  bool empty() const { return view_.empty(); }

 private:
  std::shared_ptr<void> storage_;
  TensorView view_;
};

// 64-byte aligned, zero-size safe; out of memory is an fp8rl::Error naming the bytes.
void* aligned_alloc_bytes(size_t bytes);
void aligned_free(void* p);

// The most host memory this process can hold: the smaller of its address-space limit
// (RLIMIT_AS) and the machine's RAM plus swap.
size_t host_memory_limit();
// An fp8rl::Error, before anything is allocated, when `bytes` of host memory cannot be had (more
// than host_memory_limit()): "`what`: N bytes (G GiB) needed, more than ..." (`what` names
// the settings that size it, so that the message says what to lower).
void check_host_bytes(size_t bytes, std::string_view what);
// "1234 bytes (1.2 GiB)" for messages.
std::string bytes_text(size_t bytes);

}  // namespace fp8rl
