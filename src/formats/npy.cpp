#include "formats/npy.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <vector>

#include "core/check.h"
#include "core/input_file.h"
#include "core/output_file.h"

namespace fp8rl {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

struct NpyDescr {
  std::string_view descr;
  DType dtype;
};
constexpr std::array<NpyDescr, 4> kDescrs = {
    {{"<f4", DType::f32}, {"<f2", DType::f16}, {"<i4", DType::i32}, {"<i8", DType::i64}}};

struct File {
  FILE* f;
  ~File() {
    if (f) std::fclose(f);
  }
};

// The header is a Python dict literal; this reads the subset numpy writes: string keys, string,
// bool and int-tuple values.
class DictParser {
 public:
  DictParser(std::string_view s, const std::string& path) : s_(s), path_(path) {}

  struct Value {
    enum Kind { string, boolean, tuple } kind;
    std::string str;
    bool b = false;
    std::vector<int64_t> ints;
  };

  std::map<std::string, Value> parse() {
    std::map<std::string, Value> out;
    expect('{');
    while (!peek('}')) {
      std::string key = parse_string();
      expect(':');
      Value v = parse_value();
      CHECK(out.emplace(key, std::move(v)).second, "npy file '{}': header repeats key '{}'", path_,
            key);
      if (!peek('}')) expect(',');
    }
    expect('}');
    skip_space();
    CHECK(pos_ == s_.size(), "npy file '{}': trailing text after the header dict", path_);
    return out;
  }

 private:
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t')) ++pos_;
  }
  bool peek(char c) {
    skip_space();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  void expect(char c) {
    CHECK(peek(c), "npy file '{}': malformed header dict: expected '{}' at offset {}", path_, c,
          pos_);
    ++pos_;
  }
  std::string parse_string() {
    skip_space();
    CHECK(pos_ < s_.size() && (s_[pos_] == '\'' || s_[pos_] == '"'),
          "npy file '{}': malformed header dict: expected a string at offset {}", path_, pos_);
    const char q = s_[pos_++];
    const size_t end = s_.find(q, pos_);
    CHECK(end != std::string_view::npos, "npy file '{}': unterminated string in the header", path_);
    std::string out(s_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return out;
  }
  Value parse_value() {
    skip_space();
    Value v{Value::string, {}, false, {}};
    if (peek('\'') || peek('"')) {
      v.str = parse_string();
    } else if (s_.substr(pos_, 4) == "True" || s_.substr(pos_, 5) == "False") {
      v.kind = Value::boolean;
      v.b = s_[pos_] == 'T';
      pos_ += v.b ? 4 : 5;
    } else if (peek('(')) {
      v.kind = Value::tuple;
      ++pos_;
      while (!peek(')')) {
        v.ints.push_back(parse_int());
        if (!peek(')')) expect(',');
      }
      ++pos_;
    } else {
      RAISE("npy file '{}': malformed header dict: unexpected value at offset {}", path_, pos_);
    }
    return v;
  }
  int64_t parse_int() {
    skip_space();
    const size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      CHECK(!__builtin_mul_overflow(v, uint64_t(10), &v) &&
                !__builtin_add_overflow(v, uint64_t(s_[pos_] - '0'), &v) &&
                v <= uint64_t(std::numeric_limits<int64_t>::max()),
            "npy file '{}': shape entry overflows", path_);
      ++pos_;
    }
    CHECK(pos_ > start, "npy file '{}': shape entry at offset {} is not a non-negative integer",
          path_, start);
    if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;  // Python 2 longs in old files
    return int64_t(v);
  }

  std::string_view s_;
  size_t pos_ = 0;
  const std::string& path_;
};

void write_strided(FILE* f, const TensorView& t, int dim, const char* p, bool* ok) {
  const size_t es = dtype_size(t.dtype);
  if (dim == t.rank()) {
    *ok = *ok && std::fwrite(p, 1, es, f) == es;
    return;
  }
  for (int64_t i = 0; i < t.shape[dim] && *ok; ++i)
    write_strided(f, t, dim + 1, p + i * t.strides[dim] * int64_t(es), ok);
}

}  // namespace

void write_npy(const std::string& path, const TensorView& t) {
  std::string_view descr;
  for (const auto& d : kDescrs)
    if (d.dtype == t.dtype) descr = d.descr;
  CHECK(!descr.empty(), "write_npy '{}': dtype {} has no numpy equivalent (convert to f32)", path,
        dtype_name(t.dtype));
  CHECK(t.device == Device::cpu, "write_npy '{}': tensor is on {}, not the CPU", path,
        device_name(t.device));
  std::string shape;
  for (int i = 0; i < t.rank(); ++i) shape += fmt::format("{}{}", i ? ", " : "", t.shape[i]);
  if (t.rank() == 1) shape += ',';  // a Python 1-tuple: "(7,)"
  std::string dict =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, shape);
  // numpy pads the header with spaces and a newline so that the data starts 64-aligned.
  int version = 1;
  size_t prefix = kMagicLen + 2 + 2;
  size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  if (total - prefix > 65535) {
    version = 2;
    prefix = kMagicLen + 2 + 4;
    total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  }
  dict.resize(total - prefix - 1, ' ');
  dict += '\n';

  std::string head(kMagic, kMagicLen);
  head += char(version);
  head += char(0);
  const size_t hlen = dict.size();
  for (size_t i = 0; i < (version == 1 ? 2u : 4u); ++i) head += char((hlen >> (8 * i)) & 0xff);
  head += dict;

  // Only a regular file is ever replaced; a symlink planted at the temporary name is removed,
  // not followed.
  check_replaceable(path);
  const std::string tmp = path + ".tmp";
  std::error_code tmp_ec;
  std::filesystem::remove(tmp, tmp_ec);
  File f{std::fopen(tmp.c_str(), "wb")};

  CHECK(f.f != nullptr, "write_npy: cannot create '{}': {}", tmp, std::strerror(errno));
  bool ok = std::fwrite(head.data(), 1, head.size(), f.f) == head.size();
  if (t.is_contiguous()) {
    ok = ok && (t.nbytes() == 0 || std::fwrite(t.data, 1, t.nbytes(), f.f) == t.nbytes());
  } else if (t.numel() > 0) {
    write_strided(f.f, t, 0, static_cast<const char*>(t.data), &ok);
  }
  ok = std::fclose(f.f) == 0 && ok;
  f.f = nullptr;
  if (!ok) {
    std::remove(tmp.c_str());
    RAISE("write_npy: writing '{}' failed", tmp);
  }
  CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "write_npy: renaming '{}' to '{}' failed: {}",
        tmp, path, std::strerror(errno));
}

namespace {

// The magic, version and header length at the start of a .npy file of file_size bytes (`pre`:
// its first 12 bytes or all of a shorter file); returns where the data starts.
size_t npy_data_start(std::string_view pre, uint64_t file_size, const std::string& path) {
  CHECK(pre.size() >= kMagicLen + 2 && std::memcmp(pre.data(), kMagic, kMagicLen) == 0,
        "npy file '{}': not a .npy file (bad magic)", path);
  const int major = static_cast<unsigned char>(pre[kMagicLen]);
  const int minor = static_cast<unsigned char>(pre[kMagicLen + 1]);
  CHECK((major == 1 || major == 2 || major == 3) && minor == 0,
        "npy file '{}': unsupported format version {}.{}", path, major, minor);
  const size_t len_bytes = major == 1 ? 2 : 4;
  CHECK(pre.size() >= kMagicLen + 2 + len_bytes, "npy file '{}': truncated header", path);
  size_t hlen = 0;
  for (size_t i = 0; i < len_bytes; ++i)
    hlen |= size_t(static_cast<unsigned char>(pre[kMagicLen + 2 + i])) << (8 * i);
  const size_t data_start = kMagicLen + 2 + len_bytes + hlen;
  CHECK(data_start <= file_size, "npy file '{}': header length {} runs past the end of the file",
        path, hlen);
  return data_start;
}

struct NpyHeader {
  DType dtype;
  Shape shape;
  uint64_t data_bytes;
};

// The header dict `text` of a file whose data (from data_start) runs to file_size.
NpyHeader parse_npy_dict(std::string_view text, uint64_t file_size, size_t data_start,
                         const std::string& path) {
  const auto dict = DictParser(text, path).parse();
  CHECK(
      dict.size() == 3 && dict.count("descr") && dict.count("fortran_order") && dict.count("shape"),
      "npy file '{}': header must have exactly the keys descr, fortran_order, shape", path);
  const auto& descr = dict.at("descr");
  const auto& fortran = dict.at("fortran_order");
  const auto& shape_v = dict.at("shape");
  CHECK(descr.kind == DictParser::Value::string, "npy file '{}': descr is not a string", path);
  CHECK(fortran.kind == DictParser::Value::boolean, "npy file '{}': fortran_order is not a bool",
        path);
  CHECK(shape_v.kind == DictParser::Value::tuple, "npy file '{}': shape is not a tuple", path);
  CHECK(!fortran.b, "npy file '{}': Fortran-order arrays are not supported", path);
  DType dtype = DType::f32;
  bool known = false;
  for (const auto& d : kDescrs)
    if (d.descr == descr.str) dtype = d.dtype, known = true;
  CHECK(known, "npy file '{}': dtype '{}' is not supported (only <f4, <f2, <i4, <i8)", path,
        descr.str);
  CHECK(shape_v.ints.size() <= size_t(kMaxDims), "npy file '{}': rank {} above the supported {}",
        path, shape_v.ints.size(), kMaxDims);
  uint64_t nbytes = dtype_size(dtype);
  for (int64_t d : shape_v.ints)
    CHECK(!__builtin_mul_overflow(nbytes, uint64_t(d), &nbytes), "npy file '{}': shape overflows",
          path);
  CHECK(file_size - data_start == nbytes,
        "npy file '{}': shape needs {} data bytes but the file holds {}", path, nbytes,
        file_size - data_start);
  return {dtype, Shape::from(shape_v.ints.begin(), shape_v.ints.end()), nbytes};
}

}  // namespace

Tensor parse_npy(std::string_view bytes, const std::string& what) {
  const size_t data_start = npy_data_start(bytes.substr(0, kMagicLen + 2 + 4), bytes.size(), what);
  const size_t dict_start = bytes[kMagicLen] == 1 ? kMagicLen + 4 : kMagicLen + 6;
  const NpyHeader h = parse_npy_dict(bytes.substr(dict_start, data_start - dict_start),
                                     bytes.size(), data_start, what);
  Tensor t = Tensor::empty(h.shape, h.dtype);
  if (h.data_bytes > 0) std::memcpy(t.view().data, bytes.data() + data_start, h.data_bytes);
  return t;
}

Tensor read_npy(const std::string& path) {
  const InputFile in = InputFile::open(path, "npy file");
  File f{::fdopen(::dup(in.fd()), "rb")};
  CHECK(f.f != nullptr, "npy file '{}': cannot open: {}", path, std::strerror(errno));
  CHECK(std::fseek(f.f, 0, SEEK_END) == 0, "npy file '{}': cannot seek", path);
  const long file_size_l = std::ftell(f.f);
  CHECK(file_size_l >= 0, "npy file '{}': cannot tell its size", path);
  const size_t file_size = size_t(file_size_l);
  std::rewind(f.f);

  std::string pre(std::min<size_t>(file_size, kMagicLen + 2 + 4), '\0');
  CHECK(std::fread(pre.data(), 1, pre.size(), f.f) == pre.size(), "npy file '{}': read failed",
        path);
  const size_t data_start = npy_data_start(pre, file_size, path);
  const size_t dict_start = pre[kMagicLen] == 1 ? kMagicLen + 4 : kMagicLen + 6;
  std::string text(data_start - dict_start, '\0');
  CHECK(std::fseek(f.f, long(dict_start), SEEK_SET) == 0 &&
            std::fread(text.data(), 1, text.size(), f.f) == text.size(),
        "npy file '{}': truncated header", path);
  const NpyHeader h = parse_npy_dict(text, file_size, data_start, path);

  Tensor t = Tensor::empty(h.shape, h.dtype);
  CHECK(h.data_bytes == 0 || std::fread(t.view().data, 1, h.data_bytes, f.f) == h.data_bytes,
        "npy file '{}': read failed", path);
  return t;
}

}  // namespace fp8rl
