#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/check.h"
#include "core/output_file.h"
#include "formats/safetensors.h"

namespace fp8rl {

void SafetensorsWriter::add(std::string name, const TensorView& t) {
  CHECK(name != "__metadata__", "safetensors writer: '__metadata__' is not a tensor name");
  CHECK(t.device == Device::cpu, "safetensors writer: tensor '{}' is on {}, not the CPU", name,
        device_name(t.device));
  CHECK(t.is_contiguous(), "safetensors writer: tensor '{}' is not contiguous", name);
  CHECK(t.numel() >= 0, "safetensors writer: tensor '{}' has negative shape {}", name,
        t.shape.str());
  CHECK(t.numel() == 0 || t.data != nullptr, "safetensors writer: tensor '{}' has no data", name);
  const size_t nbytes = t.nbytes();
  auto [it, inserted] = tensors_.emplace(std::move(name), t);
  CHECK(inserted, "safetensors writer: duplicate tensor name '{}'", it->first);
  bytes_ += nbytes;
}

void SafetensorsWriter::add(std::string name, Tensor t) {
  add(std::move(name), t.view());
  owned_.push_back(std::move(t));  // the view above points into t's shared storage
}

void SafetensorsWriter::add_metadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

void SafetensorsWriter::write(const std::string& path) const {
  // Larger elements first, then by name, so a buffer starting 8-aligned aligns every tensor.
  std::vector<const std::pair<const std::string, TensorView>*> order;
  for (const auto& kv : tensors_) order.push_back(&kv);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return dtype_size(a->second.dtype) > dtype_size(b->second.dtype);
  });

  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = metadata_;
  size_t offset = 0;
  for (const auto* kv : order) {
    const TensorView& t = kv->second;
    std::vector<int64_t> shape(t.shape.dims.begin(), t.shape.dims.begin() + t.shape.rank);
    header[kv->first] = {{"dtype", dtype_to_safetensors(t.dtype)},
                         {"shape", shape},
                         {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');

  // Written under a temporary name, fsynced, then renamed (core/output_file.h): a failed
  // write (a full disk) leaves `path` as it was and names the file with the system's reason.
  ReplacingFile f(path);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
  f.write(len, 8);
  f.write(text.data(), text.size());
  for (const auto* kv : order) f.write(kv->second.data, kv->second.nbytes());
  f.commit();
}

}  // namespace fp8rl
