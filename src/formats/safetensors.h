// The safetensors container: reading (mmap, zero-copy views), sharded checkpoints, writing.
//
// Layout: u64 little-endian header length N, N bytes of JSON header, then the data buffer
// (the format's own specification, huggingface/safetensors). The reader trusts nothing in the file:
// every failure is an fp8rl::Error naming the file and, where there is one, the tensor, because a
// checkpoint off the Hub is user input.
//
// Alignment: a view's data pointer is only as aligned as the file makes it. Writers that pad
// the header to 8 bytes (ours, the Rust one) and order tensors by descending element size give
// element-aligned data, but a valid file need not, so CPU code reading views must load through
// memcpy or otherwise unaligned-safe access.
//
// Views into a mapping are read-only memory (PROT_READ): TensorView::data is non-const for
// uniformity only, and writing through it faults.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace fp8rl {

struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype_str;     // as in the header, e.g. "F8_E4M3", "BOOL", "F64"
  bool supported = false;    // dtype maps to fp8rl::DType (F32,BF16,F16,F8_E4M3,F8_E5M2,I32,I64)
  DType dtype = DType::f32;  // valid when supported
  Shape shape;
  size_t begin = 0, end = 0;  // byte range within the data buffer
  size_t nbytes() const { return end - begin; }
};

// One .safetensors file, mmap'd read-only, validated completely at open.
class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();  // munmap

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The metadata entry `key` as a count (a non-negative integer); an error naming `what` (the
  // state the file holds) when it is missing or not one.
  int64_t metadata_count(const std::string& key, std::string_view what) const;
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }  // by name
  const SafetensorsTensorInfo* find(std::string_view name) const;  // nullptr if absent
  // Zero-copy into the mapping; throws if absent or dtype unsupported.
  TensorView view(std::string_view name) const;
  TensorView view(const SafetensorsTensorInfo& info) const;
  size_t file_size() const { return size_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  const char* data_ = nullptr;  // start of the data buffer
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsTensorInfo> tensors_;
};

// A checkpoint directory: model.safetensors, or shards through model.safetensors.index.json
// (weight_map only; total_size ignored; empty metadata accepted). Also accepts a single file
// path, or the path of an index (*.index.json). Every tensor resolves through the index; a tensor
// in the index but missing from its shard, a shard that does not exist, a tensor in a shard but not
// in the index, or the same name in two shards is an error naming it. model.safetensors wins over
// an index when both exist, as in transformers.
class Checkpoint {
 public:
  static Checkpoint open(const std::string& dir_or_file);
  // Whether directory `dir` names weights (model.safetensors, or the index of shards): what
  // open() would look for, without opening anything.
  static bool present(const std::string& dir);
  std::vector<std::string> names() const;  // sorted
  bool contains(std::string_view name) const;
  // Throws naming the tensor if absent.
  const SafetensorsTensorInfo& info(std::string_view name) const;
  TensorView view(std::string_view name) const;
  const std::string& file_of(std::string_view name) const;
  size_t total_bytes() const;  // sum of tensor byte sizes
  const std::string& root() const { return root_; }
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  struct Entry {
    const SafetensorsTensorInfo* info;
    size_t file;
  };
  const Entry& entry(std::string_view name) const;
  std::string root_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, Entry, std::less<>> entries_;
};

// Writer: tensors are copied out at write(), so the viewed memory must stay valid until then;
// views must be CPU and contiguous. Data is laid out by descending element size, then name,
// after a header padded to 8 bytes, so every tensor is aligned to its element size.
class SafetensorsWriter {
 public:
  void add(std::string name, const TensorView& t);  // duplicate name is an error
  // The same for a tensor the writer keeps alive until it is destroyed (a host copy made for
  // the write, e.g. of device memory).
  void add(std::string name, Tensor t);
  void add_metadata(std::string key, std::string value);  // "format": "pt" is added by default
  size_t bytes() const { return bytes_; }  // sum of tensor data bytes, header excluded
  // Header padded with spaces to a multiple of 8; written to path + ".tmp" then renamed.
  void write(const std::string& path) const;

 private:
  std::map<std::string, TensorView> tensors_;
  std::vector<Tensor> owned_;  // storage of the tensors added by value
  std::map<std::string, std::string> metadata_{{"format", "pt"}};
  size_t bytes_ = 0;
};

// Writes tensors into dir as model.safetensors, or as model-0000i-of-0000n.safetensors +
// model.safetensors.index.json (metadata.total_size, weight_map) when they exceed
// max_shard_bytes. Shards are filled in the given order. A stale model.safetensors or index
// of the other layout is removed so that Checkpoint::open sees what was written.
void write_checkpoint(const std::string& dir,
                      const std::vector<std::pair<std::string, TensorView>>& tensors,
                      size_t max_shard_bytes = 5ull << 30);

// Bits per element of a safetensors dtype string (4 for F4, 6 for F6_*), 0 if unknown.
int safetensors_dtype_bits(std::string_view dtype_str);

}  // namespace fp8rl
