#include <nlohmann/json.hpp>

#include <filesystem>

#include "core/check.h"
#include "core/output_file.h"
#include "formats/json_read.h"
#include "formats/safetensors.h"

namespace fp8rl {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingleName = "model.safetensors";
constexpr const char* kIndexName = "model.safetensors.index.json";

// weight_map of an index: tensor name -> shard file name (relative to the index's folder).
std::map<std::string, std::string> read_weight_map(const std::string& path) {
  const nlohmann::json j = read_json_file(path);
  CHECK(j.is_object(), "checkpoint index '{}': not a JSON object", path);
  CHECK(j.contains("weight_map") && j["weight_map"].is_object(),
        "checkpoint index '{}': no 'weight_map' object", path);
  std::map<std::string, std::string> map;
  for (const auto& [name, shard] : j["weight_map"].items()) {
    CHECK(shard.is_string(), "checkpoint index '{}': tensor '{}': shard {} is not a string", path,
          name, json_excerpt(shard));
    const std::string file = shard.get<std::string>();
    const fs::path p(file);
    bool escapes = p.is_absolute() || file.empty();
    for (const auto& part : p) escapes = escapes || part == "..";
    CHECK(!escapes, "checkpoint index '{}': tensor '{}': shard '{}' is not a file in the folder",
          path, name, file);
    map.emplace(name, file);
  }
  return map;
}

}  // namespace

bool Checkpoint::present(const std::string& dir) {
  std::error_code ec;
  return fs::symlink_status(fs::path(dir) / kSingleName, ec).type() != fs::file_type::not_found ||
         fs::symlink_status(fs::path(dir) / kIndexName, ec).type() != fs::file_type::not_found;
}

Checkpoint Checkpoint::open(const std::string& dir_or_file) {
  Checkpoint c;
  c.root_ = dir_or_file;
  std::error_code ec;
  CHECK(fs::exists(dir_or_file, ec), "checkpoint '{}' does not exist", dir_or_file);
  fs::path index;
  if (fs::is_directory(dir_or_file, ec)) {
    const fs::path dir(dir_or_file);
    // Anything named model.safetensors (lstat) is opened as the file: a directory, FIFO or
    // symlink loop there is then reported as what it is, not as a missing checkpoint.
    if (fs::symlink_status(dir / kSingleName, ec).type() != fs::file_type::not_found) {
      c.files_.push_back(SafetensorsFile::open((dir / kSingleName).string()));
      for (const auto& t : c.files_[0]->tensors()) c.entries_.emplace(t.name, Entry{&t, 0});
      return c;
    }
    index = dir / kIndexName;
    CHECK(fs::exists(index, ec), "checkpoint '{}': neither {} nor {} found", dir_or_file,
          kSingleName, kIndexName);
  } else if (std::string_view(dir_or_file).ends_with(".index.json")) {
    index = dir_or_file;
  } else {
    c.files_.push_back(SafetensorsFile::open(dir_or_file));
    for (const auto& t : c.files_[0]->tensors()) c.entries_.emplace(t.name, Entry{&t, 0});
    return c;
  }
  const fs::path dir = index.parent_path();

  const std::string index_path = index.string();
  const std::map<std::string, std::string> weight_map = read_weight_map(index_path);
  std::map<std::string, size_t> shard_ids;
  for (const auto& [name, shard] : weight_map) {
    auto [it, inserted] = shard_ids.emplace(shard, c.files_.size());
    if (!inserted) continue;
    const fs::path shard_path = dir / shard;
    CHECK(fs::exists(shard_path, ec),
          "checkpoint index '{}': shard '{}' of tensor '{}' does not exist", index_path,
          shard_path.string(), name);
    c.files_.push_back(SafetensorsFile::open(shard_path.string()));
  }
  for (const auto& [name, shard] : weight_map) {
    const size_t id = shard_ids.at(shard);
    const SafetensorsTensorInfo* info = c.files_[id]->find(name);
    CHECK(info != nullptr, "checkpoint index '{}': tensor '{}' is not in its shard '{}'",
          index_path, name, c.files_[id]->path());
    c.entries_.emplace(name, Entry{info, id});
  }
  // A tensor in a shard must be the one the index points at: anything else is ambiguous.
  for (size_t id = 0; id < c.files_.size(); ++id) {
    for (const auto& t : c.files_[id]->tensors()) {
      auto it = c.entries_.find(t.name);
      CHECK(it != c.entries_.end(),
            "checkpoint index '{}': tensor '{}' in shard '{}' is not in the index", index_path,
            t.name, c.files_[id]->path());
      CHECK(it->second.file == id,
            "checkpoint index '{}': tensor '{}' is in two shards, '{}' and '{}'", index_path,
            t.name, c.files_[it->second.file]->path(), c.files_[id]->path());
    }
  }
  return c;
}

const Checkpoint::Entry& Checkpoint::entry(std::string_view name) const {
  auto it = entries_.find(name);
  CHECK(it != entries_.end(), "checkpoint '{}': no tensor '{}'", root_, name);
  return it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& kv : entries_) out.push_back(kv.first);
  return out;
}

bool Checkpoint::contains(std::string_view name) const {
  return entries_.find(name) != entries_.end();
}

const SafetensorsTensorInfo& Checkpoint::info(std::string_view name) const {
  return *entry(name).info;
}

TensorView Checkpoint::view(std::string_view name) const {
  const Entry& e = entry(name);
  return files_[e.file]->view(*e.info);
}

const std::string& Checkpoint::file_of(std::string_view name) const {
  return files_[entry(name).file]->path();
}

size_t Checkpoint::total_bytes() const {
  size_t n = 0;
  for (const auto& kv : entries_) n += kv.second.info->nbytes();
  return n;
}

void write_checkpoint(const std::string& dir,
                      const std::vector<std::pair<std::string, TensorView>>& tensors,
                      size_t max_shard_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  CHECK(!ec, "write_checkpoint: cannot create '{}': {}", dir, ec.message());
  const fs::path d(dir);

  std::map<std::string_view, int> seen;
  for (const auto& [name, t] : tensors)
    CHECK(seen.emplace(name, 0).second, "write_checkpoint: duplicate tensor name '{}'", name);

  // Fill shards in order; a tensor larger than the limit gets a shard of its own.
  std::vector<SafetensorsWriter> shards(1);
  std::vector<size_t> shard_of;
  for (const auto& [name, t] : tensors) {
    if (shards.back().bytes() > 0 && shards.back().bytes() + t.nbytes() > max_shard_bytes)
      shards.emplace_back();
    shards.back().add(name, t);
    shard_of.push_back(shards.size() - 1);
  }

  if (shards.size() == 1) {
    shards[0].write((d / kSingleName).string());
    fs::remove(d / kIndexName, ec);
    return;
  }
  const size_t n = shards.size();
  std::vector<std::string> files;
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    files.push_back(fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n));
    shards[i].write((d / files.back()).string());
    total += shards[i].bytes();
  }
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < tensors.size(); ++i) weight_map[tensors[i].first] = files[shard_of[i]];
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string path = (d / kIndexName).string();
  write_file_replacing(path, index.dump(2) + "\n");
  fs::remove(d / kSingleName, ec);
}

}  // namespace fp8rl
