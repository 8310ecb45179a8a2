#include "formats/safetensors.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/check.h"
#include "core/input_file.h"
#include "formats/safetensors_header.h"

namespace fp8rl {

namespace {

// Caps what a header may make us parse (Rust's MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

uint64_t load_le_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile);
  f->path_ = path;
  const InputFile in = InputFile::open(path, "safetensors file");
  const size_t size = size_t(in.size());
  CHECK(size >= 8, "safetensors file '{}': {} bytes, shorter than the 8-byte header length", path,
        size);

  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, in.fd(), 0);
  CHECK(map != MAP_FAILED, "safetensors file '{}': mmap of {} bytes failed: {}", path, size,
        std::strerror(errno));
  f->map_ = map;  // owned from here: the destructor unmaps when validation throws
  f->size_ = size;
  const auto* bytes = static_cast<const unsigned char*>(map);

  const uint64_t n = load_le_u64(bytes);
  CHECK(n <= kMaxHeaderBytes, "safetensors file '{}': header length {} above the limit of {}", path,
        n, kMaxHeaderBytes);
  CHECK(n <= size - 8,
        "safetensors file '{}': header length {} runs past the end of the {}-byte file", path, n,
        size);
  const std::string_view text(reinterpret_cast<const char*>(bytes + 8), size_t(n));
  SafetensorsHeader h = parse_safetensors_header(text, size - 8 - size_t(n), path);
  f->metadata_ = std::move(h.metadata);
  f->tensors_ = std::move(h.tensors);
  f->data_ = reinterpret_cast<const char*>(bytes) + 8 + n;
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

int64_t SafetensorsFile::metadata_count(const std::string& key, std::string_view what) const {
  auto it = metadata_.find(key);
  CHECK(it != metadata_.end(), "{} '{}': metadata '{}' is missing", what, path_, key);
  size_t used = 0;
  int64_t value = -1;
  try {
    value = std::stoll(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  CHECK(used == it->second.size() && value >= 0, "{} '{}': metadata '{}' = '{}' is not a count",
        what, path_, key, it->second);
  return value;
}

const SafetensorsTensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(
      tensors_.begin(), tensors_.end(), name,
      [](const SafetensorsTensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

TensorView SafetensorsFile::view(std::string_view name) const {
  const SafetensorsTensorInfo* info = find(name);
  CHECK(info != nullptr, "safetensors file '{}': no tensor '{}'", path_, name);
  return view(*info);
}

TensorView SafetensorsFile::view(const SafetensorsTensorInfo& info) const {
  CHECK(info.supported, "safetensors file '{}': tensor '{}': dtype {} is not supported", path_,
        info.name, info.dtype_str);
  return TensorView(const_cast<char*>(data_) + info.begin, info.dtype, info.shape);
}

}  // namespace fp8rl
