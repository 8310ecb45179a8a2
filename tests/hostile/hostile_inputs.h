// Generators of hostile inputs for the CLI suite: a copy of the demo model to spoil, raw
// safetensors rewriting (the test's own writer, so that it can write what fp8rl's writer never
// would: unknown dtypes, NaNs, 200k tensors, a nested header), deep JSON, special files.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace fp8rl::test::hostile {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

inline std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// `levels` nested arrays: [[[...]]].
inline std::string deep_array(int levels) {
  return std::string(size_t(levels), '[') + std::string(size_t(levels), ']');
}

// The demo model (a 0.8M-parameter Qwen3 with a tokenizer and chat template), copied to `dir`.
inline fs::path copy_demo_model(const fs::path& dir) {
  fs::copy(fs::path(FP8RL_SOURCE_DIR) / "examples/demo/model", dir, fs::copy_options::recursive);
  return dir;
}

inline void edit_json(const fs::path& path, const std::function<void(ojson&)>& edit) {
  ojson j = ojson::parse(read_bytes(path));
  edit(j);
  write_bytes(path, j.dump(1));
}

// A safetensors file as header + each tensor's bytes, to edit and write back with the offsets
// laid out again in header order.
struct RawSafetensors {
  ojson header;                             // the tensors' entries and __metadata__
  std::map<std::string, std::string> data;  // name -> bytes

  static RawSafetensors read(const fs::path& path) {
    const std::string b = read_bytes(path);
    uint64_t n = 0;
    std::memcpy(&n, b.data(), 8);
    RawSafetensors raw;
    raw.header = ojson::parse(b.substr(8, n));
    for (const auto& [name, entry] : raw.header.items()) {
      if (name == "__metadata__") continue;
      const uint64_t begin = entry["data_offsets"][0], end = entry["data_offsets"][1];
      raw.data[name] = b.substr(8 + n + begin, end - begin);
    }
    return raw;
  }

  void write(const fs::path& path) {
    std::string body;
    for (auto& [name, entry] : header.items()) {
      if (name == "__metadata__") continue;
      const std::string& bytes = data[name];
      entry["data_offsets"] = {body.size(), body.size() + bytes.size()};
      body += bytes;
    }
    write_with_header(path, header.dump(), body);
  }

  // Any header text (valid JSON or not) before `body`, padded to 8 bytes.
  static void write_with_header(const fs::path& path, std::string text, const std::string& body) {
    while (text.size() % 8 != 0) text += ' ';
    const uint64_t n = text.size();
    std::string out(8, '\0');
    std::memcpy(out.data(), &n, 8);
    write_bytes(path, out + text + body);
  }
};

// A FIFO at `path` (nothing ever writes it unless the test starts a writer).
inline void make_fifo(const fs::path& path) {
  fs::remove(path);
  if (::mkfifo(path.c_str(), 0600) != 0) throw std::runtime_error("mkfifo " + path.string());
}

// How a file is replaced by something that is not a regular file.
enum class Special { fifo, directory, dev_zero, symlink_loop };

inline const char* special_name(Special s) {
  switch (s) {
    case Special::fifo:
      return "Fifo";
    case Special::directory:
      return "Directory";
    case Special::dev_zero:
      return "DevZero";
    case Special::symlink_loop:
      return "SymlinkLoop";
  }
  return "";
}

// Replaces `path` by the special file: a FIFO, an empty directory, a symlink to /dev/zero (a
// device named through a link: the tests never create device nodes), or a symlink to a symlink
// back to it.
inline void make_special(const fs::path& path, Special s) {
  fs::remove_all(path);
  switch (s) {
    case Special::fifo:
      make_fifo(path);
      break;
    case Special::directory:
      fs::create_directory(path);
      break;
    case Special::dev_zero:
      fs::create_symlink("/dev/zero", path);
      break;
    case Special::symlink_loop: {
      const fs::path other = path.string() + ".loop";
      fs::remove(other);
      fs::create_symlink(other, path);
      fs::create_symlink(path, other);
      break;
    }
  }
}

// A sparse file of `bytes` NULs (no disk used): an "endless" input that is a regular file.
inline void make_sparse(const fs::path& path, const std::string& prefix, uint64_t bytes) {
  write_bytes(path, prefix);
  fs::resize_file(path, bytes);
}

}  // namespace fp8rl::test::hostile
